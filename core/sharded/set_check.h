// A set's findings beside the single-file rules: what `check SET` prints and the window's Findings
// panel shows for a set, merged in one place.
#pragma once

#include "checkpoint/checkpoint.h"
#include "diagnose/diagnose.h"
#include "sharded/sharded.h"

#include <stop_token>
#include <vector>

namespace ckpt::sharded {

// The set's own findings as diagnose's, most severe first (the format's order kept within a
// severity).
[[nodiscard]] std::vector<diagnose::Finding> setFindings(const std::vector<SetFinding>& found);

// The set's findings and every single-file rule on `view`, the set opened whole (set_view.h), with
// --values and --against as `opts` asks: the set's first within each severity, most severe first.
// A set finding about a value the view holds (SetFinding::inView) is left to the rules' own.
Expected<std::vector<diagnose::Finding>> checkSet(const std::vector<SetFinding>& found, const Checkpoint& view,
                                                  const diagnose::CheckOptions& opts, std::stop_token stop = {});

}  // namespace ckpt::sharded
