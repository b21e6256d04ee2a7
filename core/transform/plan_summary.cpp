#include "transform/plan_summary.h"

#include <string_view>
#include <unordered_map>

namespace ckpt::transform {

namespace {

std::string quoted(std::string_view s)
{
    return "'" + std::string(s) + "'";
}

// A rename's rule in words, before its count: "strip 'module.' from".
std::string renameRule(const Options::KeyEdit& e)
{
    if (e.added.empty()) {
        return "strip " + quoted(e.removed) + " from";
    }
    if (e.removed.empty()) {
        return "add " + quoted(e.added) + " to";
    }
    return "replace " + quoted(e.removed) + " with " + quoted(e.added) + " in";
}

}  // namespace

std::vector<StepGroup> groupSteps(const Plan& plan)
{
    std::vector<StepGroup> groups;
    std::unordered_map<std::string, std::size_t> byKey;
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
        const PlanStep& s = plan.steps[i];
        std::string rule;
        std::string key(stepKindName(s.kind));
        key += '\0';
        if (s.kind == StepKind::Rename && s.detail.empty()) {
            // A key the prefix options renamed (prefix.cpp): `before` is the old key.
            const auto edit = plan.options.keyEdit(s.before);
            rule = renameRule(edit);
            key += edit.removed + '\0' + edit.added;
        } else if (s.kind == StepKind::Remap) {
            key += s.before + '\0' + s.after;
        } else if (s.kind != StepKind::Compact) {
            key += s.after + '\0' + s.detail;
        }
        const auto [it, added] = byKey.try_emplace(std::move(key), groups.size());
        if (added) {
            groups.push_back({s.kind, std::move(rule), {}});
        }
        groups[it->second].steps.push_back(i);
    }
    return groups;
}

}  // namespace ckpt::transform
