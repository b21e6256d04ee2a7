// What the multi-file subcommand hooks (sharded_cli, dcp_cli) do alike: open the set an input
// names, or say why it cannot be read, and report a set's findings as `check` does, errors first.
#pragma once

#include "cli/cli.h"
#include "cli/common.h"
#include "sharded/sharded.h"

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::cli {

// Prints the findings of the set at `at` as `check` does; returns check's exit code for them.
int printSetFindings(const std::vector<sharded::SetFinding>& found, const std::string& at, bool json,
                     std::ostream& out);

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

// inspect's use of a set for withSet: printed as JSON or as text.
template <class Set>
auto printedAs(bool json, void (*asJson)(const Set&, std::ostream&), void (*asText)(const Set&, std::ostream&),
               std::ostream& out)
{
    return [json, asJson, asText, &out](const Set& set) {
        (json ? asJson : asText)(set, out);
        return kExitOk;
    };
}

}  // namespace ckpt::cli
