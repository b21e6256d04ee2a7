#include "sharded/box_view.h"

#include "checkpoint/tensor_bytes.h"
#include "sharded/chunks.h"
#include "util/bytes.h"

#include <algorithm>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <utility>

namespace ckpt::sharded::detail {

std::uint64_t BoxedTensor::nbytes() const
{
    return numelOf(size) * elementSize(dtype);  // sizes were checked when the set was read
}

namespace {

using dcp::detail::Box;

// The most boxes placed at once, each on a thread.
constexpr std::size_t kMaxPlacers = 16;

// Slices of `bytes` to `sink`, at most `chunk` each; Cancelled when it says stop.
Expected<void> sinkSlices(Bytes bytes, const std::function<bool(Bytes)>& sink, std::size_t chunk)
{
    const std::size_t step = std::max<std::size_t>(chunk, 1);
    for (std::size_t at = 0; at < bytes.size(); at += step) {
        if (!sink(bytes.subspan(at, std::min(step, bytes.size() - at)))) {
            return makeError(ErrorCode::Cancelled, "cancelled");
        }
    }
    return {};
}

// The boxes in the order of their bytes when each is a whole-row slab (it spans every dimension
// but the first) and together they tile the tensor: empty boxes left out. nullopt otherwise.
std::optional<std::vector<std::size_t>> slabOrder(const BoxedTensor& t)
{
    std::vector<std::size_t> order;
    for (std::size_t b = 0; b < t.boxes.size(); ++b) {
        const Box& box = t.boxes[b];
        if (box.sizes.size() != t.size.size() || box.offsets.size() != t.size.size()) {
            return std::nullopt;
        }
        for (std::size_t d = 1; d < t.size.size(); ++d) {
            if (box.offsets[d] != 0 || box.sizes[d] != t.size[d]) {
                return std::nullopt;
            }
        }
        if (numelOf(box.sizes) > 0) {
            order.push_back(b);
        }
    }
    if (t.size.empty()) {
        return order.size() == 1 ? std::optional(order) : std::nullopt;
    }
    std::sort(order.begin(), order.end(),
              [&t](std::size_t x, std::size_t y) { return t.boxes[x].offsets[0] < t.boxes[y].offsets[0]; });
    std::int64_t row = 0;
    for (const auto b : order) {
        if (t.boxes[b].offsets[0] != row) {
            return std::nullopt;  // a gap or an overlap: the set's findings say which
        }
        row += t.boxes[b].sizes[0];
    }
    return row == t.size[0] ? std::optional(order) : std::nullopt;
}

// `buffer` made `bytes` long for tensor `t` (its old bytes stay: every box placed overwrites its
// own, and a complete set's boxes cover the tensor; reusing it spares each tensor the page faults of
// a fresh allocation), or the reason not: more than 4x what its boxes store (elements repeated,
// which no writer does) or more memory than there is.
Expected<void> sizeBuffer(const BoxedTensor& t, std::uint64_t bytes, std::vector<std::byte>& buffer)
{
    constexpr std::uint64_t kFloor = 64ULL << 20;
    if (bytes > kFloor && bytes / 4 > t.storedBytes) {
        return makeError(ErrorCode::Limit, "tensor '" + t.name + "' is " + humanBytes(bytes) +
                                               " but its pieces store " + humanBytes(t.storedBytes) +
                                               ": they repeat elements, which no writer does; not assembled");
    }
    try {
        buffer.resize(bytes);
    } catch (const std::bad_alloc&) {
        return makeError(ErrorCode::Limit,
                         "tensor '" + t.name + "' needs a buffer of " + humanBytes(bytes) + ", which is not available");
    }
    return {};
}

class BoxStorages final : public StorageSource {
public:
    BoxStorages(std::vector<BoxedTensor> tensors, std::shared_ptr<const BoxFiles> files)
        : tensors_(std::move(tensors)), files_(std::move(files))
    {
    }

    Expected<void> stream(StorageIndex storage, std::uint64_t offset, std::uint64_t length,
                          const std::function<bool(Bytes)>& sink, std::size_t chunk) const override
    {
        const std::size_t i = storage.value();
        const BoxedTensor& t = tensors_.at(i);
        const std::uint64_t nbytes = t.nbytes();
        if (offset > nbytes || length > nbytes - offset) {
            return makeError(ErrorCode::Internal, "a read past the end of '" + t.name + "'");
        }
        const auto slabs = slabOrder(t);
        if (!slabs) {
            return streamPlaced(i, offset, length, sink, chunk);
        }
        const std::uint64_t es = elementSize(t.dtype);
        const std::uint64_t rowBytes = t.size.empty() ? es : numelOf({t.size.begin() + 1, t.size.end()}) * es;
        const std::uint64_t end = offset + length;
        for (const auto b : *slabs) {
            const Box& box = t.boxes[b];
            const std::uint64_t start = t.size.empty() ? 0 : static_cast<std::uint64_t>(box.offsets[0]) * rowBytes;
            const std::uint64_t size = t.size.empty() ? es : static_cast<std::uint64_t>(box.sizes[0]) * rowBytes;
            if (start + size <= offset || start >= end) {
                continue;
            }
            const std::uint64_t lo = std::max(offset, start) - start;
            const std::uint64_t hi = std::min(end, start + size) - start;
            if (auto r = streamBox(i, b, lo, hi - lo, sink, chunk); !r) {
                return r;
            }
        }
        return {};
    }
    [[nodiscard]] Expected<void> checkUnchanged() const override { return files_->checkUnchanged(); }

private:
    // Box `b` of tensor `i`, opened and checked to be the box's shape and the tensor's type.
    Expected<OpenedBox> openBox(std::size_t i, std::size_t b) const
    {
        const BoxedTensor& t = tensors_[i];
        auto opened = files_->open(i, b);
        if (!opened) {
            return opened;
        }
        const TensorEntry* e = opened->tensor;
        const auto& sizes = t.boxes[b].sizes;
        if (e == nullptr || e->form != pickle::TensorForm::Strided || !e->storage.valid() || e->dtype != t.dtype ||
            !std::equal(e->shape.begin(), e->shape.end(), sizes.begin(), sizes.end())) {
            Error err =
                makeError(ErrorCode::Corrupt, "a piece of '" + t.name + "' is no " + std::string(dtypeName(t.dtype)) +
                                                  " tensor of its box's shape");
            err.path = opened->holder ? opened->holder->path : std::string();
            return err;
        }
        return opened;
    }

    // Bytes [from, from + length) of box `b`'s own C-order bytes: straight from its file when the
    // box's tensor is contiguous, else through a buffer of the box.
    Expected<void> streamBox(std::size_t i, std::size_t b, std::uint64_t from, std::uint64_t length,
                             const std::function<bool(Bytes)>& sink, std::size_t chunk) const
    {
        const BoxedTensor& t = tensors_[i];
        auto opened = openBox(i, b);
        if (!opened) {
            return opened.error();
        }
        const Checkpoint& c = *opened->holder;
        const TensorEntry& e = *opened->tensor;
        const std::uint64_t es = elementSize(t.dtype);
        Expected<void> r;
        if (isCContiguous({e.shape.begin(), e.shape.end()}, {e.stride.begin(), e.stride.end()}) &&
            e.storageOffset >= 0) {
            r = c.streamStorage(e.storage, static_cast<std::uint64_t>(e.storageOffset) * es + from, length, sink,
                                chunk);
        } else {
            const auto& sizes = t.boxes[b].sizes;
            std::vector<std::byte> buffer;
            if (auto sized = sizeBuffer(t, numelOf(sizes) * es, buffer); !sized) {
                return sized;
            }
            std::vector<std::byte> scratch;
            auto data = c.storageData(e.storage, scratch);
            if (!data) {
                return data.error();
            }
            const Box whole{std::vector<std::int64_t>(sizes.size(), 0), sizes};
            if (r = dcp::detail::placeBox(t.name, t.dtype, sizes, whole, e, *data, buffer); r) {
                r = sinkSlices(Bytes(buffer).subspan(from, length), sink, chunk);
            }
        }
        release(*opened);
        return r;
    }

    // Bytes [offset, offset + length) of tensor `i` assembled whole in the buffer (kept for the
    // next read of the same tensor).
    Expected<void> streamPlaced(std::size_t i, std::uint64_t offset, std::uint64_t length,
                                const std::function<bool(Bytes)>& sink, std::size_t chunk) const
    {
        const std::scoped_lock lock(mutex_);
        if (placed_ != i) {
            placed_.reset();
            const BoxedTensor& t = tensors_[i];
            if (auto sized = sizeBuffer(t, t.nbytes(), buffer_); !sized) {
                return sized;
            }
            // Boxes are placed a wave at a time, each on a thread of its own (they fill disjoint
            // parts of the buffer): one thread copying a column split's short rows out of the
            // mappings held a set to 0.12x its file's load speed on the lent H100.
            const std::size_t wave = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, kMaxPlacers);
            for (std::size_t first = 0; first < t.boxes.size(); first += wave) {
                const std::size_t n = std::min(wave, t.boxes.size() - first);
                std::vector<OpenedBox> opened;
                std::vector<Bytes> data;
                std::vector<std::vector<std::byte>> scratch(n);  // a deflated chunk is inflated here
                for (std::size_t k = 0; k < n; ++k) {
                    auto box = openBox(i, first + k);
                    if (!box) {
                        return box.error();
                    }
                    auto bytes = box->holder->storageData(box->tensor->storage, scratch[k]);
                    if (!bytes) {
                        return bytes.error();
                    }
                    opened.push_back(std::move(*box));
                    data.push_back(*bytes);
                }
                std::vector<Expected<void>> placed(n);
                {
                    auto place = [&](std::size_t k) {
                        placed[k] = dcp::detail::placeBox(t.name, t.dtype, t.size, t.boxes[first + k],
                                                          *opened[k].tensor, data[k], buffer_);
                    };
                    std::vector<std::jthread> threads;
                    for (std::size_t k = 1; k < n; ++k) {
                        threads.emplace_back(place, k);
                    }
                    place(0);
                }
                for (std::size_t k = 0; k < n; ++k) {
                    if (!placed[k]) {
                        Error e = placed[k].error();
                        e.path = opened[k].holder->path;
                        return e;
                    }
                    release(opened[k]);
                }
            }
            placed_ = i;
        }
        return sinkSlices(Bytes(buffer_).subspan(offset, length), sink, chunk);
    }

    // The pages of a storage just read leave this process's resident set (they stay cached).
    static void release(const OpenedBox& box)
    {
        const Checkpoint& c = *box.holder;
        if (const auto& st = c.storages[box.tensor->storage]; box.mapped && st.inMapping()) {
            dcp::detail::releasePages(c.bytes.subspan(st.fileOffset, st.nbytes));
        }
    }

    std::vector<BoxedTensor> tensors_;
    std::shared_ptr<const BoxFiles> files_;
    mutable std::mutex mutex_;
    mutable std::optional<std::size_t> placed_;
    mutable std::vector<std::byte> buffer_;
};

}  // namespace

std::shared_ptr<const StorageSource> boxStorages(std::vector<BoxedTensor> tensors,
                                                 std::shared_ptr<const BoxFiles> files)
{
    return std::make_shared<const BoxStorages>(std::move(tensors), std::move(files));
}

}  // namespace ckpt::sharded::detail
