// What a Hugging Face model folder's config.json says that ckptscope reads: the model class (which
// decides the tied weights, util/tied_pairs.h), tie_word_embeddings as transformers reads it, and a
// block-quantized (FP8) checkpoint's quantization_config. The rest of the file is kept as text only,
// for a folder written from the model (configForCopy).
#pragma once

#include "util/dtype.h"
#include "util/error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

struct ModelConfig {
    std::vector<std::string> architectures;     // `architectures`, the classes save_pretrained recorded
    std::optional<bool> tieWordEmbeddings;      // top-level `tie_word_embeddings`
    std::optional<bool> textTieWordEmbeddings;  // `text_config.tie_word_embeddings` (composite models)
    bool tieEncoderDecoder = false;             // `tie_encoder_decoder` (transformers 4.x; 5.x ignores it)
    // `quantization_config` (transformers' utils/quantization_config.py): `quant_method` ("fp8" for
    // FineGrainedFP8Config), `weight_block_size` ([128, 128] in DeepSeek-V3 and FineGrainedFP8Config's
    // default), `fmt`, `activation_scheme`.
    struct Quantization {
        std::string method;
        std::optional<std::vector<std::int64_t>> blockSize;
        std::string format;
        std::string activationScheme;
        std::string scaleFormat;  // `scale_fmt` ("ue8m0" for power-of-two scales), "" when absent
    };
    std::optional<Quantization> quantization;
    std::string text;  // the file as read, which configForCopy rewrites for a copy of the model
};

// Parses config.json's text: a Corrupt error when it is not a JSON object.
[[nodiscard]] Expected<ModelConfig> parseModelConfig(std::string_view text);

// config.json for a Hugging Face folder written from this model (convert --shard-size): the text as
// read; where the weights were dequantized (`dequantizedTo`), without `quantization_config` and with
// the dtype transformers reads (`dtype`, and `torch_dtype` where the file has that older name) set to
// the one written, so from_pretrained loads the folder as the plain model it now is (with the
// quantization_config, it would take the weights for FP8 and look for their scales). Keys keep their
// order; transformers' indent of 2. Corrupt when the text is not a JSON object.
[[nodiscard]] Expected<std::string> configForCopy(const ModelConfig& config, std::optional<DType> dequantizedTo);

// config.json in `dir`, when there is one that parses (at most 64 MiB is read) and is a regular file
// inside `dir` once symlinks are resolved (memberOfFolder; a hub cache snapshot's blob link is);
// nullopt otherwise.
[[nodiscard]] std::optional<ModelConfig> readModelConfig(const std::string& dir);

}  // namespace ckpt
