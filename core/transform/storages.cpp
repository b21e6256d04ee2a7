// Output storages: which are written, in the order the pickler meets them (torch.save's numbering),
// from which bytes of the input, and where they load (--map-location); --compact shrinks each to
// the elements its tensors reach.
#include "checkpoint/file_formats.h"
#include "checkpoint/tensor_bytes.h"
#include "transform/plan_builder.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace ckpt::transform::detail {
namespace {

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

struct StorageUse {
    bool bare = false;           // reached other than as a strided tensor's storage
    std::vector<ValueId> views;  // strided tensors viewing it
    std::string firstPath;
};

class PickleOrder {
public:
    explicit PickleOrder(const Arena& a) : a_(a), seen_(a.size(), 0) {}

    void visit(ValueId v, const std::string& path, std::uint32_t depth = 0)
    {
        if (!v.valid() || v.v >= seen_.size() || seen_[v.v] != 0 || depth > 20000) {
            return;
        }
        seen_[v.v] = 1;
        const auto& val = a_[v];
        switch (val.kind) {
        case Kind::Dict:
            for (std::size_t i = 0; i + 1 < val.items.size(); i += 2) {
                visit(val.items[i], path, depth + 1);
                visit(val.items[i + 1], joinPath(path, pickle::keyText(a_, val.items[i])), depth + 1);
            }
            visit(val.attrs, path, depth + 1);
            break;
        case Kind::List:
        case Kind::Tuple:
        case Kind::Set:
        case Kind::Size:
        case Kind::PersistentId:
            for (std::size_t i = 0; i < val.items.size(); ++i) {
                visit(val.items[i], joinPath(path, std::to_string(i)), depth + 1);
            }
            break;
        case Kind::Storage:
            meet(static_cast<std::uint32_t>(val.i), path).bare = true;
            break;
        case Kind::Tensor: {
            ++tensors;
            const auto& t = pickle::tensorOf(a_, v);
            if (t.form == pickle::TensorForm::Meta) {
                metaPaths.push_back(path);
            }
            if (t.form == pickle::TensorForm::Strided && t.storage.valid() && a_[t.storage].kind == Kind::Storage) {
                meet(static_cast<std::uint32_t>(a_[t.storage].i), path).views.push_back(v);
            } else {
                visit(t.rawArgs, path, depth + 1);
                visit(t.storage, path, depth + 1);
            }
            for (ValueId x : {t.metadata, t.parameterState, t.subclassType, t.subclassState}) {
                visit(x, path, depth + 1);
            }
            break;
        }
        case Kind::Object: {
            const auto& o = pickle::objectOf(a_, v);
            visit(o.args, path, depth + 1);
            visit(o.kwargs, path, depth + 1);
            if (o.state.valid() && a_[o.state].kind == Kind::Dict) {
                seen_[o.state.v] = 1;
                const auto& items = a_[o.state].items;
                for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
                    visit(items[i + 1], joinPath(path, pickle::keyText(a_, items[i])), depth + 1);
                }
            } else {
                visit(o.state, path, depth + 1);
            }
            for (std::size_t i = 0; i < o.listItems.size(); ++i) {
                visit(o.listItems[i], joinPath(path, std::to_string(i)), depth + 1);
            }
            for (std::size_t i = 0; i + 1 < o.dictItems.size(); i += 2) {
                visit(o.dictItems[i + 1], joinPath(path, pickle::keyText(a_, o.dictItems[i])), depth + 1);
            }
            break;
        }
        default:
            break;
        }
    }

    std::vector<std::uint32_t> order;  // storage indices, first met first
    std::unordered_map<std::uint32_t, StorageUse> uses;
    std::uint64_t tensors = 0;
    std::vector<std::string> metaPaths;  // tensors without data (the meta device)

private:
    StorageUse& meet(std::uint32_t storage, const std::string& path)
    {
        auto [it, fresh] = uses.try_emplace(storage);
        if (fresh) {
            order.push_back(storage);
            it->second.firstPath = path;
        }
        return it->second;
    }

    const Arena& a_;
    std::vector<char> seen_;
};

// Shrinks one storage to the bytes its tensors reach (all of them, so views keep sharing it). An
// UntypedStorage (2.x's uint16, float8, ...) counts its numel in bytes while its views step in their
// own element size (viewByteExtent), so the range is found in bytes and cut in whole view elements.
void compactStorage(Builder& b, std::uint32_t s, const StorageUse& use, OutStorage& out)
{
    Arena& a = b.arena();
    pickle::StorageRef& ref = a.storages[s];
    const std::uint64_t unit = elementSize(ref.dtype);  // bytes per counted element: 1 when untyped
    if (use.bare || unit == 0 || ref.legacyView.valid()) {
        return;
    }
    std::uint64_t elem = 0;  // the views' element size, one for all so offsets shift evenly
    std::uint64_t lo = UINT64_MAX;
    std::uint64_t hi = 0;
    for (ValueId v : use.views) {
        const auto& t = pickle::tensorOf(a, v);
        const std::uint64_t es = elementSize(t.dtype);
        if (es == 0 || (elem != 0 && es != elem) || (!ref.untyped && es != unit) || t.storageOffset < 0) {
            return;
        }
        elem = es;
        const ByteExtent reach = viewByteExtent(t.dtype, t.storageOffset, t.shape, t.stride);
        if (reach.end > reach.begin) {
            lo = std::min(lo, reach.begin);
            hi = std::max(hi, reach.end);
        }
    }
    if (lo == UINT64_MAX) {
        lo = hi = 0;  // only empty tensors: nothing is reached
    }
    const std::uint64_t before = ref.numel * unit;
    if (elem == 0 || (lo == 0 && hi == before) || hi > before) {
        return;
    }
    const std::uint64_t kept = hi - lo;
    for (ValueId v : use.views) {
        auto& t = a.tensors[static_cast<std::size_t>(a[v].i)];
        const auto offset = static_cast<std::uint64_t>(t.storageOffset);
        const std::uint64_t shifted = offset >= lo / elem ? offset - lo / elem : 0;
        t.storageOffset = static_cast<std::int64_t>(std::min(shifted, kept / elem));
        detail::refreshStridedArgs(a, v);
    }
    ref.numel = kept / unit;
    out.byteOffset = lo;
    out.nbytes = kept;
    b.step(StepKind::Compact, use.firstPath, humanBytes(before), humanBytes(out.nbytes),
           "storage " + ref.key + ": keeps bytes [" + std::to_string(out.byteOffset) + ", " +
               std::to_string(out.byteOffset + out.nbytes) + ") of " + std::to_string(before));
}

}  // namespace

void planStorages(Builder& b)
{
    Arena& a = b.arena();
    PickleOrder walk(a);
    walk.visit(b.plan.root, b.rootPath);

    std::vector<pickle::StorageRef> refs;
    std::vector<std::optional<std::uint32_t>> newIndex(a.storages.size());  // none: not written
    struct RemapTotal {
        std::string from, to;
        std::uint64_t count = 0;
        std::uint64_t bytes = 0;
        std::string firstPath;
    };
    std::vector<RemapTotal> remaps;
    bool renumbered = false;
    for (std::uint32_t s : walk.order) {
        OutStorage out;
        out.source = StorageIndex{s};
        if (auto made = b.inlineStorages.find(s); made != b.inlineStorages.end()) {
            out.inlineBytes = made->second;
            out.nbytes = made->second->size();
        } else if (auto computed = b.computedStorages.find(s); computed != b.computedStorages.end()) {
            out.computed = computed->second;
            out.nbytes = computed->second->size();
        } else {
            out.nbytes = b.in.storages[out.source].nbytes;
        }
        if (b.opts.compact && !out.madeByPlan()) {
            compactStorage(b, s, walk.uses[s], out);
        }
        pickle::StorageRef ref = a.storages[s];
        out.key = std::to_string(refs.size());
        out.location = b.opts.mapLocation.empty() ? ref.location.str() : b.opts.mapLocation.apply(ref.location);
        renumbered = renumbered || out.key != ref.key;
        if (out.location != ref.location) {
            auto it = std::find_if(remaps.begin(), remaps.end(),
                                   [&](const RemapTotal& r) { return r.from == ref.location && r.to == out.location; });
            if (it == remaps.end()) {
                remaps.push_back({ref.location, out.location, 0, 0, walk.uses[s].firstPath});
                it = remaps.end() - 1;
            }
            ++it->count;
            it->bytes += out.nbytes;
        }
        ref.key = out.key;
        ref.location = out.location;
        newIndex[s] = static_cast<std::uint32_t>(refs.size());
        refs.push_back(std::move(ref));
        b.plan.storages.push_back(std::move(out));
    }
    for (const auto& r : remaps) {
        b.step(StepKind::Remap, r.firstPath, r.from, r.to,
               std::to_string(r.count) + (r.count == 1 ? " storage, " : " storages, ") + humanBytes(r.bytes));
        b.plan.steps.back().count = r.count;
    }
    const std::size_t unreferenced = a.storages.size() - refs.size();
    if (unreferenced > 0) {
        std::uint64_t bytes = 0;
        for (std::uint32_t s = 0; s < newIndex.size(); ++s) {
            bytes += !newIndex[s] && s < b.in.storages.size() ? b.in.storages[StorageIndex{s}].nbytes : 0;
        }
        b.step(StepKind::Note, b.rootPath, "", "",
               std::to_string(unreferenced) + " storage(s) (" + humanBytes(bytes) +
                   ") no kept value refers to are not written");
    }
    if (renumbered && fileFormat(b.in.format).pickled) {  // safetensors keys are names
        b.step(StepKind::Note, b.rootPath, "", "",
               "storage keys renumbered 0.." + std::to_string(refs.size() - 1) +
                   " in the order torch.save would number them");
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        auto& val = a[ValueId{static_cast<std::uint32_t>(i)}];
        if (val.kind == Kind::Storage && static_cast<std::size_t>(val.i) < newIndex.size() &&
            newIndex[static_cast<std::size_t>(val.i)]) {
            val.i = *newIndex[static_cast<std::size_t>(val.i)];
        }
    }
    a.storages = std::move(refs);
    b.plan.tensorCount = walk.tensors;
    if (!walk.metaPaths.empty()) {
        // They were never data: written as they are, a meta tensor again, and said so before writing.
        const std::size_t n = walk.metaPaths.size();
        const bool safetensors = b.opts.format == OutputFormat::Safetensors;
        b.step(StepKind::Note, walk.metaPaths.front(), "", "",
               std::to_string(n) + (n == 1 ? " tensor holds" : " tensors hold") +
                   " no data (saved from the meta device): " +
                   (safetensors ? "safetensors stores data, so this output cannot be written"
                                : "written as meta tensors again, shape and dtype only") +
                   "; no conversion can give them values (`ckptscope check` says how to save them with data)");
    }
}

}  // namespace ckpt::transform::detail
