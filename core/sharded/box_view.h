// The storages of a view (set_view.h) of a set that stores each global tensor as boxes held by
// separate tensors: DCP chunks, FSDP local shards. Each global tensor is one storage, its C-order
// bytes made from its boxes as they are read, never written to a file first:
// - boxes that are whole-row slabs (FSDP's dim-0 chunks, Shard(0), one whole chunk) follow one
//   another in the tensor's bytes: each is streamed in turn, a contiguous one straight from its
//   file, any other through a buffer of that box;
// - any other layout is placed into a buffer of the whole tensor (placeBox, a thread per box, up to
//   16 at once), the most a read holds, kept for the next read of the same tensor, as a diff or a
//   hash reads a tensor in ranges, and reused for the next tensor.
#pragma once

#include "checkpoint/checkpoint.h"
#include "sharded/dcp.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ckpt::sharded::detail {

// One global tensor of the set.
struct BoxedTensor {
    std::string name;  // its key, for messages
    DType dtype = DType::Unknown;
    std::vector<std::int64_t> size;
    std::vector<dcp::detail::Box> boxes;
    // What its boxes' records hold for it: a tensor assembled in a buffer may be at most 4x this
    // (plus a floor for small ones), so boxes that repeat elements (stride 0) cannot make a few
    // stored bytes ask for terabytes.
    std::uint64_t storedBytes = 0;
    [[nodiscard]] std::uint64_t nbytes() const;
};

// A box's tensor, opened: the member checkpoint that holds it (kept while it is read) and the
// tensor there. `mapped`: the holder's bytes are a read-only file mapping (its own, or a range of a
// DCP data file's), whose pages are dropped from the resident set once read (they stay cached).
struct OpenedBox {
    CheckpointPtr holder;
    const TensorEntry* tensor = nullptr;
    bool mapped = false;
};

// What a format gives its view: opening one box, and whether its files are still those opened.
class BoxFiles {
public:
    BoxFiles() = default;
    BoxFiles(const BoxFiles&) = delete;
    BoxFiles& operator=(const BoxFiles&) = delete;
    BoxFiles(BoxFiles&&) = delete;
    BoxFiles& operator=(BoxFiles&&) = delete;
    virtual ~BoxFiles() = default;
    // Box `box` of tensor `tensor`: a strided tensor of that box's shape, or the reason not.
    [[nodiscard]] virtual Expected<OpenedBox> open(std::size_t tensor, std::size_t box) const = 0;
    [[nodiscard]] virtual Expected<void> checkUnchanged() const = 0;
};

// Storage i of the view is tensors[i].
std::shared_ptr<const StorageSource> boxStorages(std::vector<BoxedTensor> tensors,
                                                 std::shared_ptr<const BoxFiles> files);

}  // namespace ckpt::sharded::detail
