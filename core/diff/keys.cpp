// Wrapper prefixes are whole segments at the start of a key (docs/format.md §7), the same list check's
// prefix rules know: `mlp_module.layer0` and Lightning's `model.` are never taken for one. The
// strip itself is transform's (Options::renamedKey), so diff aligns exactly what convert would strip.
#include "diff/keys.h"

#include "checkpoint/script_state_dict.h"
#include "transform/options.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_set>

namespace ckpt::diff::detail {
namespace {

// The wrapper segments a key component starts with, each with its dot.
std::vector<std::string> leadingChain(std::string_view key)
{
    std::vector<std::string> chain;
    std::size_t at = 0;
    while (const auto* seg = transform::wrapperSegmentAt(key, at)) {
        chain.emplace_back(std::string(seg->name) + ".");
        at += seg->name.size() + 1;
    }
    return chain;
}

bool isLeaf(const Node& n)
{
    return n.kind == NodeKind::Tensor || n.kind == NodeKind::Scalar || n.kind == NodeKind::Recursive ||
           n.childCount == 0;
}

void collectUnder(const Checkpoint& c, NodeIndex root, std::uint32_t part, bool align, std::vector<Leaf>& leaves,
                  std::set<std::string>& chains)
{
    // A whole TorchScript archive compares as what torch.jit.load(f).state_dict() gives, so it
    // matches the state dict it was saved from; a --select path compares the raw data.pkl tree.
    if (c.torchScript && root == kRootNode) {
        if (auto sd = scriptStateDict(c)) {
            for (const auto& e : sd->entries) {
                leaves.push_back({part, c.tensors[e.tensor].node, e.key, e.key});
            }
            return;
        }
    }
    // Depth first with an explicit stack of (node, key path so far): trees may be deep.
    std::vector<std::pair<NodeIndex, std::pair<std::string, std::string>>> stack;
    stack.push_back({root, {}});
    while (!stack.empty()) {
        auto [id, keys] = std::move(stack.back());
        stack.pop_back();
        const Node& n = c.nodes[id];
        if (isLeaf(n)) {
            leaves.push_back({part, id, keys.first, keys.second});
            continue;
        }
        if (id != root) {
            leaves.push_back({part, id, keys.first, keys.second, true});
        }
        // The root's extra rows (a .pt2's [constants] and [graph_signature], checkpoint.h
        // rootExtras) are no part of the value the file holds: a whole file compares as its root
        // (a TorchScript archive's constants.pkl stays in the raw tree's comparison, as before).
        const std::uint32_t shown =
            id == kRootNode && root == kRootNode && !c.torchScript
                ? n.childCount - static_cast<std::uint32_t>(std::min<std::size_t>(c.rootExtras.size(), n.childCount))
                : n.childCount;
        for (std::uint32_t r = shown; r-- > 0;) {
            const NodeIndex child = n.child(r);
            const std::string_view name = c.nodes[child].name;
            std::string matchName(name);
            if (align) {
                const auto chain = leadingChain(name);
                if (!chain.empty()) {
                    transform::Options strip;
                    strip.stripPrefixes = chain;
                    matchName = strip.renamedKey(matchName);
                    std::string joined;
                    for (const auto& s : chain) {
                        joined += s;
                    }
                    chains.insert(joined);
                }
            }
            const std::string sep = id == root ? "" : "/";
            stack.push_back({child, {keys.first + sep + std::string(name), keys.second + sep + matchName}});
        }
    }
}

}  // namespace

std::string containerClass(const Checkpoint& c, NodeIndex n)
{
    const Node& node = c.nodes[n];
    if ((node.kind == NodeKind::Object || node.kind == NodeKind::Module) && node.object.valid()) {
        return c.objects[node.object].type;
    }
    return std::string(nodeKindName(node.kind == NodeKind::OrderedDict ? NodeKind::Dict : node.kind));
}

std::vector<Leaf> collectLeaves(const std::vector<Root>& roots, bool align, std::vector<std::string>& prefixes,
                                std::vector<Leaf>* containers)
{
    std::vector<Leaf> leaves;
    std::set<std::string> chains;
    for (std::uint32_t part = 0; part < roots.size(); ++part) {
        // A file of a set holding nothing (an empty shard) adds no key.
        const bool emptyPart = roots.size() > 1 && roots[part].node.valid() &&
                               roots[part].checkpoint->nodes[roots[part].node].childCount == 0;
        if (roots[part].node.valid() && !emptyPart) {
            collectUnder(*roots[part].checkpoint, roots[part].node, part, align, leaves, chains);
        }
    }
    // Stripping must not merge two keys (`module.fc.weight` beside `fc.weight`): then nothing is
    // aligned on this side and the report says so by naming no prefix.
    std::unordered_set<std::string> seen;
    const bool collides = std::any_of(leaves.begin(), leaves.end(),
                                      [&](const Leaf& l) { return !l.container && !seen.insert(l.matchKey).second; });
    if (collides || chains.empty()) {
        for (auto& l : leaves) {
            l.matchKey = l.key;
        }
        chains.clear();
    }
    prefixes.assign(chains.begin(), chains.end());
    const auto split = std::stable_partition(leaves.begin(), leaves.end(), [](const Leaf& l) { return !l.container; });
    if (containers != nullptr) {
        containers->assign(std::make_move_iterator(split), std::make_move_iterator(leaves.end()));
    }
    leaves.erase(split, leaves.end());
    return leaves;
}

}  // namespace ckpt::diff::detail
