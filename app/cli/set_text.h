// How `check` reports a set (sharded_cli): its own findings and every single-file rule on its view,
// errors first, or its findings alone with the reason the file rules did not run.
#pragma once

#include "cli/cli.h"
#include "cli/common.h"
#include "diagnose/diagnose.h"
#include "sharded/sharded.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace ckpt::cli {

// `check` of a set that opens as `view`, or, when it does not (a shard holding a tensor no
// consolidation writes, an FSDP rank file alone or with optimizer values), its own findings and one line on
// stderr saying why the file rules did not run; with --values or --against that is an error.
int checkSetView(const std::string& input, const std::vector<sharded::SetFinding>& found,
                 const Expected<CheckpointPtr>& view, const diagnose::CheckOptions& opts, const std::string& at,
                 bool json, std::ostream& out, std::ostream& err);

}  // namespace ckpt::cli
