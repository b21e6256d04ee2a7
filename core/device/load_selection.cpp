#include "device/load_selection.h"

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
        if (!t.storage.valid() || (t.form != pickle::TensorForm::Strided && t.form != pickle::TensorForm::Quantized)) {
            out.skipped.push_back({t.path, "no storage to place (" + t.location + " / non-strided form)"});
            continue;
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
