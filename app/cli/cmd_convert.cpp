#include "cli/cmd_convert.h"

#include "checkpoint/checkpoint.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/json_out.h"
#include "cli/parse.h"
#include "cli/plan_text.h"
#include "cli/progress.h"
#include "cli/remote_cli.h"
#include "cli/sharded_cli.h"
#include "remote/s3_output.h"
#include "sharded/dcp_write.h"
#include "sharded/listing.h"
#include "sharded/split.h"
#include "transform/transform.h"
#include "util/json_text.h"
#include "util/printable.h"
#include "util/signals.h"
#include "write/model_config_file.h"
#include "write/targets.h"
#include "write/write.h"

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <unordered_set>

namespace ckpt::cli {
namespace {

using transform::Options;
using transform::StepKind;

struct Args {
    std::string input;
    std::string output;
    bool singleCard = false;
    bool multiCard = false;
    std::string mapLocation;
    std::vector<std::string> stripPrefixes;
    std::string addPrefix;
    bool addPrefixGiven = false;
    std::string select;
    bool selectGiven = false;
    std::vector<std::string> drop;
    bool weightsOnly = false;
    bool dropExtraState = false;
    bool compact = false;
    bool unwrap = false;
    std::string format;
    bool dryRun = false;
    bool verbose = false;
    bool json = false;
    bool sync = false;
    bool allowExpand = false;
    bool salvage = false;
    std::vector<std::string> fixes;
    std::string shardSize;  // non-empty: -o names the folder of a Hugging Face sharded set
    std::string zeroWeights = "fp32";
    bool keepOptimizer = false;
    bool fileOnly = false;
    std::string dequantize;  // bf16, float16, float32: block-quantized FP8 weights as that dtype
    bool force = false;      // an s3:// output replaces an object already at its key
};

// The preset first, then every finding's fix, then the flags given explicitly (which win).
Expected<Options> optionsFrom(const Args& a)
{
    Options o;
    if (a.singleCard) {
        o = transform::singleCardPreset();
    } else if (a.multiCard) {
        o = transform::multiCardPreset();
    }
    for (const auto& fix : a.fixes) {
        auto f = Options::fromJson(fix);
        if (!f) {
            return f.error();
        }
        o.merge(*f);
    }
    Options explicitOpts;
    explicitOpts.stripPrefixes = a.stripPrefixes;
    if (a.addPrefixGiven) {
        explicitOpts.addPrefix = a.addPrefix;
    }
    if (a.selectGiven) {
        explicitOpts.select = a.select;
    }
    explicitOpts.drop = a.drop;
    explicitOpts.unwrapModules = a.unwrap;
    explicitOpts.weightsOnly = a.weightsOnly;
    explicitOpts.compact = a.compact;
    explicitOpts.dropExtraState = a.dropExtraState;
    o.merge(explicitOpts);
    if (!a.mapLocation.empty()) {
        auto m = transform::LocationMap::parse(a.mapLocation);
        if (!m) {
            return m.error();
        }
        o.mapLocation = std::move(*m);  // an explicit spec replaces the preset's `cpu`
    }
    if (!a.dequantize.empty()) {
        auto t = transform::parseDequantizeDtype(a.dequantize);
        if (!t) {
            return t.error();
        }
        o.dequantize = *t;
    }
    if (a.format == "dcp" && a.mapLocation.empty()) {
        // FileSystemWriter asserts that every item it writes is on the CPU (_write_item).
        o.mapLocation = *transform::LocationMap::parse("cpu");
    }
    if (a.format == "safetensors" || (a.format.empty() && a.output.ends_with(".safetensors"))) {
        o.format = transform::OutputFormat::Safetensors;
    } else if (a.format == "torch") {
        o.format = transform::OutputFormat::Torch;
    }
    return o;
}

// `-o DIR` writes DIR/<input's name>, as with several inputs (and as `cp` does).
std::string outputPath(const Args& a)
{
    std::error_code ec;
    if (a.output.empty() || !a.shardSize.empty() || a.format == "dcp" || !std::filesystem::is_directory(a.output, ec)) {
        return a.output;
    }
    std::filesystem::path target = std::filesystem::path(a.output) / std::filesystem::path(a.input).filename();
    if (a.format == "safetensors") {
        target.replace_extension(".safetensors");
    }
    return target.string();
}

// The tensors of a salvaged archive whose bytes were cut off (Checkpoint::truncation), added to
// the drops unless a drop the user asked for already covers them.
std::vector<std::string> dropLostTensors(const Checkpoint& in, Options& opts)
{
    std::vector<std::string> lost;
    auto covered = [&](const std::string& path) {
        return std::any_of(opts.drop.begin(), opts.drop.end(), [&](const std::string& d) {
            return path == d || (path.size() > d.size() && path.compare(0, d.size(), d) == 0 && path[d.size()] == '/');
        });
    };
    for (const auto& t : in.tensors) {
        if (t.storage.valid() && !in.storages[t.storage].present && !covered(t.path)) {
            lost.push_back(t.path);
        }
    }
    opts.drop.insert(opts.drop.end(), lost.begin(), lost.end());
    return lost;
}

// Says why each lost tensor is dropped, in the plan the user reads before anything is written.
void explainLostDrops(transform::Plan& plan, const std::vector<std::string>& lost)
{
    const std::unordered_set<std::string> set(lost.begin(), lost.end());
    for (auto& step : plan.steps) {
        if (step.kind == StepKind::Drop && set.contains(step.path)) {
            step.detail = "its bytes were cut off with the end of the file (--salvage)";
        }
    }
}

// A failed write: one line on stderr, the error in the JSON document too, and its exit code.
int writeFailed(const Error& e, const Args& a, nlohmann::ordered_json& doc, std::ostream& out, std::ostream& err)
{
    printError(err, e, a.input);
    if (a.json) {
        doc["error"] = errorJson(e);
        out << dumpJson(doc, 1) << '\n';
    }
    return exitCodeFor(e.code);
}

int writeSet(const Checkpoint& in, const transform::Plan& plan, const Args& a, sharded::SplitOptions options,
             nlohmann::ordered_json& doc, std::ostream& out, std::ostream& err)
{
    ProgressLine progress(err, a.json, "convert");
    options.progress = progress.forWrite();
    auto written = sharded::writeShardedSet(in, plan, a.output, options);
    progress.finish();
    if (!written) {
        return writeFailed(written.error(), a, doc, out, err);
    }
    // The model's config.json beside the weights, so from_pretrained loads the folder.
    auto config = write::writeModelConfig(in, plan, written->dir, options.write.durability);
    if (!config) {
        return writeFailed(config.error(), a, doc, out, err);
    }
    auto tied = nlohmann::ordered_json::object();
    for (const auto& [removed, kept] : written->tied) {
        tied[removed] = kept;
    }
    if (a.json) {
        doc["output"] = {{"path", written->dir},        {"shards", written->files},         {"index", written->index},
                         {"tensors", written->tensors}, {"total_size", written->totalSize}, {"tied", tied},
                         {"notes", written->notes}};
        doc["output"]["config"] = nullptr;
        if (*config) {
            doc["output"]["config"] = {
                {"path", (*config)->path}, {"written", (*config)->written}, {"note", (*config)->note}};
        }
        out << dumpJson(doc, 1) << '\n';
        return kExitOk;
    }
    for (const auto& n : written->notes) {
        out << "note: " << displayText(n) << '\n';
    }
    if (*config) {
        out << "note: " << displayText((*config)->note) << '\n';
    }
    for (const auto& [removed, kept] : written->tied) {
        out << "note: '" << displayText(removed) << "' is tied to '" << displayText(kept) << "': stored once as '"
            << displayText(kept) << "' (safetensors cannot alias); the index metadata records it, and ckptscope "
            << "and transformers' tie_weights restore it\n";
    }
    out << "wrote " << displayText(written->dir) << ": " << written->files.size() << " shard"
        << (written->files.size() == 1 ? "" : "s") << (written->index.empty() ? "" : " and " + written->index) << ", "
        << written->tensors << " tensors, " << humanBytes(written->totalSize) << "; " << droppedText(plan) << "\n";
    return kExitOk;
}

// `-o s3://BUCKET/KEY`: the file's bytes as a multipart upload (remote/s3_output.h). A termination
// signal stops the write and aborts the upload before the process ends as the signal would end it.
int writeS3(const Checkpoint& in, const transform::Plan& plan, const Args& a, const write::WriteOptions& options,
            const remote::S3OutputOptions& s3, const RemoteSession& remote, nlohmann::ordered_json& doc,
            std::ostream& out, std::ostream& err)
{
    StopOnTerminationSignal signals;
    ProgressLine progress(err, a.json, "convert");
    auto written = remote::writeS3Object(in, plan, a.output, progress.forWrite(), signals.token(), options, s3);
    progress.finish();
    if (!written) {
        const int rc = writeFailed(written.error(), a, doc, out, err);
        signals.raiseAgain();  // a signal stopped it: the process ends as the signal would have ended it
        return rc;
    }
    const auto& r = written->result;
    if (a.json) {
        doc["output"] = {{"path", r.path},
                         {"bytes", r.bytes},
                         {"notes", r.notes},
                         {"parts", written->parts},
                         {"part_size", written->partSize}};
        if (remote.used()) {
            doc["remote"] = {{"bytes_read", remote.bytesRead()}, {"requests", remote.requests()}};
        }
        out << dumpJson(doc, 1) << '\n';
        return kExitOk;
    }
    for (const auto& n : r.notes) {
        out << "note: " << displayText(n) << '\n';
    }
    out << "wrote " << displayText(r.path) << " (" << humanBytes(r.bytes) << ", " << plan.tensorCount
        << " tensors, uploaded in " << written->parts << (written->parts == 1 ? " part" : " parts") << " of "
        << humanBytes(written->partSize) << "); " << droppedText(plan) << "\n";
    remote.report(err);
    return kExitOk;
}

int writeDcp(const Checkpoint& in, const transform::Plan& plan, const Args& a, const write::WriteOptions& options,
             nlohmann::ordered_json& doc, std::ostream& out, std::ostream& err)
{
    ProgressLine progress(err, a.json, "convert");
    auto written = sharded::writeDcpFolder(in, plan, a.output, options, progress.forWrite());
    progress.finish();
    if (!written) {
        return writeFailed(written.error(), a, doc, out, err);
    }
    if (a.json) {
        doc["output"] = {{"path", written->dir},
                         {"files", written->files},
                         {"tensors", written->tensors},
                         {"values", written->values},
                         {"bytes", written->bytes}};
        out << dumpJson(doc, 1) << '\n';
        return kExitOk;
    }
    out << "wrote " << displayText(written->dir) << ": a single-rank DCP folder (.metadata and __0_0.distcp), "
        << written->tensors << " tensors and " << written->values << " other values, " << humanBytes(written->bytes)
        << "; " << droppedText(plan) << "\n";
    return kExitOk;
}

}  // namespace

int cmdConvert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)
{
    CLI::App app{"Write a fixed copy of a checkpoint: prefixes stripped or added, storages mapped to other devices, "
                 "whole models unwrapped into state dicts, values weights_only=True refuses made plain. The input "
                 "is never modified and nothing of it is executed.",
                 "ckptscope convert"};
    Args a;
    std::vector<std::string> inputs;
    app.add_option("FILE", inputs,
                   "what to read, one or more of: " + inputKindsHelp() + "; globs allowed (several: -o names a folder)")
        ->required();
    app.add_option("-o,--output", a.output,
                   "file to write (a temporary file beside it is renamed into place), the folder to write into, or "
                   "an s3://BUCKET/KEY object (a multipart upload: nothing is at the key until it completes)")
        ->type_name("OUT");
    auto* single = app.add_flag("--single-card", a.singleCard,
                                "strip module./module.module./_orig_mod., unwrap, weights-only, map all to cpu");
    auto* multi = app.add_flag("--multi-card", a.multiCard,
                               "as --single-card, but every state-dict key carries exactly one module.");
    single->excludes(multi);
    app.add_option("--map-location", a.mapLocation, "cpu, cuda:1, or pairs cuda:0=cuda:1,cuda:2=cpu")
        ->type_name("SPEC");
    app.add_option("--strip-prefix", a.stripPrefixes,
                   "remove this prefix from the start of state-dict keys (repeatable)")
        ->type_name("PREFIX")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app.add_option("--add-prefix", a.addPrefix, "add this prefix to every state-dict key")->type_name("PREFIX");
    app.add_option("--select", a.select, "key path of the value to write as the new root (e.g. model)")
        ->type_name("PATH");
    app.add_option("--drop", a.drop, "key path of a value to leave out (repeatable)")
        ->type_name("PATH")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app.add_flag("--weights-only", a.weightsOnly, "make torch.load(weights_only=True) accept the output");
    app.add_flag("--drop-extra-state", a.dropExtraState,
                 "leave out every _extra_state value (TransformerEngine's FP8 state; kept otherwise)");
    app.add_flag("--compact", a.compact, "rewrite storages to hold only the bytes their tensors reach");
    app.add_flag("--unwrap", a.unwrap, "turn whole-model pickles into the state dict model.state_dict() gives");
    app.add_option("--format", a.format,
                   "torch (default), safetensors, or dcp: a single-rank torch.distributed.checkpoint folder at -o")
        ->type_name("FORMAT")
        ->check(CLI::IsMember({"torch", "safetensors", "dcp"}));
    app.add_option("--dequantize", a.dequantize,
                   "block-quantized FP8 weights (float8 weight beside weight_scale_inv) written as bf16, float16 or "
                   "float32, computed on the CPU a piece at a time; their scales left out")
        ->type_name("DTYPE")
        // The other names parseDequantizeDtype takes (bfloat16, fp16, half, fp32, float) stand for these.
        ->check(CLI::IsMember({"bf16", "float16", "float32"}, [](std::string name) -> std::string {
            const auto t = transform::parseDequantizeDtype(name);
            if (!t) {
                return name;
            }
            return *t == DType::BFloat16 ? "bf16" : *t == DType::Float16 ? "float16" : "float32";
        }));
    app.add_flag("--dry-run", a.dryRun, "print the plan and write nothing");
    app.add_flag("-v,--verbose", a.verbose,
                 "list every step of the plan (otherwise a rule that touches many keys is one line with a count "
                 "and two examples)");
    app.add_flag("--json", a.json, "print the plan (and the result) as JSON on stdout");
    app.add_flag("--allow-expand", a.allowExpand,
                 "write views that repeat elements (stride 0) in full even when the output grows past 4x the "
                 "input's storage bytes (safetensors cannot share storage)");
    app.add_flag("--sync", a.sync,
                 "return only once the output is on disk (fsync); by default, as cp and torch.save, the kernel "
                 "flushes it later");
    app.add_option("--shard-size", a.shardSize,
                   "write a Hugging Face sharded set into the folder -o names, shards of at most this size "
                   "(5GB, 500MB, 2GiB, bytes; KB/MB/GB are powers of 1000 as in transformers), with the input's "
                   "config.json (dequantized: without its quantization_config)")
        ->type_name("SIZE");
    app.add_flag("--salvage", a.salvage,
                 "write what survived of a truncated zip: every tensor whose bytes were cut off is dropped");
    app.add_option("--zero-weights", a.zeroWeights,
                   "a DeepSpeed ZeRO folder: fp32 (the optimizer's master weights, as zero_to_fp32.py) or module "
                   "(the 16-bit weights stages 1/2 keep in the model states)")
        ->type_name("WEIGHTS")
        ->check(CLI::IsMember({"fp32", "module"}));
    auto* keep = app.add_flag(
        "--keep-optimizer", a.keepOptimizer,
        "a DeepSpeed ZeRO folder: write {model, optimizer: {state: {name: {step, exp_avg, ...}}, param_groups}}, "
        "the optimizer state consolidated per parameter like the fp32 weights");
    keep->excludes(single);
    app.add_flag("--force", a.force,
                 "-o s3://BUCKET/KEY: replace an object already at the key (without it, one there is left as it "
                 "is and nothing is written)");
    app.add_flag("--file-only", a.fileOnly,
                 "a shard, index or rank file: read this file alone, not the multi-file checkpoint it belongs to");
    app.add_option("--fix", a.fixes, "a finding's fix as JSON (from `ckptscope check --json`); repeatable")
        ->type_name("JSON")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app.footer("Examples:\n"
               "  ckptscope convert ddp.pt -o model.pt --single-card\n"
               "  ckptscope convert model.pt -o ddp.pt --multi-card\n"
               "  ckptscope convert train.ckpt -o model.safetensors --select model --strip-prefix module.\n"
               "  ckptscope convert ckpt.pt -o fixed.pt --map-location cuda:1=cuda:0 --drop optimizer --dry-run\n"
               "  ckptscope convert model.pt -o llama-hf/ --shard-size 5GB --format safetensors\n"
               "  ckptscope convert train.pt -o train-dcp/ --format dcp   (loads with torch.distributed.checkpoint)\n"
               "  ckptscope convert pytorch_model.bin.index.json -o model.safetensors --strip-prefix model.\n"
               "  ckptscope convert ds_run/ -o model.pt   (DeepSpeed ZeRO 1/2/3 -> fp32, as zero_to_fp32.py)\n"
               "Exit codes: 0 written (or planned), 1 the write failed, 2 bad input or usage.");
    RemoteSession remote;
    remote.addOptions(app);
    if (const auto done = parseCommand(app, args, "convert", out, err)) {
        return *done;
    }
    if (inputs.size() != 1) {  // cli::run hands this command several inputs one at a time
        err << "ckptscope convert: one FILE at a time here (see ckptscope convert --help)\n";
        return kExitBadInput;
    }
    a.input = inputs.front();
    remote.showProgress(err, a.json);
    const bool isRemote = RemoteSession::isRemote(a.input);
    a.addPrefixGiven = app.count("--add-prefix") > 0;
    a.selectGiven = app.count("--select") > 0;
    if (a.output.empty() && !a.dryRun) {
        err << "ckptscope convert: -o OUT is required (or --dry-run to only print the plan)\n";
        return kExitBadInput;
    }
    std::optional<std::uint64_t> shardBytes;
    // Given at all, even empty: `--shard-size ''` asked for a folder and must not write one file.
    if (app.count("--shard-size") > 0) {
        auto parsed = sharded::parseShardSize(a.shardSize);
        if (!parsed) {
            err << "ckptscope convert: " << parsed.error().message << '\n';
            return kExitBadInput;
        }
        shardBytes = *parsed;
    }
    a.output = outputPath(a);
    const bool toS3 = remote::isS3Output(a.output);
    if (!toS3 && !a.output.empty() && RemoteSession::isRemote(a.output)) {
        err << "ckptscope convert: " << displayText(a.output)
            << ": convert writes files and s3:// objects, not other URLs; nothing written\n";
        return kExitBadInput;
    }
    if (toS3 && (shardBytes || a.format == "dcp")) {
        err << "ckptscope convert: " << displayText(a.output) << ": "
            << (shardBytes ? "a sharded set (--shard-size)" : "a DCP folder (--format dcp)")
            << " is written to a local folder only; write it there, then copy it (aws s3 cp --recursive)\n";
        return kExitBadInput;
    }
    if (a.force && !toS3) {
        err << "ckptscope convert: --force is for an s3:// output (a local file is replaced as cp replaces it)\n";
        return kExitBadInput;
    }
    // A file of the set being read (a shard, the index, `latest`, a rank file, a .distcp) is never
    // an output, however the set was named (folder, index, shard) and whatever the edits: the
    // input-is-output check below sees only what was named. A folder output (a split, a
    // DCP folder) is checked by the writer: it takes no folder already holding a set's files.
    if (!isRemote && !toS3 && !a.fileOnly && !a.output.empty() && !a.dryRun && !shardBytes && a.format != "dcp") {
        if (auto ok = sharded::checkOutputOutsideSet(sharded::detectSet(a.input), a.output); !ok) {
            printError(err, ok.error());
            return kExitBadInput;
        }
    }
    // An explicit --format that the output's name contradicts (`-o llama.pt --format safetensors`)
    // writes a file that its readers refuse and that `check` calls fine: refused, nothing written.
    if (!a.output.empty() && !a.dryRun && !shardBytes && (a.format == "safetensors" || a.format == "torch")) {
        if (const auto clash = write::extensionMismatch(a.output, a.format == "safetensors")) {
            err << "ckptscope convert: " << displayText(clash->message) << "; nothing written: name it "
                << displayText(clash->agreeing) << ", or give --format "
                << (a.format == "safetensors" ? "torch" : "safetensors") << "\n";
            return kExitBadInput;
        }
    }
    // A folder, index or shard of a multi-file checkpoint is consolidated by core/sharded as it
    // stands straight into the output; otherwise the edits below read it opened as one checkpoint,
    // in place.
    const bool plainSet = a.stripPrefixes.empty() && !a.addPrefixGiven && !a.selectGiven && a.drop.empty() &&
                          !a.unwrap && a.mapLocation.empty() && !a.multiCard && a.fixes.empty() && !a.dryRun &&
                          !a.weightsOnly && !a.compact && !a.json && !shardBytes && a.format != "dcp" &&
                          !a.dropExtraState && a.dequantize.empty() && !toS3;
    SetSource setSource;
    const sharded::zero::Options zero{a.zeroWeights == "module" ? sharded::zero::Weights::Module
                                                                : sharded::zero::Weights::Fp32Master,
                                      a.keepOptimizer};
    // `-o model.safetensors` asks for safetensors as --format does (makeOptions reads it the same).
    const std::string format =
        a.format.empty() && a.output.ends_with(".safetensors") ? std::string("safetensors") : a.format;
    const auto set = isRemote || a.fileOnly ? std::nullopt : sharded::setInput(a.input);
    if (!a.json) {
        noteSetOfFile(a.input, set, out);
    }
    if (isRemote && (zero.weights == sharded::zero::Weights::Module || zero.keepOptimizer)) {
        // A ZeRO folder over the network converts to its fp32 weights only: refused before anything
        // is requested rather than written without what the options ask for.
        err << "ckptscope convert: " << displayText(a.input)
            << ": --zero-weights module and --keep-optimizer read a local DeepSpeed ZeRO folder; over the network "
               "a ZeRO folder converts to its fp32 weights (download the folder for these)\n";
        return kExitBadInput;
    }
    if (!isRemote) {
        if (const auto rc =
                convertSet(a.input, set, a.output, format, plainSet, a.json, setSource, out, err, zero, a.fileOnly)) {
            return *rc;
        }
    }
    const std::string& source = a.input;
    // Refused before the input is even read: an output that is the input, or not a regular file
    // (a sharded set's folder is checked by the split itself, its files above).
    if (!a.output.empty() && !a.dryRun && !shardBytes && a.format != "dcp" && !toS3) {
        if (auto ok = write::checkConversions({{source, a.output}}); !ok) {
            printError(err, ok.error());
            return kExitBadInput;
        }
    }
    remote::S3OutputOptions s3;
    s3.noSignRequest = remote.noSignRequest();
    s3.replace = a.force;
    s3.stats = remote.stats();
    // Before the input is read: a key already taken (without --force) or a name that is no key.
    if (toS3 && !a.dryRun) {
        if (auto ok = remote::checkS3Output(a.output, s3); !ok) {
            printError(err, ok.error());
            return exitCodeFor(ok.error().code);
        }
    }
    auto opts = optionsFrom(a);
    if (!opts) {
        err << "ckptscope convert: " << opts.error().message << '\n';
        return kExitBadInput;
    }

    auto ck = setSource.view ? Expected<CheckpointPtr>(*setSource.view)
                             : (isRemote ? remote.open(source) : openCheckpoint(source));
    if (!ck) {
        printError(err, ck.error());
        return exitCodeFor(ck.error().code);
    }
    const Checkpoint& in = **ck;
    if (in.truncation.salvaged && !a.salvage) {
        err << "ckptscope convert: " << displayText(a.input) << ": the file is truncated (it ends "
            << displayText(in.truncation.endsIn)
            << "); nothing written: download or copy it again, or add --salvage to write what survived\n";
        return kExitBadInput;
    }
    const std::vector<std::string> lost =
        in.truncation.salvaged ? dropLostTensors(in, *opts) : std::vector<std::string>{};
    auto plan = transform::makePlan(in, *opts);
    if (!plan) {
        printError(err, plan.error(), a.input);
        return exitCodeFor(plan.error().code);
    }
    explainLostDrops(*plan, lost);

    nlohmann::ordered_json doc;
    if (a.json) {
        doc = nlohmann::ordered_json::parse(plan->toJson());
        doc["input"] = a.input;
        doc["dry_run"] = a.dryRun;
        if (in.truncation.salvaged) {
            doc["salvage"] = {{"ends", in.truncation.endsIn}, {"lost_tensors", lost}};
        }
    } else {
        const bool st = plan->options.format == transform::OutputFormat::Safetensors;
        const std::string kind =
            a.format == "dcp" ? std::string("single-rank DCP folder")
                              : (shardBytes ? "sharded set of " : "") + std::string(st ? "safetensors" : "torch zip");
        printPlan(**ck, a.input, *plan, a.dryRun ? std::string() : a.output, kind, a.verbose || a.dryRun, out);
        if (in.truncation.salvaged) {
            out << "salvage: the input is truncated; " << lost.size()
                << (lost.size() == 1 ? " tensor was" : " tensors were") << " lost with its end";
            for (const auto& path : lost) {
                out << (&path == lost.data() ? ": " : ", ") << displayText(path);
            }
            out << '\n';
        }
    }
    if (a.dryRun) {
        if (a.json) {
            out << dumpJson(doc, 1) << '\n';
        } else {
            out << "dry run: nothing written; " << droppedText(*plan, true) << "\n";
        }
        return kExitOk;
    }

    const write::WriteOptions writeOptions{a.sync ? write::Durability::Durable : write::Durability::Lazy,
                                           a.allowExpand};
    if (shardBytes) {
        return writeSet(**ck, *plan, a, sharded::SplitOptions{*shardBytes, writeOptions}, doc, out, err);
    }
    if (a.format == "dcp") {
        return writeDcp(**ck, *plan, a, writeOptions, doc, out, err);
    }
    if (toS3) {
        return writeS3(**ck, *plan, a, writeOptions, s3, remote, doc, out, err);
    }
    ProgressLine progress(err, a.json, "convert");
    auto written = write::writeCheckpoint(**ck, *plan, a.output, progress.forWrite(), {}, writeOptions);
    progress.finish();
    if (!written) {
        return writeFailed(written.error(), a, doc, out, err);
    }
    if (a.json) {
        doc["output"] = {{"path", written->path}, {"bytes", written->bytes}, {"notes", written->notes}};
        if (remote.used()) {
            doc["remote"] = {{"bytes_read", remote.bytesRead()}, {"requests", remote.requests()}};
        }
        out << dumpJson(doc, 1) << '\n';
    } else {
        for (const auto& n : written->notes) {
            out << "note: " << displayText(n) << '\n';
        }
        out << "wrote " << displayText(written->path) << " (" << humanBytes(written->bytes) << ", " << plan->tensorCount
            << " tensors); " << droppedText(*plan) << "\n";
        remote.report(err);
    }
    return kExitOk;
}

}  // namespace ckpt::cli
