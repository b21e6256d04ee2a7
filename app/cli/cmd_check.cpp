#include "cli/cmd_check.h"

#include "checkpoint/checkpoint.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/json_out.h"
#include "cli/parse.h"
#include "cli/remote_cli.h"
#include "cli/set_text.h"
#include "cli/sharded_cli.h"
#include "diagnose/diagnose.h"
#include "diagnose/report.h"

#include <ostream>
#include <sstream>

namespace ckpt::cli {

int cmdCheck(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)
{
    CLI::App app{"Say what will go wrong when a checkpoint is loaded (wrapper prefixes, pinned devices, "
                 "globals weights_only refuses, code that would run, wasted bytes), each with the convert "
                 "command that fixes it.",
                 "ckptscope check"};
    std::vector<std::string> inputs;
    bool json = false;
    bool fileOnly = false;
    diagnose::CheckOptions opts;
    std::string against;
    std::string select;
    app.add_option("FILE", inputs, "one or more of: " + inputKindsHelp() + "; globs allowed, each checked in turn")
        ->required();
    app.add_flag("--json", json, jsonFlagHelp());
    app.add_flag("--file-only", fileOnly,
                 "a shard, index or rank file: read this file alone, not the multi-file checkpoint it belongs to");
    app.add_flag("--values", opts.values, "read tensor data too: count NaN/Inf in every floating-point tensor");
    auto* againstOpt = app.add_option("--against", against,
                                      "the model's side: a checkpoint, a JSON from `ckptscope inspect --json`, or "
                                      "a text file of `key shape` lines; reports what load_state_dict(strict=True) "
                                      "would")
                           ->type_name("REF");
    app.add_option("--select", select,
                   "key path of the state dict to compare (default: the root if it is one, else state_dict, model, "
                   "model_state_dict or net)")
        ->type_name("PATH")
        ->needs(againstOpt);
    RemoteSession remote;
    remote.addOptions(app);
    app.footer("Examples:\n"
               "  ckptscope check model.pt\n"
               "  ckptscope check hf://ORG/REPO/pytorch_model.bin   (fetches only the pickle)\n"
               "  ckptscope check --json --values model.pt\n"
               "  ckptscope check last.ckpt --against model_keys.txt --select state_dict\n"
               "Exit codes: 0 nothing to warn about, 1 warnings or errors found, 2 a file could not be read.");
    if (const auto done = parseCommand(app, args, "check", out, err)) {
        return *done;
    }
    if (inputs.size() != 1) {  // cli::run hands this command several inputs one at a time
        err << "ckptscope check: one FILE at a time here (see ckptscope check --help)\n";
        return kExitBadInput;
    }
    const std::string& file = inputs.front();
    remote.showProgress(err, json);
    if (!against.empty()) {
        opts.againstPath = against;
        if (RemoteSession::isRemote(against)) {
            auto ref = remote.open(against);
            if (!ref) {
                printError(err, ref.error(), against);
                return kExitBadInput;
            }
            opts.againstCheckpoint = *ref;
        }
    }
    if (!select.empty()) {
        opts.againstSelect = select;
    }
    const bool isRemote = RemoteSession::isRemote(file);
    if (!fileOnly && !isRemote) {
        if (const auto rc = checkSet(file, json, opts, out, err)) {
            return *rc;  // a folder, index or shard of a multi-file checkpoint (core/sharded)
        }
    }

    Expected<CheckpointPtr> ck = CheckpointPtr();
    if (isRemote) {
        auto in = remote.openInput(file);
        if (in && in->set) {  // a sharded set over HTTP: its own findings and its view's, as a local set's
            std::ostringstream report;
            const auto view = in->checkpoint || !in->partial ? in->checkpoint : Expected<CheckpointPtr>(in->partial);
            const int rc = checkSetView(file, in->set->findings, view, opts, in->set->dir, json, report, err);
            out << (json ? remote.withJson(report.str()) : report.str());
            if (!json && rc != kExitBadInput) {
                remote.report(err);
            }
            return rc;
        }
        ck = in ? in->checkpoint : Expected<CheckpointPtr>(in.error());
    } else {
        ck = openCheckpoint(file);
    }
    if (!ck) {
        printError(err, ck.error());
        return kExitBadInput;
    }
    auto findings =
        withValueProgress(opts, json, err, [&](const diagnose::CheckOptions& o) { return diagnose::check(**ck, o); });
    if (!findings) {
        printError(err, findings.error(), file);
        return exitCodeFor(findings.error().code);
    }
    if (json) {
        out << remote.withJson(diagnose::renderJson(*findings, file));
    } else {
        out << diagnose::renderText(*findings, file);
        remote.report(err);
    }
    return diagnose::findingsExitCode(*findings);
}

}  // namespace ckpt::cli
