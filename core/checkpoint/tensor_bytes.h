// A tensor's elements in C order, gathered from its storage's mapped bytes in bounded chunks, so
// hashing, scanning and materialising views never needs the whole tensor in memory.
#pragma once

#include "checkpoint/checkpoint.h"

#include <functional>
#include <span>
#include <utility>

namespace ckpt {

// torch's is_contiguous for a strided view: C order (size-1 dimensions may have any stride), and
// every tensor with no elements counts as contiguous.
[[nodiscard]] bool isCContiguous(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& stride);

// The bytes [begin, end) of its storage a strided view reaches. The offset and strides count the
// tensor's own elements whatever class its storage was saved as: 2.x saves uint16/32/64, float8,
// complex32 and bits* through an UntypedStorage whose numel counts bytes (docs/format.md §4.2), and
// their views still step in the tensor's element size. So this, not the storage's dtype, is where a
// view's element size comes from. {0, 0} for a view with no elements; an end that would overflow is
// UINT64_MAX (past any storage).
struct ByteExtent {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
};
[[nodiscard]] ByteExtent viewByteExtent(DType dtype, std::int64_t storageOffset, std::span<const std::int64_t> shape,
                                        std::span<const std::int64_t> stride);

// A strided view as the fewest runs of adjacent bytes that, visited in order, give its C-order
// bytes: size-1 dimensions are dropped, trailing dimensions that continue the run are folded into
// it, and neighbouring outer dimensions that step evenly are merged, so the walk below does one
// callback per run and its odometer has as few wheels as the view allows. Every run has the same
// length, which lets callers choose between buffering runs and passing them through once.
struct CRuns {
    std::uint64_t runBytes = 0;            // 0 when the view has no elements
    std::vector<std::int64_t> size;        // the outer dimensions, outermost first
    std::vector<std::int64_t> byteStride;  // their strides, in bytes
};

// Validates nothing: callers bound-check the view against its storage first (the index, the
// writer's describeTensor and diagnose's checkBounds do), since a shape and stride alone cannot
// say what is in range.
[[nodiscard]] CRuns cOrderRuns(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& stride,
                               std::size_t elementSize);

// Calls fn(byteOffsetInStorage, runBytes) -> bool for each run in C order, starting from the view's
// first byte `byteOffset`; returns false when fn stopped it. A template so that callers visiting
// one-element runs (transposed weights) pay no indirect call per element.
template <class Fn> bool forEachCOrderRun(const CRuns& runs, std::uint64_t byteOffset, Fn&& fn)
{
    if (runs.runBytes == 0) {
        return true;
    }
    // The innermost outer dimension is a plain loop; the odometer only turns the ones above it. A
    // single run is a loop of one, so fn has one call site and the compiler inlines it.
    const bool single = runs.size.empty();
    const std::size_t inner = single ? 0 : runs.size.size() - 1;
    const std::int64_t innerSize = single ? 1 : runs.size[inner];
    const std::int64_t innerStep = single ? 0 : runs.byteStride[inner];
    std::vector<std::int64_t> index(inner, 0);
    auto at = static_cast<std::int64_t>(byteOffset);
    for (;;) {
        std::int64_t run = at;
        for (std::int64_t i = 0; i < innerSize; ++i, run += innerStep) {
            if (!fn(static_cast<std::uint64_t>(run), runs.runBytes)) {
                return false;
            }
        }
        std::size_t d = inner;
        for (;;) {
            if (d == 0) {
                return true;
            }
            --d;
            at += runs.byteStride[d];
            if (++index[d] < runs.size[d]) {
                break;
            }
            at -= runs.byteStride[d] * runs.size[d];
            index[d] = 0;
        }
    }
}

template <class Fn>
bool forEachCOrderRun(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& stride,
                      std::int64_t elementOffset, std::size_t elementSize, Fn&& fn)
{
    return forEachCOrderRun(cOrderRuns(shape, stride, elementSize),
                            static_cast<std::uint64_t>(elementOffset) * elementSize, std::forward<Fn>(fn));
}

// Calls `sink` with consecutive chunks of the tensor's C-order bytes: views straight into the
// mapping when the tensor is one run or its runs exceed `chunkBytes` (split at `chunkBytes`),
// otherwise whole runs gathered into a buffer of at most `chunkBytes` (at least one run).
// Storage-less tensors (meta, sparse, quantized wrappers) give an Unsupported error.
Expected<void> forEachTensorChunk(const Checkpoint& c, const TensorEntry& t, const std::function<bool(Bytes)>& sink,
                                  std::size_t chunkBytes = std::size_t{8} << 20U);

}  // namespace ckpt
