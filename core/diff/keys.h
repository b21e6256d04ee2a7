// Internal to the diff stage: the leaves of a subtree, keyed the way the two sides are matched.
#pragma once

#include "checkpoint/checkpoint.h"

#include <string>
#include <vector>

namespace ckpt::diff::detail {

struct Leaf {
    std::uint32_t part = 0;  // which root it was found under
    NodeIndex node;
    std::string key;         // relative key path, as written
    std::string matchKey;    // with wrapper prefixes taken off each component when aligning
    bool container = false;  // not a leaf: a container or object holding keys (collectLeaves' `containers`)
};

// A subtree leaves are collected from: one per file of a side (the files of a sharded set are one
// key space).
struct Root {
    const Checkpoint* checkpoint = nullptr;
    NodeIndex node;
};

// Leaves (tensors, scalars, empty containers, cycles) under each root in turn, depth first. With
// `align`, every component loses the wrapper segments it starts with (`module.`, `_orig_mod.`,
// FSDP's), unless that would give two leaves one key; `prefixes` gets the chains taken off.
// `containers`, when given, gets the containers and objects below the roots that hold keys, keyed
// the same way: a pair whose classes differ (an argparse.Namespace become a dict) is a change even
// when every leaf below matches.
std::vector<Leaf> collectLeaves(const std::vector<Root>& roots, bool align, std::vector<std::string>& prefixes,
                                std::vector<Leaf>* containers = nullptr);

// What a container or object is, for that comparison: the object's class (`argparse.Namespace`), or
// the container's type, dict and OrderedDict both `dict` (no format but torch.save keeps the
// difference, and torch's load_state_dict takes either).
[[nodiscard]] std::string containerClass(const Checkpoint& c, NodeIndex n);

}  // namespace ckpt::diff::detail
