// Block-quantized FP8 weights, as DeepSeek-V3 and transformers' FineGrainedFP8Config store them
// (docs/format.md §17): a `weight` of dtype float8_e4m3fn beside a `weight_scale_inv` (float32; bf16
// or float8_e8m0fnu in some), one scale per block of `weight_block_size` (config.json's
// `quantization_config`, [128, 128] by default): the value of element (i, j) is
// `float(weight[i, j]) * scale_inv[i / bm, j / bn]`, so for a [M, N] weight the scale is
// [ceil(M / bm), ceil(N / bn)] (transformers' FP8Linear allocates it so; leading dimensions, an
// MoE's experts, are carried as they are). `weight_scale` (compressed-tensors, fbgemm: one scale
// per tensor or per row) multiplies the same way.
#pragma once

#include "checkpoint/checkpoint.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ckpt {

// One float8 weight and the scale beside it.
struct BlockScale {
    TensorIndex weight;
    TensorIndex scale;
    std::vector<std::int64_t> block;               // [rows, columns] of weight per scale
    std::string blockFrom;                         // where `block` comes from, for people
    std::vector<std::int64_t> expectedScaleShape;  // what the weight needs
    // Why it cannot be dequantized as stored ("" when it can): a scale of the wrong shape, a dtype
    // that holds no scale, a weight that is not one C-contiguous run.
    std::string problem;
    [[nodiscard]] bool ok() const { return problem.empty(); }
};

struct BlockQuantization {
    std::vector<BlockScale> weights;                  // in tensor order
    std::vector<TensorIndex> unscaled;                // float8 weights with no scale beside them
    std::optional<ModelConfig::Quantization> config;  // quantization_config, when config.json had one
    [[nodiscard]] bool empty() const { return weights.empty() && unscaled.empty(); }
    // The entry whose weight, or scale, is tensor `t`; nullptr for others.
    [[nodiscard]] const BlockScale* ofWeight(TensorIndex t) const;
    [[nodiscard]] const BlockScale* ofScale(TensorIndex t) const;
};

// The block-quantized weights of a state dict (keys that are siblings in one dict). `unscaled` is
// only filled where config.json says the checkpoint is FP8-quantized: elsewhere a float8 tensor
// alone is an ordinary tensor.
[[nodiscard]] BlockQuantization blockQuantization(const Checkpoint& c);

// The same over a list of tensors of one flat state dict (a set's listing): BlockScale's indices are
// positions in `tensors`.
struct BlockEntry {
    std::string key;
    DType dtype = DType::Unknown;
    std::vector<std::int64_t> shape;
    bool contiguous = true;  // one C-order run of stored bytes (false: cannot be dequantized as stored)
    bool hasData = true;
};
[[nodiscard]] BlockQuantization blockQuantization(const std::vector<BlockEntry>& tensors,
                                                  const std::optional<ModelConfig::Quantization>& config);

// "128x128 blocks (config.json weight_block_size)": the block and where it comes from.
[[nodiscard]] std::string blockText(const BlockScale& b);
// "scale `x.weight_scale_inv` float32 [2, 4], 128x128 blocks (config.json weight_block_size)", and
// the problem when there is one: what inspect and the window say of a weight.
[[nodiscard]] std::string blockScaleText(const Checkpoint& c, const BlockScale& b);
[[nodiscard]] std::string blockScaleText(const BlockEntry& scale, const BlockScale& b);

}  // namespace ckpt
