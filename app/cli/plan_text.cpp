#include "cli/plan_text.h"

#include "transform/plan_summary.h"
#include "util/bytes.h"
#include "util/printable.h"

#include <algorithm>
#include <ostream>
#include <string_view>
#include <vector>

namespace ckpt::cli {

namespace {

using transform::PlanStep;
using transform::StepKind;

// "  rename  ": the kind, padded so the steps' texts line up.
void printKind(StepKind kind, std::ostream& out)
{
    const std::string_view name = transform::stepKindName(kind);
    out << "  " << name << std::string(name.size() < 8 ? 8 - name.size() : 1, ' ');
}

// A step without its kind and its detail: "module.fc.weight -> fc.weight", "optimizer: dict dropped".
std::string stepBody(const PlanStep& s)
{
    // Paths, values and details quote the file's keys: shown escaped, one line per step.
    std::string path = displayText(s.path);
    const std::string before = displayText(s.before);
    const std::string after = displayText(s.after);
    switch (s.kind) {
    case StepKind::Rename:
        return path + " -> " + after;
    case StepKind::Remap:
        return before + " -> " + after;
    case StepKind::Note:
        return path;
    default:
        break;
    }
    std::string body = (path.empty() ? "(root)" : path) + ": " + before;
    if (!after.empty()) {
        body += " -> " + after;
    } else if (s.kind == StepKind::Drop) {
        body += " dropped";
    }
    return body;
}

}  // namespace

void printStep(const PlanStep& s, std::ostream& out)
{
    printKind(s.kind, out);
    const std::string body = stepBody(s);
    const std::string detail = displayText(s.detail);
    if (s.kind == StepKind::Note) {
        out << (body.empty() ? "" : body + ": ") << detail << '\n';
        return;
    }
    out << body << (detail.empty() ? "" : " (" + detail + ")") << '\n';
}

namespace {

// One line for a rule's many steps: how many, and the first two.
// "  rename  strip 'module.' from 40000 keys: module.a -> a, module.b -> b, ..."
// "  convert 37 values: a: numpy.ndarray -> tensor float32; b: ...; ... (same values and shape, ...)"
void printGroup(const transform::Plan& plan, const transform::StepGroup& g, std::ostream& out)
{
    const PlanStep& first = plan.steps[g.steps[0]];
    const PlanStep& second = plan.steps[g.steps[1]];
    printKind(g.kind, out);
    const std::string count = std::to_string(g.steps.size());
    if (g.kind == StepKind::Rename && !g.rule.empty()) {
        out << displayText(g.rule) << ' ' << count << " keys: " << stepBody(first) << ", " << stepBody(second)
            << ", ...\n";
        return;
    }
    const std::string noun = g.kind == StepKind::Compact  ? " storages: "
                             : g.kind == StepKind::Rename ? " keys: "
                                                          : " values: ";
    out << count << noun << stepBody(first) << "; " << stepBody(second) << "; ...";
    // A compaction's detail names its own storage: the examples' own details would not be the rule's.
    if (g.kind != StepKind::Compact && !first.detail.empty()) {
        out << " (" << displayText(first.detail) << ')';
    }
    out << '\n';
}

}  // namespace

void printPlan(const Checkpoint& in, const std::string& inputName, const transform::Plan& plan,
               const std::string& output, const std::string& kind, bool everyStep, std::ostream& out)
{
    out << "convert " << displayText(inputName) << " (" << formatName(in.format) << ") -> "
        << (output.empty() ? std::string("(dry run)") : displayText(output)) << " (" << kind << ")\n";
    if (everyStep) {
        for (const auto& s : plan.steps) {
            printStep(s, out);
        }
    } else {
        // Steps stay in plan order; a rule with many steps is its one line where its first step is.
        const auto groups = transform::groupSteps(plan);
        std::vector<const transform::StepGroup*> folded(plan.steps.size(), nullptr);
        for (const auto& g : groups) {
            for (const std::size_t i : g.steps) {
                folded[i] = g.steps.size() > kStepsListed ? &g : nullptr;
            }
        }
        bool anyFolded = false;
        for (std::size_t i = 0; i < plan.steps.size(); ++i) {
            if (folded[i] == nullptr) {
                printStep(plan.steps[i], out);
            } else if (folded[i]->steps.front() == i) {
                printGroup(plan, *folded[i], out);
                anyFolded = true;
            }
        }
        if (anyFolded) {
            out << "  (" << plan.steps.size() << " steps in all: --verbose lists each)\n";
        }
    }
    std::uint64_t bytes = 0;
    for (const auto& s : plan.storages) {
        bytes += s.nbytes;
    }
    out << (plan.changesNothing() ? "nothing to change; " : "") << plan.tensorCount << " tensors, "
        << plan.storages.size() << " storages, " << humanBytes(bytes) << " of tensor data, " << plan.droppedCount()
        << (plan.droppedCount() == 1 ? " value" : " values") << " dropped\n";
}

std::string droppedText(const transform::Plan& plan, bool would)
{
    const std::uint64_t n = plan.droppedCount();
    std::string text = std::to_string(n) + (n == 1 ? " value " : " values ") + (would ? "would be " : "") + "dropped";
    std::size_t named = 0;
    for (const auto& s : plan.steps) {
        if (s.kind != StepKind::Drop) {
            continue;
        }
        if (named == 2) {
            text += ", ...";
            break;
        }
        text += (named == 0 ? " (" : ", ") + displayText(s.path.empty() ? std::string("(root)") : s.path);
        ++named;
    }
    return named > 0 ? text + ")" : text;
}

}  // namespace ckpt::cli
