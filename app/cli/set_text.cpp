#include "cli/set_text.h"

#include "diagnose/diagnose.h"
#include "diagnose/report.h"
#include "util/printable.h"

#include <algorithm>
#include <ostream>

namespace ckpt::cli {

namespace {

std::vector<diagnose::Finding> setFindings(const std::vector<sharded::SetFinding>& found)
{
    std::vector<diagnose::Finding> out;
    out.reserve(found.size());
    for (const auto& f : found) {
        out.push_back({f.code, f.severity, f.title, f.detail, f.paths, std::nullopt});
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.severity > b.severity; });
    return out;
}

}  // namespace

int printSetFindings(const std::vector<sharded::SetFinding>& found, const std::string& at, bool json, std::ostream& out)
{
    const auto findings = setFindings(found);
    out << (json ? diagnose::renderJson(findings, at) : diagnose::renderText(findings, at));
    return diagnose::findingsExitCode(findings);
}

int printSetCheck(const std::vector<sharded::SetFinding>& found, const Checkpoint& view,
                  const diagnose::CheckOptions& opts, const std::string& at, bool json, std::ostream& out,
                  std::ostream& err)
{
    auto findings = setFindings(found);
    auto rules = diagnose::check(view, opts);
    if (!rules) {
        printError(err, rules.error(), at);
        return exitCodeFor(rules.error().code);
    }
    // The set's own findings first within each severity, then the rules' (sorted by code).
    findings.insert(findings.end(), rules->begin(), rules->end());
    std::stable_sort(findings.begin(), findings.end(),
                     [](const auto& a, const auto& b) { return a.severity > b.severity; });
    out << (json ? diagnose::renderJson(findings, at) : diagnose::renderText(findings, at));
    return diagnose::findingsExitCode(findings);
}

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
