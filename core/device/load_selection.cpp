#include "device/load_selection.h"

#include "util/dtype.h"

#include <algorithm>

namespace ckpt::device {
namespace {

constexpr std::uint32_t kNone = 0xFFFFFFFFU;

bool underSelection(const std::string& path, const std::string& select)
{
    if (select.empty() || path == select) {
        return true;
    }
    return path.size() > select.size() && path.starts_with(select) && path[select.size()] == '/';
}

Error onFile(const Checkpoint& ck, ErrorCode code, std::string message)
{
    Error e = makeError(code, std::move(message));
    e.path = ck.path;
    return e;
}

// The furthest byte a view reaches, past its first: an engine copies whole storages, but torch
// would build these views on top and fail on one that runs past its storage's end.
Expected<void> checkExtent(const Checkpoint& ck, const TensorEntry& t, std::uint32_t elementBytes)
{
    if (t.numel == 0) {
        return {};
    }
    auto last = static_cast<std::uint64_t>(t.storageOffset);
    for (std::size_t d = 0; d < t.shape.size() && d < t.stride.size(); ++d) {
        if (t.stride[d] < 0) {
            return onFile(ck, ErrorCode::Corrupt, t.path + " has a negative stride");
        }
        last += static_cast<std::uint64_t>(t.shape[d] - 1) * static_cast<std::uint64_t>(t.stride[d]);
    }
    const StorageEntry& st = ck.storages[t.storage];
    if ((last + 1) * elementBytes > st.nbytes) {
        return onFile(ck, ErrorCode::Corrupt,
                      t.path + " reaches past the end of its storage " + st.key + " (" + std::to_string(st.nbytes) +
                          " bytes)");
    }
    return {};
}

}  // namespace

Expected<LoadSelection> selectForLoad(const Checkpoint& ck, const std::string& select)
{
    LoadSelection out;
    IndexedVector<StorageIndex, std::uint32_t> slot;  // where each storage went in `out`, or none
    for (std::size_t s = 0; s < ck.storages.size(); ++s) {
        slot.push_back(kNone);
    }
    bool any = false;
    for (std::uint32_t n = 0; n < ck.tensors.size(); ++n) {
        const TensorIndex i{n};
        const TensorEntry& t = ck.tensors[i];
        if (!underSelection(t.path, select)) {
            continue;
        }
        any = true;
        if (!t.hasData()) {
            out.skipped.push_back({t.path, "a meta tensor: the file holds no data for it (saved from the meta device), "
                                           "so there is nothing to load"});
            continue;
        }
        if (!t.storage.valid() || (t.form != pickle::TensorForm::Strided && t.form != pickle::TensorForm::Quantized)) {
            out.skipped.push_back({t.path, "no storage to place (" + t.location + " / non-strided form)"});
            continue;
        }
        const std::uint32_t elementBytes = elementSize(t.dtype);
        if (elementBytes == 0) {
            out.skipped.push_back({t.path, "unknown element type"});
            continue;
        }
        if (auto inside = checkExtent(ck, t, elementBytes); !inside) {
            return inside.error();
        }
        const StorageEntry& st = ck.storages[t.storage];
        if (!st.present) {
            return onFile(ck, ErrorCode::Truncated,
                          "storage " + st.key + " (" + t.path + ") is missing from the file or shorter than its " +
                              std::to_string(st.nbytes) + " bytes");
        }
        ++out.tensorCount;
        if (slot[t.storage] == kNone) {
            slot[t.storage] = static_cast<std::uint32_t>(out.storages.size());
            out.storages.push_back({t.storage, st.nbytes, st.location, {}});
            out.totalBytes += st.nbytes;
        }
        out.storages[slot[t.storage]].tensors.push_back(i);
    }
    if (!select.empty() && !any) {
        return onFile(ck, ErrorCode::Usage, "no tensor at or under '" + select + "'");
    }
    // Load order is the pickle's: the storage table is in the order persistent ids first appear.
    std::sort(out.storages.begin(), out.storages.end(),
              [](const SelectedStorage& a, const SelectedStorage& b) { return a.storage < b.storage; });
    return out;
}

}  // namespace ckpt::device
