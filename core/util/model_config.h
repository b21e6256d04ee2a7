// What a Hugging Face model folder's config.json says that ckptscope reads: the model class (which
// decides the tied weights, util/tied_pairs.h), tie_word_embeddings as transformers reads it, and a
// block-quantized (FP8) checkpoint's quantization_config. Nothing else of the file is used.
#pragma once

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
};

// Parses config.json's text: a Corrupt error when it is not a JSON object.
[[nodiscard]] Expected<ModelConfig> parseModelConfig(std::string_view text);

// config.json in `dir`, when there is one that parses (at most 64 MiB is read); nullopt otherwise.
[[nodiscard]] std::optional<ModelConfig> readModelConfig(const std::string& dir);

}  // namespace ckpt
