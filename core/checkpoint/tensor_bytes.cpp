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

ByteExtent viewByteExtent(DType dtype, std::int64_t storageOffset, std::span<const std::int64_t> shape,
                          std::span<const std::int64_t> stride)
{
    const std::uint64_t es = elementSize(dtype);
    const auto offset = static_cast<std::uint64_t>(std::max<std::int64_t>(0, storageOffset));
    constexpr std::uint64_t kMax = UINT64_MAX;
    const std::uint64_t begin = es != 0 && offset > kMax / es ? kMax : offset * es;
    if (std::any_of(shape.begin(), shape.end(), [](std::int64_t d) { return d <= 0; })) {
        return {};  // reaches nothing, wherever its offset points
    }
    std::uint64_t last = offset;  // the highest element reached
    for (std::size_t d = 0; d < shape.size() && d < stride.size(); ++d) {
        const auto steps = static_cast<std::uint64_t>(shape[d] - 1);
        const auto step = static_cast<std::uint64_t>(std::max<std::int64_t>(0, stride[d]));
        if (step != 0 && steps > (kMax - last) / step) {
            return {begin, kMax};
        }
        last += steps * step;
    }
    if (last == kMax || (es != 0 && last + 1 > kMax / es)) {
        return {begin, kMax};
    }
    return {begin, (last + 1) * es};
}

CRuns cOrderRuns(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& stride,
                 std::size_t elementSize)
{
    CRuns r;
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
        return r;
    }
    std::int64_t runElements = 1;
    bool extendsRun = true;
    // Built innermost first, because both folds look at the dimension just inside.
    std::vector<std::int64_t> size;
    std::vector<std::int64_t> step;
    for (std::size_t d = shape.size(); d-- > 0;) {
        if (shape[d] == 1) {
            continue;  // any stride: it is never stepped
        }
        if (extendsRun && stride[d] == runElements) {
            runElements *= shape[d];
            continue;
        }
        extendsRun = false;
        if (!size.empty() && stride[d] == step.back() * size.back()) {
            size.back() *= shape[d];
            continue;
        }
        size.push_back(shape[d]);
        step.push_back(stride[d]);
    }
    const auto es = static_cast<std::int64_t>(elementSize);
    r.runBytes = static_cast<std::uint64_t>(runElements * es);
    r.size.assign(size.rbegin(), size.rend());
    r.byteStride.assign(step.rbegin(), step.rend());
    for (auto& s : r.byteStride) {
        s *= es;
    }
    return r;
}

Expected<void> forEachTensorChunk(const Checkpoint& c, const TensorEntry& t, const std::function<bool(Bytes)>& sink,
                                  std::size_t chunkBytes)
{
    if (!t.storage.valid() || t.form != pickle::TensorForm::Strided) {
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
    chunkBytes = std::max<std::size_t>(chunkBytes, 1);  // a zero chunk would never advance
    const Bytes storage = *data;
    const std::size_t elem = elementSize(t.dtype);
    const CRuns runs = cOrderRuns(t.shape, t.stride, elem);
    const std::uint64_t first = static_cast<std::uint64_t>(t.storageOffset) * elem;
    if (runs.runBytes == t.nbytes || runs.runBytes > chunkBytes) {
        // Runs this long are already C order in the mapping: copying them would only cost time and
        // a buffer bigger than a chunk.
        forEachCOrderRun(runs, first, [&](std::uint64_t at, std::uint64_t n) {
            const Bytes run = storage.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(n));
            for (std::size_t k = 0; k < run.size(); k += chunkBytes) {
                if (!sink(run.subspan(k, std::min(chunkBytes, run.size() - k)))) {
                    return false;
                }
            }
            return true;
        });
        return {};
    }
    // Whole runs per chunk, so no run is split between two buffers.
    std::vector<std::byte> buf(
        static_cast<std::size_t>(std::min<std::uint64_t>(chunkBytes / runs.runBytes * runs.runBytes, t.nbytes)));
    std::size_t fill = 0;
    const bool more = forEachCOrderRun(runs, first, [&](std::uint64_t at, std::uint64_t n) {
        if (fill + n > buf.size()) {
            if (!sink(Bytes(buf.data(), fill))) {
                return false;
            }
            fill = 0;
        }
        std::memcpy(buf.data() + fill, storage.data() + at, static_cast<std::size_t>(n));
        fill += static_cast<std::size_t>(n);
        return true;
    });
    if (more && fill > 0) {
        sink(Bytes(buf.data(), fill));
    }
    return {};
}

}  // namespace ckpt
