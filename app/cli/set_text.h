// What the multi-file subcommand hooks (sharded_cli, dcp_cli) print alike: a global shape, and a
// set's findings as `check` reports them, errors first.
#pragma once

#include "diagnose/diagnose.h"
#include "sharded/sharded.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ckpt::cli {

[[nodiscard]] std::string shapeText(const std::vector<std::int64_t>& dims);  // "[64, 3, 7, 7]"
[[nodiscard]] std::vector<diagnose::Finding> setFindings(const std::vector<sharded::SetFinding>& found);

}  // namespace ckpt::cli
