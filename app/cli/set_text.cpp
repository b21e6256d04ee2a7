#include "cli/set_text.h"

#include "diagnose/diagnose.h"
#include "diagnose/report.h"

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

}  // namespace ckpt::cli
