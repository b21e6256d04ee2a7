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

}  // namespace ckpt::cli
