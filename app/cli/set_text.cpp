#include "cli/set_text.h"

#include "diagnose/diagnose.h"
#include "diagnose/report.h"
#include "sharded/set_check.h"
#include "util/printable.h"

#include <ostream>

namespace ckpt::cli {

namespace {

// Prints the findings of the set at `at` as `check` does; returns check's exit code for them.
int printSetFindings(const std::vector<sharded::SetFinding>& found, const std::string& at, bool json, std::ostream& out)
{
    const auto findings = sharded::setFindings(found);
    out << (json ? diagnose::renderJson(findings, at) : diagnose::renderText(findings, at));
    return diagnose::findingsExitCode(findings);
}

// `check` of a set opened as one checkpoint: the set's findings and every single-file rule on
// `view` (with --values and --against as `opts` asks), errors first.
int printSetCheck(const std::vector<sharded::SetFinding>& found, const Checkpoint& view,
                  const diagnose::CheckOptions& opts, const std::string& at, bool json, std::ostream& out,
                  std::ostream& err)
{
    auto findings = withValueProgress(
        opts, json, err, [&](const diagnose::CheckOptions& o) { return sharded::checkSet(found, view, o); });
    if (!findings) {
        printError(err, findings.error(), at);
        return exitCodeFor(findings.error().code);
    }
    out << (json ? diagnose::renderJson(*findings, at) : diagnose::renderText(*findings, at));
    return diagnose::findingsExitCode(*findings);
}

}  // namespace

int checkSetView(const std::string& input, const std::vector<sharded::SetFinding>& found,
                 const Expected<CheckpointPtr>& view, const diagnose::CheckOptions& opts, const std::string& at,
                 bool json, std::ostream& out, std::ostream& err)
{
    if (!view && !opts.values && !opts.againstPath) {
        err << "ckptscope check: " << displayText(input)
            << ": the single-file rules did not run on the set: " << displayText(view.error().message) << '\n';
        return printSetFindings(found, at, json, out);
    }
    if (!view) {
        printError(err, view.error(), input);
        return exitCodeFor(view.error().code);
    }
    return printSetCheck(found, **view, opts, at, json, out, err);
}

}  // namespace ckpt::cli
