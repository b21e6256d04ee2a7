// libFuzzer entry for the transformers config.json reader (util/model_config.h): any bytes as a
// model folder's config.json must parse to a ModelConfig or give an error, and what the readers
// after it make of a parsed one (the tied names, util/tied_pairs.h; the FP8 blocks its
// quantization_config's weight_block_size gives, checkpoint/block_quant.h; the copy a convert
// --shard-size --dequantize writes, configForCopy) must follow without a crash, a hang or a
// sanitizer report (deep nesting, huge, zero, negative or fractional block sizes, wrong types).
#include "checkpoint/block_quant.h"
#include "util/model_config.h"
#include "util/tied_pairs.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

// A small FP8 state dict as a set's listing: weights of several shapes (a matrix, an MoE's
// experts, a vector) with their scales, one without, and the names tied_pairs looks for.
const std::vector<ckpt::BlockEntry>& entries()
{
    static const std::vector<ckpt::BlockEntry> e = {
        {"model.embed_tokens.weight", ckpt::DType::BFloat16, {1000, 256}, true, true},
        {"model.layers.0.q.weight", ckpt::DType::Float8_e4m3fn, {300, 257}, true, true},
        {"model.layers.0.q.weight_scale_inv", ckpt::DType::Float32, {3, 3}, true, true},
        {"model.layers.0.experts.weight", ckpt::DType::Float8_e4m3fn, {4, 256, 128}, true, true},
        {"model.layers.0.experts.weight_scale_inv", ckpt::DType::Float32, {4, 2, 1}, true, true},
        {"model.layers.0.v.weight", ckpt::DType::Float8_e4m3fn, {70000, 7168}, true, false},
        {"model.layers.0.v.weight_scale_inv", ckpt::DType::Float32, {547, 56}, true, false},
        {"model.layers.0.k.weight", ckpt::DType::Float8_e4m3fn, {16}, true, true},
        {"model.layers.0.k.weight_scale_inv", ckpt::DType::Float32, {1}, true, true},
        {"model.layers.0.o.weight", ckpt::DType::Float8_e4m3fn, {128, 128}, true, true},
    };
    return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view text(
        reinterpret_cast<const char*>(data),  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
        size);
    auto config = ckpt::parseModelConfig(text);
    if (!config) {
        return 0;
    }
    const auto q = ckpt::blockQuantization(entries(), config->quantization);
    for (const auto& b : q.weights) {
        (void)ckpt::blockScaleText(entries()[b.scale.value()], b);
    }
    std::vector<std::string> keys;
    for (const auto& e : entries()) {
        keys.push_back(e.key);
    }
    keys.emplace_back("lm_head.weight");
    (void)ckpt::tiedWeights(std::optional<ckpt::ModelConfig>(*config), keys);
    (void)ckpt::configForCopy(*config, std::nullopt);
    (void)ckpt::configForCopy(*config, ckpt::DType::BFloat16);
    return 0;
}
