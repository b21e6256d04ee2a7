#include "cli/cmd_diff.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/extensions.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/json_out.h"
#include "cli/parse.h"
#include "cli/progress.h"
#include "cli/remote_cli.h"
#include "diff/diff.h"
#include "sharded/listing.h"
#include "sharded/sharded.h"
#include "util/json_text.h"
#include "util/printable.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
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

// The checkpoints of a directory in natural order (rank_2 before rank_10), so rank 0 comes first.
std::vector<std::string> checkpointsIn(const std::string& dir)
{
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        // The one list the window's dialogs and folder listings use (checkpoint/extensions.h).
        if (e.is_regular_file(ec) && hasExtension(e.path().filename().string(), kCheckpointFileExtensions)) {
            files.push_back(e.path().string());
        }
    }
    auto key = [](const std::string& s) {
        // Digit runs compare by value: pad each to 20 characters.
        std::string k;
        for (std::size_t i = 0; i < s.size();) {
            if (std::isdigit(static_cast<unsigned char>(s[i])) != 0) {
                std::size_t j = i;
                while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])) != 0) {
                    ++j;
                }
                k += std::string(20 - std::min<std::size_t>(20, j - i), '0') + s.substr(i, j - i);
                i = j;
            } else {
                k += s[i++];
            }
        }
        return k;
    };
    std::sort(files.begin(), files.end(), [&](const auto& x, const auto& y) { return key(x) < key(y); });
    return files;
}

// The exit code's answer: the same weights (values, dtypes, shapes), or with --strict nothing
// different at all, not even the saved device, a view's strides or a container's class.
bool same(const diff::Result& r, bool strict)
{
    return strict ? r.equal() : r.sameWeights();
}

// `ckptscope diff DIR`: every rank's file against the first (rank 0), a summary line each, for
// "did every DDP rank save the same model". Exit 0 when all hold the first's weights (--strict: equal it).
int diffRanks(const std::string& dir, const diff::Options& opts, bool strict, bool json, std::ostream& out,
              std::ostream& err)
{
    const auto files = checkpointsIn(dir);
    if (files.size() < 2) {
        err << "ckptscope diff: " << displayText(dir) << " holds fewer than two checkpoints to compare\n";
        return kExitBadInput;
    }
    auto first = openCheckpoint(files.front());
    if (!first) {
        printError(err, first.error(), files.front());
        return kExitBadInput;
    }
    int rc = kExitOk;
    bool allEqual = true;
    bool allSameWeights = true;
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (std::size_t i = 1; i < files.size(); ++i) {
        auto other = openCheckpoint(files[i]);
        if (!other) {
            printError(err, other.error(), files[i]);
            return kExitBadInput;
        }
        ProgressLine progress(err, json, "diff " + displayText(std::filesystem::path(files[i]).filename().string()));
        auto r = diff::compare(**first, **other, opts, {}, progress.forBytes());
        progress.finish();
        if (!r) {
            printError(err, r.error());
            return kExitBadInput;
        }
        if (r->counts.unreadable > 0) {
            err << "ckptscope diff: " << displayText(files[i]) << ": " << r->counts.unreadable
                << " tensor(s) could not be read\n";
            rc = kExitBadInput;
        } else if (!same(*r, strict) && rc == kExitOk) {
            rc = kExitProblems;
        }
        allEqual = allEqual && r->equal();
        allSameWeights = allSameWeights && r->sameWeights();
        if (json) {
            ranks.push_back({{"file", files[i]},
                             {"equal", r->equal()},
                             {"same_weights", r->sameWeights()},
                             {"counts",
                              {{"only_a", r->counts.onlyA},
                               {"only_b", r->counts.onlyB},
                               {"renamed", r->counts.renamed},
                               {"changed", r->counts.changed},
                               {"equal", r->counts.equal},
                               {"stored_differently", r->counts.storedDifferently}}}});
        } else {
            out << diff::renderSummary(*r);
        }
    }
    if (json) {
        out << dumpJson(nlohmann::ordered_json{{"schema", kJsonSchema},
                                               {"reference", files.front()},
                                               {"all_equal", allEqual},
                                               {"all_same_weights", allSameWeights},
                                               {"files", std::move(ranks)}},
                        1)
            << '\n';
    }
    return rc;
}

}  // namespace

int cmdDiff(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)
{
    CLI::App app{"Are these the same weights? Compare two checkpoints: keys only in one, tensors moved to another "
                 "key, dtype, shape and value differences (compared as float64 across dtypes), non-tensor values that "
                 "differ, and how the same weights are stored (saved device, strides, a container's class).",
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
    bool strict = false;
    unsigned threads = 0;
    app.add_option("A", fileA, "first: " + inputKindsHelp() + "; or a directory of per-rank files to compare")
        ->required();
    app.add_option("B", fileB, "second checkpoint (none when A is a directory)");
    app.add_option("--select", select,
                   "compare subtrees: A_PATH:B_PATH (e.g. `state_dict:` for A's state_dict against B's root); a "
                   "path without ':' selects it on both sides")
        ->type_name("A_PATH:B_PATH");
    const CLI::Validator nonNegative(
        [](const std::string& text) {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            return end != text.c_str() && *end == '\0' && v >= 0 ? std::string() : "must be a number >= 0";
        },
        "");
    app.add_option("--rtol", rtol,
                   "relative tolerance of allclose, a number >= 0 (default 1e-5): tensors whose values "
                   "differ are counted as within it or not, in every report")
        ->type_name("X")
        ->check(nonNegative);
    app.add_option("--atol", atol, "absolute tolerance of allclose, a number >= 0 (default 1e-8)")
        ->type_name("X")
        ->check(nonNegative);
    app.add_flag("--strict", strict,
                 "exit 1 on any difference, also in how the same weights are stored (saved device, strides, a "
                 "container's class)");
    auto* jsonOpt = app.add_flag("--json", json, jsonFlagHelp());
    app.add_flag("--summary", summary, "one line for the file pair")->excludes(jsonOpt);
    app.add_flag("--no-align", noAlign, "match keys as written, without taking wrapper prefixes off");
    app.add_flag("--list-equal", listEqual, "name every equal key in the text report, not only count them");
    app.add_option("--threads", threads, "threads comparing tensors (default: one per core)")
        ->type_name("N")
        ->check(CLI::Range(1U, 256U));
    RemoteSession remote;
    remote.addOptions(app);
    app.footer(
        "Examples:\n"
        "  ckptscope diff epoch10.pt epoch20.pt\n"
        "  ckptscope diff model.safetensors https://example.org/model.safetensors   (either side may be a URL)\n"
        "  ckptscope diff ddp.pt model.safetensors --select state_dict:   (a DDP save and its export: exit 0)\n"
        "  ckptscope diff ddp.pt model.safetensors --select state_dict: --strict   (exit 1: saved on cuda:0 and cpu)\n"
        "  ckptscope diff fp32.pt bf16.pt --rtol 1e-2 --atol 1e-3 --summary\n"
        "  ckptscope diff checkpoints/epoch_3/   (every rank_*.pt against the first)\n"
        "  ckptscope diff llama-shards/ consolidated.safetensors   (a sharded set is one checkpoint)\n"
        "Wrapper prefixes (module., _orig_mod., _fsdp_wrapped_module.) are aligned unless --no-align; a\n"
        "tensor found under another key with the same bytes is reported as renamed. allclose counts NaN\n"
        "against NaN as equal.\n"
        "Exit codes: 0 the same weights (the same keys, and every tensor with the same dtype, shape and\n"
        "values; the saved device, strides and a container's class may differ: --strict makes them count),\n"
        "1 they differ, 2 a file or one of its tensors could not be read, or bad usage.");
    if (const auto done = parseCommand(app, args, "diff", out, err)) {
        return *done;
    }
    remote.showProgress(err, json);
    diff::Options opts = selectPaths(select);
    opts.rtol = rtol;
    opts.atol = atol;
    opts.alignPrefixes = !noAlign;
    opts.threads = threads;

    std::error_code ec;
    if (fileB.empty()) {
        if (!RemoteSession::isRemote(fileA) && sharded::setInput(fileA)) {
            err << "ckptscope diff: " << displayText(fileA)
                << " is one sharded checkpoint; give a second checkpoint to compare it with\n";
            return kExitBadInput;
        }
        if (!std::filesystem::is_directory(fileA, ec)) {
            err << "ckptscope diff: give two checkpoints, or one directory of per-rank files (see ckptscope diff "
                   "--help)\n";
            return kExitBadInput;
        }
        return diffRanks(fileA, opts, strict, json, out, err);
    }
    auto openSide = [&](const std::string& path) -> Expected<diff::Side> {
        if (!RemoteSession::isRemote(path)) {
            ProgressLine progress(err, json, "diff");
            return diff::openSide(path, {{}, progress.forOpening()});
        }
        auto c = remote.open(path);
        if (!c) {
            return c.error();
        }
        return diff::Side::of(std::move(*c));
    };
    auto a = openSide(fileA);
    if (!a) {
        printError(err, a.error(), fileA);
        return kExitBadInput;
    }
    auto b = openSide(fileB);
    if (!b) {
        printError(err, b.error(), fileB);
        return kExitBadInput;
    }
    ProgressLine progress(err, json, "diff");
    auto r = diff::compare(*a, *b, opts, {}, progress.forBytes());
    progress.finish();
    if (!r) {
        printError(err, r.error());
        return kExitBadInput;
    }
    if (json) {
        out << remote.withJson(diff::renderJson(*r, *a, *b));
    } else if (summary) {
        out << diff::renderSummary(*r);
    } else {
        out << diff::renderText(*r, *a, *b, {.listEqual = listEqual});
    }
    // Bytes that cannot be read make the answer unknown, not "different": a bad input, whose one
    // line on stderr is this (a remote input's transfer line is left out, as on any failure).
    if (r->counts.unreadable > 0) {
        err << "ckptscope diff: " << r->counts.unreadable
            << " tensor(s) could not be read, so the files cannot be called equal or different\n";
        return kExitBadInput;
    }
    if (!json) {
        remote.report(err);
    }
    return same(*r, strict) ? kExitOk : kExitProblems;
}

}  // namespace ckpt::cli
