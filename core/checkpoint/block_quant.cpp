#include "checkpoint/block_quant.h"

#include "util/shape_text.h"

#include <algorithm>
#include <unordered_map>

namespace ckpt {

namespace {

constexpr std::int64_t kDefaultBlock = 128;  // DeepSeek-V3's and FineGrainedFP8Config's weight_block_size

bool isFloat8Weight(DType t)
{
    return t == DType::Float8_e4m3fn || t == DType::Float8_e5m2 || t == DType::Float8_e4m3fnuz ||
           t == DType::Float8_e5m2fnuz;
}

bool holdsScales(DType t)
{
    return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16 || t == DType::Float8_e8m0fnu;
}

std::int64_t ceilDiv(std::int64_t a, std::int64_t b)
{
    // Not (a + b - 1) / b: a weight_block_size from config.json may be near INT64_MAX.
    return b > 0 ? a / b + (a % b != 0 ? 1 : 0) : 0;
}

// The names transformers gives a weight's scale (integrations/finegrained_fp8.py: `key.rsplit(".",
// 1)[0] + ".weight_scale_inv"` for a `.weight`, else `key + "_scale_inv"`), then `weight_scale`.
std::vector<std::string> scaleNames(std::string_view name)
{
    if (name == "weight" || name.ends_with(".weight") || name.ends_with("/weight")) {
        const std::string base(name.substr(0, name.size() - 6));
        return {base + "weight_scale_inv", base + "weight_scale"};
    }
    return {std::string(name) + "_scale_inv", std::string(name) + "_scale"};
}

void judge(const std::vector<BlockEntry>& tensors, const std::optional<ModelConfig::Quantization>& q, BlockScale& b)
{
    const BlockEntry& w = tensors[b.weight.value()];
    const BlockEntry& s = tensors[b.scale.value()];
    const std::vector<std::int64_t>& wShape = w.shape;
    const std::vector<std::int64_t>& sShape = s.shape;
    std::int64_t scaleCount = 1;
    for (const auto d : sShape) {
        scaleCount *= d;
    }
    if (wShape.size() < 2) {
        b.problem = "the weight is " + shapeText(wShape) + ", not a matrix";
        return;
    }
    const std::vector<std::int64_t> lead(wShape.begin(), wShape.end() - 2);
    const std::int64_t rows = wShape[wShape.size() - 2];
    const std::int64_t cols = wShape.back();
    auto grid = [&](std::int64_t bm, std::int64_t bn) {
        std::vector<std::int64_t> shape = lead;
        shape.push_back(ceilDiv(rows, bm));
        shape.push_back(ceilDiv(cols, bn));
        return shape;
    };
    const auto blockSize = q ? q->blockSize : std::nullopt;
    if (blockSize && blockSize->size() == 2) {
        b.block = *blockSize;
        b.blockFrom = "config.json weight_block_size";
        b.expectedScaleShape = grid(b.block[0], b.block[1]);
    } else if (scaleCount == 1) {
        b.block = {rows, cols};
        b.blockFrom = "one scale for the whole tensor";
        b.expectedScaleShape = sShape;
    } else if (sShape == grid(1, cols)) {
        b.block = {1, cols};
        b.blockFrom = "one scale per row";
        b.expectedScaleShape = sShape;
    } else if (sShape == grid(kDefaultBlock, kDefaultBlock)) {
        b.block = {kDefaultBlock, kDefaultBlock};
        b.blockFrom = "the 128x128 default of DeepSeek-V3 and FineGrainedFP8Config";
        b.expectedScaleShape = sShape;
    } else if (sShape.size() == wShape.size() && std::equal(lead.begin(), lead.end(), sShape.begin()) &&
               sShape[sShape.size() - 2] > 0 && sShape.back() > 0 && rows % sShape[sShape.size() - 2] == 0 &&
               cols % sShape.back() == 0) {
        b.block = {rows / sShape[sShape.size() - 2], cols / sShape.back()};
        b.blockFrom = "the scale's grid, as transformers derives it";
        b.expectedScaleShape = sShape;
    } else {
        b.block = {kDefaultBlock, kDefaultBlock};
        b.blockFrom = "the 128x128 default of DeepSeek-V3 and FineGrainedFP8Config";
        b.expectedScaleShape = grid(kDefaultBlock, kDefaultBlock);
    }
    if (b.block.size() != 2 || b.block[0] <= 0 || b.block[1] <= 0) {
        b.problem = "the block size " + shapeText(b.block) + " is not two positive numbers";
    } else if (sShape != b.expectedScaleShape) {
        b.problem = "its scale is " + shapeText(sShape) + ", but a " + shapeText(wShape) + " weight in " +
                    std::to_string(b.block[0]) + "x" + std::to_string(b.block[1]) + " blocks needs " +
                    shapeText(b.expectedScaleShape);
    } else if (!holdsScales(s.dtype)) {
        b.problem = "its scale is " + std::string(dtypeName(s.dtype)) + ", which holds no scales";
    } else if (!w.contiguous || !s.contiguous || !s.hasData) {
        b.problem = "the weight or its scale is not one contiguous run of stored bytes";
    }
}

}  // namespace

const BlockScale* BlockQuantization::ofWeight(TensorIndex t) const
{
    const auto it = std::find_if(weights.begin(), weights.end(), [&](const BlockScale& b) { return b.weight == t; });
    return it == weights.end() ? nullptr : &*it;
}

const BlockScale* BlockQuantization::ofScale(TensorIndex t) const
{
    const auto it = std::find_if(weights.begin(), weights.end(), [&](const BlockScale& b) { return b.scale == t; });
    return it == weights.end() ? nullptr : &*it;
}

BlockQuantization blockQuantization(const std::vector<BlockEntry>& tensors,
                                    const std::optional<ModelConfig::Quantization>& config)
{
    BlockQuantization out;
    out.config = config;
    if (std::none_of(tensors.begin(), tensors.end(), [](const BlockEntry& t) { return isFloat8Weight(t.dtype); })) {
        return out;  // the usual case, answered without a map of every name
    }
    const bool fp8Config = config && config->method == "fp8";
    std::unordered_map<std::string_view, std::uint32_t> byKey;
    for (std::uint32_t i = 0; i < tensors.size(); ++i) {
        byKey.emplace(tensors[i].key, i);
    }
    for (std::uint32_t i = 0; i < tensors.size(); ++i) {
        const BlockEntry& t = tensors[i];
        if (!isFloat8Weight(t.dtype) || !t.hasData) {
            continue;
        }
        // A key's dict prefix (checkpoint version: "<parent>/") is kept by scaleNames' suffix edit.
        std::optional<std::uint32_t> scale;
        for (const auto& name : scaleNames(t.key)) {
            if (const auto it = byKey.find(name); it != byKey.end()) {
                scale = it->second;
                break;
            }
        }
        if (!scale) {
            if (fp8Config) {
                out.unscaled.emplace_back(i);
            }
            continue;
        }
        BlockScale b;
        b.weight = TensorIndex{i};
        b.scale = TensorIndex{*scale};
        judge(tensors, out.config, b);
        out.weights.push_back(std::move(b));
    }
    return out;
}

BlockQuantization blockQuantization(const Checkpoint& c)
{
    std::optional<ModelConfig::Quantization> config;
    if (c.modelConfig && c.modelConfig->quantization) {
        config = c.modelConfig->quantization;
    }
    if (std::none_of(c.tensors.begin(), c.tensors.end(),
                     [](const TensorEntry& t) { return isFloat8Weight(t.dtype); })) {
        BlockQuantization none;
        none.config = config;
        return none;
    }
    // Keys made of the parent node and the name, so a weight's scale is its sibling in one dict.
    std::vector<BlockEntry> entries;
    entries.reserve(c.tensors.size());
    for (const auto& t : c.tensors) {
        const Node& n = c.nodes[t.node];
        BlockEntry e;
        e.key = std::to_string(n.parent.value()) + '/' + std::string(n.name);
        e.dtype = t.dtype;
        e.shape.assign(t.shape.begin(), t.shape.end());
        e.contiguous = t.contiguous && t.storage.valid();
        e.hasData = t.hasData();
        entries.push_back(std::move(e));
    }
    return blockQuantization(entries, config);
}

std::string blockScaleText(const BlockEntry& scale, const BlockScale& b)
{
    std::string text = "scale `" + scale.key + "` " + std::string(dtypeName(scale.dtype)) + " " +
                       shapeText(scale.shape) + ", " + blockText(b);
    return b.ok() ? text : text + ": " + b.problem;
}

std::string blockScaleText(const Checkpoint& c, const BlockScale& b)
{
    const TensorEntry& s = c.tensors[b.scale];
    BlockEntry e;
    e.key = std::string(s.path);
    e.dtype = s.dtype;
    e.shape.assign(s.shape.begin(), s.shape.end());
    return blockScaleText(e, b);
}

std::string blockText(const BlockScale& b)
{
    if (b.block.size() != 2) {
        return "blocks " + shapeText(b.block) + " (" + b.blockFrom + ")";
    }
    return std::to_string(b.block[0]) + "x" + std::to_string(b.block[1]) + " blocks (" + b.blockFrom + ")";
}

}  // namespace ckpt
