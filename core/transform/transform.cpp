// makePlan: the output value tree and the exact list of what changes, computed before anything is
// written. The passes run in the order a user reasons about them: choose the value (select, drop),
// turn whole models into state dicts (unwrap), make the rest loadable and safe (sanitize), rename
// keys (prefixes), then decide which storages are written, where they load and how many bytes.
#include "transform/plan_builder.h"
#include "util/json_text.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

namespace ckpt::transform {

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

std::string_view stepKindName(StepKind k)
{
    switch (k) {
    case StepKind::Select:
        return "select";
    case StepKind::Rename:
        return "rename";
    case StepKind::Remap:
        return "remap";
    case StepKind::Drop:
        return "drop";
    case StepKind::Convert:
        return "convert";
    case StepKind::Unwrap:
        return "unwrap";
    case StepKind::Compact:
        return "compact";
    case StepKind::Note:
        return "note";
    }
    return "note";
}

namespace detail {

std::string joinPath(const std::string& parent, const std::string& name)
{
    return parent.empty() ? name : parent + "/" + name;
}

std::vector<ValueId> objectStateItems(const Arena& a, const pickle::ObjectInfo& o)
{
    std::vector<ValueId> items;
    if (!o.state.valid()) {
        return items;
    }
    const auto& st = a[o.state];
    if (st.kind == Kind::Dict) {
        return st.items;
    }
    if (st.kind == Kind::Tuple && st.items.size() == 2) {
        for (ValueId part : st.items) {
            if (a[part].kind == Kind::Dict) {
                items.insert(items.end(), a[part].items.begin(), a[part].items.end());
            }
        }
    }
    return items;
}

ValueId dictGet(const Arena& a, const std::vector<ValueId>& items, std::string_view key)
{
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        if (a[items[i]].kind == Kind::Str && a[items[i]].text == key) {
            return items[i + 1];
        }
    }
    return {};
}

bool isModuleObject(const Arena& a, ValueId v)
{
    if (!v.valid() || a[v].kind != Kind::Object) {
        return false;
    }
    const auto& o = pickle::objectOf(a, v);
    if (!o.state.valid() || a[o.state].kind != Kind::Dict) {
        return false;
    }
    const auto& items = a[o.state].items;
    return dictGet(a, items, "_modules").valid() && dictGet(a, items, "_parameters").valid();
}

void refreshStridedArgs(Arena& a, ValueId tensor)
{
    auto& t = a.tensors[static_cast<std::size_t>(a[tensor].i)];
    if (t.form != pickle::TensorForm::Strided || !t.storage.valid()) {
        return;
    }
    auto ints = [&](const std::vector<std::int64_t>& v) {
        std::vector<ValueId> items;
        items.reserve(v.size());
        for (auto x : v) {
            items.push_back(a.integer(x));
        }
        return a.tuple(std::move(items));
    };
    const bool v3 = t.rebuild.name == "_rebuild_tensor_v3";
    const ValueId offset = a.integer(t.storageOffset);
    const ValueId shape = ints(t.shape);
    const ValueId stride = ints(t.stride);
    const ValueId grad = a.boolean(t.requiresGrad);
    ValueId hooks = t.backwardHooks;
    if (!hooks.valid()) {
        hooks = a.dict({}, true);
    }
    std::vector<ValueId> args{t.storage, offset, shape, stride, grad, hooks};
    if (v3) {
        args.push_back(a.dtype(t.dtype));
    }
    if (t.metadata.valid()) {
        args.push_back(t.metadata);
    }
    if (t.rebuild.name == "_rebuild_tensor") {
        args.resize(4);  // the old 4-argument form has no requires_grad/hooks
    }
    t.rawArgs = a.tuple(std::move(args));  // values grow; the tensor table (and `t`) does not move
}

}  // namespace detail

namespace {

using detail::Builder;
using detail::joinPath;

bool isDescendant(const Checkpoint& c, std::uint32_t node, std::uint32_t ancestor)
{
    for (std::uint32_t p = node; p != kNoIndex; p = c.nodes[p].parent) {
        if (p == ancestor) {
            return true;
        }
    }
    return false;
}

std::string describeNode(const Checkpoint& c, std::uint32_t i)
{
    const Node& n = c.nodes[i];
    if (n.kind == NodeKind::Tensor && n.tensor != kNoIndex) {
        const auto& t = c.tensors[n.tensor];
        std::string shape;
        for (auto d : t.shape) {
            shape += (shape.empty() ? "" : ", ") + std::to_string(d);
        }
        return "tensor " + std::string(dtypeName(t.dtype)) + " [" + shape + "]";
    }
    if ((n.kind == NodeKind::Module || n.kind == NodeKind::Object) && n.object != kNoIndex) {
        return c.objects[n.object].type;
    }
    if (n.kind == NodeKind::Scalar) {
        return pickle::shortRepr(c.arena, n.value);
    }
    return std::string(nodeKindName(n.kind)) + " (" + std::to_string(n.childCount) + " entries)";
}

std::string subtreeDetail(const Checkpoint& c, std::uint32_t i)
{
    const Node& n = c.nodes[i];
    if (n.tensorCount == 0) {
        return {};
    }
    return std::to_string(n.tensorCount) + (n.tensorCount == 1 ? " tensor, " : " tensors, ") + humanBytes(n.bytes);
}

Expected<void> selectRoot(Builder& b)
{
    if (!b.opts.select) {
        return {};
    }
    const std::string& path = *b.opts.select;
    const std::uint32_t idx = b.in.find(path);
    if (idx == kNoIndex) {
        return makeError(ErrorCode::Usage, "--select '" + path + "': no value at that key path");
    }
    b.plan.root = b.in.nodes[idx].value;
    b.rootPath = path;
    if (!path.empty()) {
        b.step(StepKind::Select, path, describeNode(b.in, idx), "root", subtreeDetail(b.in, idx));
    }
    return {};
}

bool eraseDictPair(Arena& a, ValueId dict, std::string_view name)
{
    auto& items = a[dict].items;
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        if (pickle::keyText(a, items[i]) == name) {
            items.erase(items.begin() + static_cast<std::ptrdiff_t>(i),
                        items.begin() + static_cast<std::ptrdiff_t>(i) + 2);
            return true;
        }
    }
    return false;
}

Expected<void> removeNode(Builder& b, std::uint32_t idx, const std::string& path)
{
    const Node& n = b.in.nodes[idx];
    const Node& parent = b.in.nodes[n.parent];
    Arena& a = b.arena();
    const ValueId pv = parent.value;
    switch (a[pv].kind) {
    case Kind::Dict:
        if (eraseDictPair(a, pv, n.name)) {
            return {};
        }
        break;
    case Kind::List:
    case Kind::Tuple:
    case Kind::Set:
        if (n.row < a[pv].items.size()) {
            a[pv].items.erase(a[pv].items.begin() + n.row);
            return {};
        }
        break;
    case Kind::Object: {
        auto& o = a.objects[static_cast<std::size_t>(a[pv].i)];
        if (o.state.valid() && a[o.state].kind == Kind::Dict && eraseDictPair(a, o.state, n.name)) {
            return {};
        }
        if (o.state.valid() && a[o.state].kind == Kind::Tuple) {
            for (ValueId part : a[o.state].items) {
                if (a[part].kind == Kind::Dict && eraseDictPair(a, part, n.name)) {
                    return {};
                }
            }
        }
        for (std::size_t i = 0; i + 1 < o.dictItems.size(); i += 2) {
            if (pickle::keyText(a, o.dictItems[i]) == n.name) {
                o.dictItems.erase(o.dictItems.begin() + static_cast<std::ptrdiff_t>(i),
                                  o.dictItems.begin() + static_cast<std::ptrdiff_t>(i) + 2);
                return {};
            }
        }
        break;
    }
    default:
        break;
    }
    return makeError(ErrorCode::Usage, "--drop '" + path + "': the value is part of " + describeNode(b.in, n.parent) +
                                           " in a way that cannot be removed on its own");
}

Expected<void> dropPaths(Builder& b)
{
    struct Target {
        std::uint32_t node;
        std::string path;
    };
    std::vector<Target> targets;
    const std::uint32_t selected = b.opts.select ? b.in.find(*b.opts.select) : 0;
    for (const auto& p : b.opts.drop) {
        std::string path = p;
        std::uint32_t idx = p.empty() ? kNoIndex : b.in.find(p);
        if (idx == kNoIndex && b.opts.select && !p.empty()) {
            path = joinPath(*b.opts.select, p);  // a path relative to the selected value
            idx = b.in.find(path);
        }
        if (p.empty()) {
            return makeError(ErrorCode::Usage, "--drop needs a key path; the root cannot be dropped");
        }
        if (idx == kNoIndex) {
            return makeError(ErrorCode::Usage, "--drop '" + p + "': no value at that key path");
        }
        if (idx == selected) {
            return makeError(ErrorCode::Usage, "--drop '" + p + "' would remove the whole selected value");
        }
        if (!isDescendant(b.in, idx, selected)) {
            b.step(StepKind::Note, path, "", "", "outside the selected value '" + b.rootPath + "': not written anyway");
            continue;
        }
        targets.push_back({idx, path});
    }
    // Later list positions first, so earlier removals do not shift the rows still to be removed.
    std::stable_sort(targets.begin(), targets.end(),
                     [&](const Target& x, const Target& y) { return b.in.nodes[x.node].row > b.in.nodes[y.node].row; });
    for (const auto& t : targets) {
        if (auto ok = removeNode(b, t.node, t.path); !ok) {
            return ok;
        }
        b.step(StepKind::Drop, t.path, describeNode(b.in, t.node), "", subtreeDetail(b.in, t.node));
    }
    return {};
}

// ---------------------------------------------------------------------------------------------
// Output storages: which are written, in the order the pickler meets them, from which bytes.

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

std::uint64_t lastElement(const pickle::TensorInfo& t)
{
    auto last = static_cast<std::uint64_t>(t.storageOffset);
    for (std::size_t d = 0; d < t.shape.size() && d < t.stride.size(); ++d) {
        last += static_cast<std::uint64_t>(t.shape[d] - 1) *
                static_cast<std::uint64_t>(std::max<std::int64_t>(0, t.stride[d]));
    }
    return last;
}

bool isEmpty(const pickle::TensorInfo& t)
{
    return std::any_of(t.shape.begin(), t.shape.end(), [](std::int64_t d) { return d <= 0; });
}

// Shrinks one storage to the elements its tensors reach (all of them, so views keep sharing it).
void compactStorage(Builder& b, std::uint32_t s, const StorageUse& use, OutStorage& out)
{
    Arena& a = b.arena();
    pickle::StorageRef& ref = a.storages[s];
    const std::uint32_t elem = elementSize(ref.dtype);
    if (use.bare || ref.untyped || elem == 0 || ref.legacyView.valid()) {
        return;
    }
    std::uint64_t lo = UINT64_MAX;
    std::uint64_t hi = 0;
    for (ValueId v : use.views) {
        const auto& t = pickle::tensorOf(a, v);
        if (elementSize(t.dtype) != elem || t.storageOffset < 0) {
            return;
        }
        if (!isEmpty(t)) {
            lo = std::min<std::uint64_t>(lo, static_cast<std::uint64_t>(t.storageOffset));
            hi = std::max<std::uint64_t>(hi, lastElement(t) + 1);
        }
    }
    if (lo == UINT64_MAX) {
        lo = 0;  // only empty tensors: nothing is reached
    }
    if (lo == 0 && hi == ref.numel) {
        return;
    }
    const std::uint64_t before = ref.numel * elem;
    const std::uint64_t kept = hi - lo;
    for (ValueId v : use.views) {
        auto& t = a.tensors[static_cast<std::size_t>(a[v].i)];
        const auto shifted = static_cast<std::int64_t>(
            static_cast<std::uint64_t>(t.storageOffset) >= lo ? static_cast<std::uint64_t>(t.storageOffset) - lo : 0);
        t.storageOffset = std::min<std::int64_t>(shifted, static_cast<std::int64_t>(kept));
        detail::refreshStridedArgs(a, v);
    }
    ref.numel = kept;
    out.byteOffset = lo * elem;
    out.nbytes = kept * elem;
    b.step(StepKind::Compact, use.firstPath, humanBytes(before), humanBytes(out.nbytes),
           "storage " + ref.key + ": keeps bytes [" + std::to_string(out.byteOffset) + ", " +
               std::to_string(out.byteOffset + out.nbytes) + ") of " + std::to_string(before));
}

void planStorages(Builder& b)
{
    Arena& a = b.arena();
    PickleOrder walk(a);
    walk.visit(b.plan.root, b.rootPath);

    std::vector<pickle::StorageRef> refs;
    std::vector<std::uint32_t> newIndex(a.storages.size(), kNoIndex);
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
        out.source = s;
        out.nbytes = b.in.storages[s].nbytes;
        if (b.opts.compact) {
            compactStorage(b, s, walk.uses[s], out);
        }
        pickle::StorageRef ref = a.storages[s];
        out.key = std::to_string(refs.size());
        out.location = b.opts.mapLocation.empty() ? ref.location : b.opts.mapLocation.apply(ref.location);
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
    }
    const std::size_t unreferenced = a.storages.size() - refs.size();
    if (unreferenced > 0) {
        std::uint64_t bytes = 0;
        for (std::uint32_t s = 0; s < newIndex.size(); ++s) {
            bytes += newIndex[s] == kNoIndex && s < b.in.storages.size() ? b.in.storages[s].nbytes : 0;
        }
        b.step(StepKind::Note, b.rootPath, "", "",
               std::to_string(unreferenced) + " storage(s) (" + humanBytes(bytes) +
                   ") no kept value refers to are not written");
    }
    if (renumbered && b.in.format != Format::Safetensors) {
        b.step(StepKind::Note, b.rootPath, "", "",
               "storage keys renumbered 0.." + std::to_string(refs.size() - 1) +
                   " in the order torch.save would number them");
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        auto& val = a[ValueId{static_cast<std::uint32_t>(i)}];
        if (val.kind == Kind::Storage && static_cast<std::size_t>(val.i) < newIndex.size() &&
            newIndex[static_cast<std::size_t>(val.i)] != kNoIndex) {
            val.i = newIndex[static_cast<std::size_t>(val.i)];
        }
    }
    a.storages = std::move(refs);
    b.plan.tensorCount = walk.tensors;
}

}  // namespace

bool Plan::changesNothing() const
{
    return std::all_of(steps.begin(), steps.end(), [](const PlanStep& s) { return s.kind == StepKind::Note; });
}

std::string Plan::toJson() const
{
    nlohmann::ordered_json j;
    j["schema"] = 1;
    j["options"] = nlohmann::ordered_json::parse(options.toJson());
    auto& steps_ = j["steps"] = nlohmann::ordered_json::array();
    for (const auto& s : steps) {
        steps_.push_back({{"kind", stepKindName(s.kind)},
                          {"path", s.path},
                          {"before", s.before},
                          {"after", s.after},
                          {"detail", s.detail}});
    }
    auto& st = j["storages"] = nlohmann::ordered_json::array();
    for (const auto& s : storages) {
        st.push_back({{"key", s.key},
                      {"source", s.source},
                      {"location", s.location},
                      {"byte_offset", s.byteOffset},
                      {"nbytes", s.nbytes}});
    }
    j["tensors"] = tensorCount;
    j["changes_nothing"] = changesNothing();
    return dumpJson(j);
}

Expected<Plan> makePlan(const Checkpoint& in, const Options& opts)
{
    Plan plan;
    plan.options = opts;
    plan.arena = in.arena;
    plan.root = in.root;
    Builder b{in, opts, plan, "", {}};
    for (const auto& n : in.nodes) {
        if (n.stateDictLike) {
            b.stateDicts.insert(n.value.v);
        }
    }
    for (auto pass : {selectRoot, dropPaths, detail::unwrapModules, detail::sanitize, detail::editPrefixes}) {
        if (auto ok = pass(b); !ok) {
            Error e = ok.error();
            e.path = in.path;
            return e;
        }
    }
    planStorages(b);
    return plan;
}

}  // namespace ckpt::transform
