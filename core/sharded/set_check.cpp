#include "sharded/set_check.h"

#include <algorithm>
#include <iterator>

namespace ckpt::sharded {

namespace {

void mostSevereFirst(std::vector<diagnose::Finding>& findings)
{
    std::stable_sort(findings.begin(), findings.end(),
                     [](const auto& a, const auto& b) { return a.severity > b.severity; });
}

}  // namespace

std::vector<diagnose::Finding> setFindings(const std::vector<SetFinding>& found)
{
    std::vector<diagnose::Finding> out(found.begin(), found.end());  // each the finding it is
    mostSevereFirst(out);
    return out;
}

Expected<std::vector<diagnose::Finding>> checkSet(const std::vector<SetFinding>& found, const Checkpoint& view,
                                                  const diagnose::CheckOptions& opts, std::stop_token stop)
{
    auto rules = diagnose::check(view, opts, std::move(stop));
    if (!rules) {
        return rules.error();
    }
    std::vector<SetFinding> own;
    std::copy_if(found.begin(), found.end(), std::back_inserter(own), [](const SetFinding& f) { return !f.inView; });
    auto findings = setFindings(own);
    findings.insert(findings.end(), rules->begin(), rules->end());
    mostSevereFirst(findings);
    return findings;
}

}  // namespace ckpt::sharded
