// What the multi-file subcommand hooks (sharded_cli, dcp_cli) do alike: open the set an input
// names, or say why it cannot be read, and report a set's findings as `check` does, errors first.
#pragma once

#include "cli/cli.h"
#include "cli/common.h"
#include "diagnose/diagnose.h"
#include "sharded/sharded.h"

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::cli {

// Prints the findings of the set at `at` as `check` does; returns check's exit code for them.
int printSetFindings(const std::vector<sharded::SetFinding>& found, const std::string& at, bool json,
                     std::ostream& out);

// `check` of a set opened as one checkpoint (sharded/set_view.h): the set's findings and every
// single-file rule on `view` (with --values and --against as `opts` asks), errors first.
int printSetCheck(const std::vector<sharded::SetFinding>& found, const Checkpoint& view,
                  const diagnose::CheckOptions& opts, const std::string& at, bool json, std::ostream& out,
                  std::ostream& err);

// `check` of a set that opens as `view`, or, when it does not (a shard holding a tensor no
// consolidation writes, an FSDP rank file with optimizer values), its own findings and one line on
// stderr saying why the file rules did not run; with --values or --against that is an error.
int checkSetView(const std::string& input, const std::vector<sharded::SetFinding>& found,
                 const Expected<CheckpointPtr>& view, const diagnose::CheckOptions& opts, const std::string& at,
                 bool json, std::ostream& out, std::ostream& err);

// A hook's dispatch: nothing when `opened` holds no set of the hook's kind (the input is another
// reader's), the error's exit code when the set could not be read, else what `use` returns for it.
template <class Set, class Use>
std::optional<int> withSet(const std::optional<Expected<Set>>& opened, const std::string& input, std::ostream& err,
                           const Use& use)
{
    if (!opened) {
        return std::nullopt;
    }
    if (!*opened) {
        printError(err, opened->error(), input);
        return exitCodeFor(opened->error().code);
    }
    return use(**opened);
}

}  // namespace ckpt::cli
