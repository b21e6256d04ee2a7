// Internal to the diff stage: the leaves of a subtree, keyed the way the two sides are matched.
#pragma once

#include "checkpoint/checkpoint.h"

#include <string>
#include <vector>

namespace ckpt::diff::detail {

struct Leaf {
    NodeIndex node;
    std::string key;       // relative key path, as written
    std::string matchKey;  // with wrapper prefixes taken off each component when aligning
};

// Leaves (tensors, scalars, empty containers, cycles) under `root` in depth-first order. With
// `align`, every component loses the wrapper segments it starts with (`module.`, `_orig_mod.`,
// FSDP's), unless that would give two leaves one key; `prefixes` gets the chains taken off.
std::vector<Leaf> collectLeaves(const Checkpoint& c, NodeIndex root, bool align, std::vector<std::string>& prefixes);

}  // namespace ckpt::diff::detail
