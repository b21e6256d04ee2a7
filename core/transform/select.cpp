// --select and --drop: which value of the input becomes the output's root, and what is removed
// from it, each named in the plan with what it held.
#include "transform/plan_builder.h"

#include <algorithm>

namespace ckpt::transform::detail {
namespace {

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

bool isDescendant(const Checkpoint& c, NodeIndex node, NodeIndex ancestor)
{
    for (NodeIndex p = node; p.valid(); p = c.nodes[p].parent) {
        if (p == ancestor) {
            return true;
        }
    }
    return false;
}

std::string describeNode(const Checkpoint& c, NodeIndex i)
{
    const Node& n = c.nodes[i];
    if (n.kind == NodeKind::Tensor && n.tensor.valid()) {
        const auto& t = c.tensors[n.tensor];
        std::string shape;
        for (auto d : t.shape) {
            shape += (shape.empty() ? "" : ", ") + std::to_string(d);
        }
        return "tensor " + std::string(dtypeName(t.dtype)) + " [" + shape + "]";
    }
    if ((n.kind == NodeKind::Module || n.kind == NodeKind::Object) && n.object.valid()) {
        return c.objects[n.object].type;
    }
    if (n.kind == NodeKind::Scalar) {
        return pickle::shortRepr(c.arena, n.value);
    }
    return std::string(nodeKindName(n.kind)) + " (" + std::to_string(n.childCount) + " entries)";
}

std::string subtreeDetail(const Checkpoint& c, NodeIndex i)
{
    const Node& n = c.nodes[i];
    if (n.tensorCount == 0) {
        return {};
    }
    return std::to_string(n.tensorCount) + (n.tensorCount == 1 ? " tensor, " : " tensors, ") + humanBytes(n.bytes);
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

}  // namespace

Expected<void> removeNode(Builder& b, NodeIndex idx, const std::string& path)
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
        if (const std::uint32_t row = b.in.rowOf(idx); row < a[pv].items.size()) {
            a[pv].items.erase(a[pv].items.begin() + row);
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

Expected<void> selectRoot(Builder& b)
{
    if (!b.opts.select) {
        return {};
    }
    const std::string& path = *b.opts.select;
    const NodeIndex idx = b.in.find(path);
    if (!idx.valid()) {
        return makeError(ErrorCode::Usage, "--select '" + path + "': no value at that key path");
    }
    b.plan.root = b.in.nodes[idx].value;
    b.rootPath = path;
    if (!path.empty()) {
        b.step(StepKind::Select, path, describeNode(b.in, idx), "root", subtreeDetail(b.in, idx));
    }
    return {};
}

Expected<void> dropPaths(Builder& b)
{
    struct Target {
        NodeIndex node;
        std::string path;
    };
    std::vector<Target> targets;
    const NodeIndex selected = b.opts.select ? b.in.find(*b.opts.select) : kRootNode;
    for (const auto& p : b.opts.drop) {
        std::string path = p;
        NodeIndex idx = p.empty() ? NodeIndex() : b.in.find(p);
        if (!idx.valid() && b.opts.select && !p.empty()) {
            path = joinPath(*b.opts.select, p);  // a path relative to the selected value
            idx = b.in.find(path);
        }
        if (p.empty()) {
            return makeError(ErrorCode::Usage, "--drop needs a key path; the root cannot be dropped");
        }
        if (!idx.valid()) {
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
    if (b.opts.dropExtraState) {
        // Every extra-state value of the selected tree, outermost only (what holds one is gone whole).
        for (std::uint32_t i = 0; i < b.in.nodes.size(); ++i) {
            const NodeIndex idx{i};
            if (idx != selected && transform::isExtraStateKey(b.in.nodes[idx].name) &&
                isDescendant(b.in, idx, selected) && std::none_of(targets.begin(), targets.end(), [&](const Target& t) {
                    return t.node == idx || isDescendant(b.in, idx, t.node);
                })) {
                targets.push_back({idx, b.in.pathOf(idx)});
            }
        }
    }
    // Later list positions first, so earlier removals do not shift the rows still to be removed.
    std::stable_sort(targets.begin(), targets.end(),
                     [&](const Target& x, const Target& y) { return b.in.rowOf(x.node) > b.in.rowOf(y.node); });
    for (const auto& t : targets) {
        if (auto ok = removeNode(b, t.node, t.path); !ok) {
            return ok;
        }
        b.step(StepKind::Drop, t.path, describeNode(b.in, t.node), "", subtreeDetail(b.in, t.node));
    }
    return {};
}

}  // namespace ckpt::transform::detail
