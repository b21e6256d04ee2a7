// The one builder of a plain tensor record for the code that makes a pickle rather than reads one
// (a set's consolidated state dict, a safetensors file's, weights-only rewrites): what torch.save
// writes for a C-contiguous strided tensor, `_rebuild_tensor_v2(storage, offset, size, stride)`.
#pragma once

#include "pickle/value.h"
#include "util/dtype.h"

#include <algorithm>
#include <cstdint>
#include <span>

namespace ckpt::pickle {

// Row-major strides of `shape` in elements (a 0-size dimension counts as 1, as torch's do).
[[nodiscard]] inline SmallVector<std::int64_t> contiguousStrides(std::span<const std::int64_t> shape)
{
    SmallVector<std::int64_t> stride;
    stride.assign(shape.size(), 1);
    std::int64_t step = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
        stride[d] = step;
        step *= std::max<std::int64_t>(shape[d], 1);
    }
    return stride;
}

// A C-contiguous `dtype` tensor of `shape` over storage `storageIndex` of `a`, starting
// `storageOffset` elements in.
inline ValueId contiguousTensor(Arena& a, std::uint32_t storageIndex, DType dtype, std::span<const std::int64_t> shape,
                                std::int64_t storageOffset = 0)
{
    TensorInfo info;
    info.rebuild = internGlobal({"torch._utils", "_rebuild_tensor_v2"});
    info.storage = a.storage(storageIndex);
    info.dtype = dtype;
    info.storageOffset = storageOffset;
    info.shape.assign(shape.begin(), shape.end());
    info.stride = contiguousStrides(shape);
    return a.tensor(std::move(info));
}

}  // namespace ckpt::pickle
