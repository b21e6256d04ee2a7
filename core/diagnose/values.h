// Reading tensor values: NaN/Inf counts (the nonfinite-values rule) and per-tensor statistics
// (the window's details panel). Everything runs over the storage bytes as saved (the mapping for
// stored zip members), over raw bits, with one dtype dispatch per tensor, never per element.
#pragma once

#include "checkpoint/checkpoint.h"

#include <cstdint>
#include <stop_token>
#include <string>
#include <vector>

namespace ckpt::diagnose {

// `inf` counts every infinite element; `negInf` the negative ones (for complex values, an element
// is NaN/infinite when either part is, as torch.isnan/isinf say, and no sign is counted).
struct NonFinite {
    std::uint64_t nan = 0;
    std::uint64_t inf = 0;
    std::uint64_t negInf = 0;
    [[nodiscard]] std::uint64_t total() const { return nan + inf; }
};

// A tensor's view of its storage, in elements (torch's shape/stride/storage_offset).
struct TensorView {
    DType dtype = DType::Unknown;
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> stride;
    std::int64_t offset = 0;
    bool bigEndian = false;  // the archive's `byteorder` record says "big"
    // A per-tensor affine quantized tensor: statistics are over `(q - zeroPoint) * scale`, the
    // values torch's dequantize() gives, not over the stored integer codes.
    bool dequantize = false;
    double scale = 1;
    double zeroPoint = 0;
};

// Counts over `data.size() / elementSize(t)` contiguous elements; zero for types without NaN/Inf.
[[nodiscard]] NonFinite countNonFinite(DType t, Bytes data);

// Counts over a (possibly strided) view; an error when the view reaches past the storage.
Expected<NonFinite> countNonFinite(const TensorView& v, Bytes storage);

struct TensorStats {
    DType dtype = DType::Unknown;
    std::uint64_t numel = 0;
    std::uint64_t nan = 0;
    std::uint64_t inf = 0;
    std::uint64_t negInf = 0;
    std::uint64_t finite = 0;
    // Over the finite values (the magnitude |z| for complex dtypes, 0/1 for bool); 0 when none.
    double min = 0;
    double max = 0;
    double mean = 0;
    double std = 0;                        // population standard deviation
    std::vector<std::uint64_t> histogram;  // equal-width bins over [min, max]
    double histLow = 0;
    double histHigh = 0;
    std::string preview;  // the first values in logical (row-major) order: "[0.1, -2.5, nan, ...]"
};

struct StatsOptions {
    std::size_t bins = 32;
    std::size_t previewCount = 16;
};

Expected<TensorStats> viewStats(const TensorView& v, Bytes storage, const StatsOptions& opts = {},
                                std::stop_token stop = {});

// The view of tensors[tensor] and its storage's bytes, read through Checkpoint::storageData.
Expected<TensorStats> tensorStats(const Checkpoint& ckpt, TensorIndex tensor, const StatsOptions& opts = {},
                                  std::stop_token stop = {});
Expected<NonFinite> tensorNonFinite(const Checkpoint& ckpt, TensorIndex tensor, std::vector<std::byte>& scratch);

[[nodiscard]] TensorView viewOf(const Checkpoint& ckpt, const TensorEntry& t);

}  // namespace ckpt::diagnose
