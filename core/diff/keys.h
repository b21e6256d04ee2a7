// Internal to the diff stage: the leaves of a subtree, keyed the way the two sides are matched.
#pragma once

#include "checkpoint/checkpoint.h"

#include <string>
#include <vector>

namespace ckpt::diff::detail {

struct Leaf {
    std::uint32_t part = 0;  // which root it was found under
    NodeIndex node;
    std::string key;       // relative key path, as written
    std::string matchKey;  // with wrapper prefixes taken off each component when aligning
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
std::vector<Leaf> collectLeaves(const std::vector<Root>& roots, bool align, std::vector<std::string>& prefixes);

}  // namespace ckpt::diff::detail
