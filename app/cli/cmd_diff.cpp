#include "cli/cmd_diff.h"

#include "checkpoint/checkpoint.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/parse.h"
#include "diff/diff.h"

#include <iostream>
#include <ostream>

namespace ckpt::cli {
namespace {

// "state_dict:" compares A's state_dict with B's root; a path without ':' names both sides.
diff::Options selectPaths(const std::string& spec)
{
    diff::Options o;
    const auto colon = spec.find(':');
    if (colon == std::string::npos) {
        o.selectA = o.selectB = spec;
    } else {
        o.selectA = spec.substr(0, colon);
        o.selectB = spec.substr(colon + 1);
    }
    return o;
}

}  // namespace

int cmdDiff(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)
{
    CLI::App app{"Compare two checkpoints: keys only in one, tensors moved to another key, dtype/shape/stride/device "
                 "changes, value differences (compared as float64 across dtypes) and non-tensor values that differ.",
                 "ckptscope diff"};
    std::string fileA;
    std::string fileB;
    std::string select;
    double rtol = 1e-5;
    double atol = 1e-8;
    bool json = false;
    bool summary = false;
    bool noAlign = false;
    bool listEqual = false;
    unsigned threads = 0;
    app.add_option("A", fileA, "first checkpoint (.pt .pth .ckpt .bin .safetensors)")->required();
    app.add_option("B", fileB, "second checkpoint")->required();
    app.add_option("--select", select,
                   "compare subtrees: A_PATH:B_PATH (e.g. `state_dict:` for A's state_dict against B's root); a "
                   "path without ':' selects it on both sides");
    app.add_option("--rtol", rtol, "relative tolerance of allclose (default 1e-5)")->check(CLI::NonNegativeNumber);
    app.add_option("--atol", atol, "absolute tolerance of allclose (default 1e-8)")->check(CLI::NonNegativeNumber);
    auto* jsonOpt = app.add_flag("--json", json, "print JSON (schema 1) on stdout");
    app.add_flag("--summary", summary, "one line for the file pair")->excludes(jsonOpt);
    app.add_flag("--no-align", noAlign, "match keys as written, without taking wrapper prefixes off");
    app.add_flag("--list-equal", listEqual, "name every equal key in the text report, not only count them");
    app.add_option("--threads", threads, "threads comparing tensors (default: one per core)");
    app.footer("Examples:\n"
               "  ckptscope diff epoch10.pt epoch20.pt\n"
               "  ckptscope diff model.pt model.safetensors --select state_dict:\n"
               "  ckptscope diff fp32.pt bf16.pt --rtol 1e-2 --atol 1e-3 --json\n"
               "Wrapper prefixes (module., _orig_mod., _fsdp_wrapped_module.) are aligned unless --no-align; a\n"
               "tensor found under another key with the same bytes is reported as renamed. allclose counts NaN\n"
               "against NaN as equal.\n"
               "Exit codes: 0 equal, 1 they differ, 2 a file could not be read or bad usage.");
    if (const auto done = parseCommand(app, args, "diff", out, err)) {
        return *done;
    }
    diff::Options opts = selectPaths(select);
    opts.rtol = rtol;
    opts.atol = atol;
    opts.alignPrefixes = !noAlign;
    opts.threads = threads;

    auto a = openCheckpoint(fileA);
    if (!a) {
        printError(err, a.error(), fileA);
        return kExitBadInput;
    }
    auto b = openCheckpoint(fileB);
    if (!b) {
        printError(err, b.error(), fileB);
        return kExitBadInput;
    }
    auto r = diff::compare(**a, **b, opts);
    if (!r) {
        printError(err, r.error());
        return kExitBadInput;
    }
    if (json) {
        out << diff::renderJson(*r, **a, **b);
    } else if (summary) {
        out << diff::renderSummary(*r);
    } else {
        out << diff::renderText(*r, **a, **b, {.listEqual = listEqual});
    }
    return r->equal() ? kExitOk : kExitProblems;
}

}  // namespace ckpt::cli
