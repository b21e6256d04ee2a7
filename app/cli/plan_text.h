// `convert`'s plan as text: what it reads and writes, each rule once (a rule that touches many keys
// is one line with a count and two examples, unless --verbose or --dry-run asks for every step),
// and the totals; and the closing line's account of what was dropped.
#pragma once

#include "checkpoint/checkpoint.h"
#include "transform/transform.h"

#include <cstddef>
#include <iosfwd>
#include <string>

namespace ckpt::cli {

// A rule with more steps than this is summarised in one line unless every step is asked for.
inline constexpr std::size_t kStepsListed = 4;

// "convert IN (FORMAT) -> OUT (KIND)", the steps (each one when `everyStep`), then "N tensors, M
// storages, X of tensor data, K values dropped". `output` empty: a dry run.
void printPlan(const Checkpoint& in, const std::string& inputName, const transform::Plan& plan,
               const std::string& output, const std::string& kind, bool everyStep, std::ostream& out);

// One step as the plan lists it: "  note    lm_head.weight: 1 name the file does not store, ...".
void printStep(const transform::PlanStep& s, std::ostream& out);

// What the plan drops, for the closing line: "0 values dropped", "1 value dropped (optimizer)",
// "5 values dropped (optimizer, lr_scheduler, ...)"; with `would`, "... would be dropped".
[[nodiscard]] std::string droppedText(const transform::Plan& plan, bool would = false);

}  // namespace ckpt::cli
