// How `check` reports a set (sharded_cli): its own findings and every single-file rule on its view,
// errors first, or its findings alone with the reason the file rules did not run; and the value
// scan's progress line, which a file's check shows too.
#pragma once

#include "cli/cli.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "diagnose/diagnose.h"
#include "sharded/sharded.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace ckpt::cli {

// `run(opts)` with the value scan it may do (--values) shown on a progress line, erased before
// `run`'s result is printed.
template <class Run> auto withValueProgress(diagnose::CheckOptions opts, bool json, std::ostream& err, const Run& run)
{
    ProgressLine line(err, json, "check");
    opts.valueProgress = line.forBytes();
    auto result = run(opts);
    line.finish();
    return result;
}

// `check` of a set that opens as `view`, or, when it does not (a shard holding a tensor no
// consolidation writes, an FSDP rank file alone or with optimizer values), its own findings and one line on
// stderr saying why the file rules did not run; with --values or --against that is an error.
int checkSetView(const std::string& input, const std::vector<sharded::SetFinding>& found,
                 const Expected<CheckpointPtr>& view, const diagnose::CheckOptions& opts, const std::string& at,
                 bool json, std::ostream& out, std::ostream& err);

}  // namespace ckpt::cli
