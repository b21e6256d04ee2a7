// A plan as a person reads it: the steps one rule makes (strip `module.` from 40,000 keys, map
// every storage's device, convert each numpy array) gathered into one group, so a summary can say
// each rule once with a count and examples where the plan lists every step.
#pragma once

#include "transform/transform.h"

#include <cstddef>
#include <string>
#include <vector>

namespace ckpt::transform {

struct StepGroup {
    StepKind kind = StepKind::Note;
    // For renames, the rule in words: "strip 'module.' from", "add 'model.' to", "replace 'a.'
    // with 'b.' in" (the count and "keys" follow); "" for other kinds.
    std::string rule;
    std::vector<std::size_t> steps;  // indices into Plan::steps, in plan order
};

// The plan's steps by rule, each group where its first step is. Renames made by the prefix
// options are one group per (prefix taken off, prefix put on); a rename of another kind (a
// module's _metadata) and every other step group by kind, result and reason (a compaction by kind
// alone, since each names its own storage and sizes).
[[nodiscard]] std::vector<StepGroup> groupSteps(const Plan& plan);

}  // namespace ckpt::transform
