// What the multi-file subcommand hooks (sharded_cli, dcp_cli) print alike: a set's findings as
// `check` reports them, errors first.
#pragma once

#include "diagnose/diagnose.h"
#include "sharded/sharded.h"

#include <string>
#include <vector>

namespace ckpt::cli {

[[nodiscard]] std::vector<diagnose::Finding> setFindings(const std::vector<sharded::SetFinding>& found);

}  // namespace ckpt::cli
