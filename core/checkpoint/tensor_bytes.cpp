#include "checkpoint/tensor_bytes.h"

#include <algorithm>
#include <cstring>

namespace ckpt {

bool isCContiguous(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& stride)
{
    if (stride.size() != shape.size()) {
        return false;
    }
    std::int64_t expected = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
        if (shape[d] == 0) {
            return true;
        }
        if (shape[d] != 1 && stride[d] != expected) {
            return false;
        }
        expected *= shape[d];
    }
    return true;
}

Expected<void> forEachTensorChunk(const Checkpoint& c, const TensorEntry& t, const std::function<bool(Bytes)>& sink,
                                  std::size_t chunkBytes)
{
    if (t.storage == kNoIndex || t.form != pickle::TensorForm::Strided) {
        return makeError(ErrorCode::Unsupported, "tensor '" + t.path + "' has no plain strided storage");
    }
    if (t.numel == 0) {
        return {};
    }
    std::vector<std::byte> scratch;
    auto data = c.storageData(t.storage, scratch);
    if (!data) {
        return data.error();
    }
    const std::size_t elem = elementSize(t.dtype);
    const Bytes storage = *data;
    if (t.contiguous) {
        const std::size_t begin = static_cast<std::size_t>(t.storageOffset) * elem;
        const Bytes all = storage.subspan(begin, t.nbytes);
        for (std::size_t at = 0; at < all.size(); at += chunkBytes) {
            if (!sink(all.subspan(at, std::min(chunkBytes, all.size() - at)))) {
                return {};
            }
        }
        return {};
    }
    // Odometer over the shape: innermost dimension copied element by element.
    const std::size_t ndim = t.shape.size();
    std::vector<std::int64_t> idx(ndim, 0);
    std::vector<std::byte> buf;
    buf.reserve(std::max(chunkBytes, elem));
    std::int64_t offset = t.storageOffset;
    for (std::uint64_t n = 0; n < t.numel; ++n) {
        const auto* src = storage.data() + static_cast<std::size_t>(offset) * elem;
        buf.insert(buf.end(), src, src + elem);
        if (buf.size() + elem > chunkBytes) {
            if (!sink(buf)) {
                return {};
            }
            buf.clear();
        }
        for (std::size_t d = ndim; d-- > 0;) {
            offset += t.stride[d];
            if (++idx[d] < t.shape[d]) {
                break;
            }
            offset -= t.stride[d] * t.shape[d];
            idx[d] = 0;
        }
    }
    if (!buf.empty()) {
        sink(buf);
    }
    return {};
}

}  // namespace ckpt
