#include "cli/sharded_cli.h"

#include "checkpoint/block_quant.h"
#include "checkpoint/checkpoint.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/json_out.h"
#include "cli/plan_text.h"
#include "cli/progress.h"
#include "cli/set_text.h"
#include "diagnose/safety.h"
#include "sharded/consolidate_progress.h"
#include "sharded/formats.h"
#include "sharded/listing.h"
#include "sharded/set_view.h"
#include "sharded/sharded.h"
#include "sharded/zero.h"
#include "transform/transform.h"
#include "util/bytes.h"
#include "util/json_text.h"
#include "util/printable.h"
#include "util/shape_text.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <ostream>
#include <variant>

namespace ckpt::cli {

namespace {

// A piece's line under its row: its box of the global tensor, its bytes, and where they are.
std::string pieceText(const sharded::SetListing& l, const sharded::SetRow& r, const sharded::SetPiece& p)
{
    std::string s = r.pieces.size() == 1 && p.sizes == r.shape
                        ? std::string("whole")
                        : "at " + shapeText(p.offsets) + " size " + shapeText(p.sizes);
    s += "  " + humanBytes(p.bytes) + "  " + displayText(l.files.at(p.file));
    if (p.fileOffset) {
        s += " @ " + std::to_string(*p.fileOffset) + " (" + humanBytes(p.fileLength) + ")";
    }
    return s;
}

// The set's block-quantized FP8 weights (checkpoint/block_quant.h), its rows as the tensors and the
// config.json beside it: what inspect shows of a file's, for a set.
struct SetBlocks {
    std::vector<BlockEntry> entries;
    BlockQuantization q;
};
SetBlocks setBlocks(const sharded::SetListing& l)
{
    SetBlocks b;
    for (const auto& r : l.rows) {
        b.entries.push_back({r.key, r.dtype, r.shape, true, true});
    }
    const auto config = readModelConfig(l.dir);
    b.q = blockQuantization(b.entries, config ? config->quantization : std::nullopt);
    return b;
}

// Boxes listed under one row at most: a tensor split over thousands of ranks says how many more.
constexpr std::size_t kPiecesShown = 64;

void printSetText(const sharded::SetListing& l, const std::string& file, std::ostream& out)
{
    std::size_t tied = 0;
    std::size_t wKey = 3;
    for (const auto& r : l.rows) {
        tied += r.tiedTo.empty() ? 0 : 1;
        wKey = std::max(wKey, displayText(r.key).size());
    }
    for (const auto& v : l.values) {
        wKey = std::max(wKey, displayText(v.key).size());
    }
    out << displayText(file) << ": " << sharded::setKindName(l.kind);
    if (!l.summary.empty()) {
        out << "; " << displayText(l.summary);
    }
    out << ", " << l.files.size() << (l.files.size() == 1 ? " file, " : " files, ") << l.rows.size() << " tensors";
    if (tied > 0) {
        out << " (" << tied << " tied to another)";
    }
    if (!l.values.empty()) {
        out << ", " << l.values.size() << " values";
    }
    out << ", " << humanBytes(l.totalBytes()) << " stored\n\n";
    auto cell = [&](const std::string& s, std::size_t w) {
        out << s << std::string(w + 2 - std::min(w, s.size()), ' ');
    };
    cell("KEY", wKey);
    cell("DTYPE", 9);
    cell("SHAPE", 18);
    cell("DEVICE", 7);
    cell("SIZE", 10);
    out << "STORED IN\n";
    for (const auto& r : l.rows) {
        cell(displayText(r.key), wKey);
        cell(std::string(dtypeName(r.dtype)), 9);
        cell(shapeText(r.shape), 18);
        cell(displayText(r.location), 7);
        cell(humanBytes(r.nbytes), 10);
        out << displayText(r.tiedTo.empty() ? r.storedIn : "tied to " + r.tiedTo)
            << (r.storedAs.empty() ? "" : " (" + r.storedAs + ")") << '\n';
        for (std::size_t i = 0; i < r.pieces.size() && i < kPiecesShown; ++i) {
            out << "    " << pieceText(l, r, r.pieces[i]) << '\n';
        }
        if (r.pieces.size() > kPiecesShown) {
            out << "    ... " << r.pieces.size() - kPiecesShown << " more (inspect --json lists them all)\n";
        }
    }
    for (const auto& v : l.values) {
        cell(displayText(v.key), wKey);
        out << "= " << displayText(v.value) << '\n';
    }
    if (const auto blocks = setBlocks(l); !blocks.q.weights.empty()) {
        out << "\nFP8 block-quantized weights (" << blocks.q.weights.size() << "):\n";
        for (const auto& b : blocks.q.weights) {
            const auto& w = blocks.entries[b.weight.value()];
            out << "  " << displayText(w.key) << "  " << dtypeName(w.dtype) << " " << shapeText(w.shape) << "  "
                << displayText(blockScaleText(blocks.entries[b.scale.value()], b)) << '\n';
        }
    }
    if (!l.findings.empty()) {
        out << "\n" << l.findings.size() << " finding(s) about the set: run `ckptscope check` on it\n";
    }
}

void printSetJson(const sharded::SetListing& l, const std::string& file, std::ostream& out)
{
    using json = nlohmann::ordered_json;
    json set;
    set["kind"] = std::string(sharded::setKindId(l.kind));
    set["what"] = std::string(sharded::setKindName(l.kind));
    set["dir"] = l.dir;
    set["index"] = l.index;
    for (const auto& [name, fact] : l.facts) {
        set[name] = std::visit([](const auto& v) { return json(v); }, fact);
    }
    auto files = json::array();
    for (std::size_t i = 0; i < l.files.size(); ++i) {
        const std::string error = i < l.fileErrors.size() ? l.fileErrors[i] : std::string();
        files.push_back({{"path", l.files[i]}, {"read", error.empty()}, {"error", error}});
    }
    set["files"] = files;
    auto findings = json::array();
    for (const auto& f : l.findings) {
        findings.push_back({{"code", f.code},
                            {"severity", std::string(diagnose::severityName(f.severity))},
                            {"title", f.title},
                            {"detail", f.detail},
                            {"paths", f.paths}});
    }
    set["findings"] = findings;

    json j;
    j["schema"] = kJsonSchema;
    j["file"] = file;
    j["format"] = "set";
    j["set"] = set;
    auto tensors = json::array();
    std::uint64_t tensorBytes = 0;
    std::map<std::string, std::uint64_t> byLocation;
    const auto blocks = setBlocks(l);
    for (std::size_t row = 0; row < l.rows.size(); ++row) {
        const auto& r = l.rows[row];
        json t{{"path", r.key},
               {"dtype", std::string(dtypeName(r.dtype))},
               {"shape", r.shape},
               {"location", r.location},
               {"nbytes", r.nbytes}};
        auto storedIn = json::array();
        for (const auto f : r.storedInFiles) {
            storedIn.push_back(l.files.at(f));
        }
        t["stored_in"] = storedIn;
        if (!r.storedAs.empty()) {
            t["stored_as"] = r.storedAs;
        }
        if (!r.tiedTo.empty()) {
            t["tied_to"] = r.tiedTo;
        } else {
            byLocation[r.location] += r.nbytes;
        }
        if (!r.pieces.empty()) {
            auto pieces = json::array();
            for (const auto& p : r.pieces) {
                json piece{
                    {"file", l.files.at(p.file)}, {"offsets", p.offsets}, {"sizes", p.sizes}, {"bytes", p.bytes}};
                if (p.fileOffset) {
                    piece["file_offset"] = *p.fileOffset;
                    piece["file_length"] = p.fileLength;
                }
                pieces.push_back(std::move(piece));
            }
            t["pieces"] = pieces;
        }
        if (const auto* b = blocks.q.ofWeight(TensorIndex{static_cast<std::uint32_t>(row)})) {
            t["block_scale"] = {{"scale", blocks.entries[b->scale.value()].key},
                                {"block", b->block},
                                {"block_from", b->blockFrom},
                                {"expected_scale_shape", b->expectedScaleShape},
                                {"problem", b->ok() ? json(nullptr) : json(b->problem)}};
        } else if (const auto* s = blocks.q.ofScale(TensorIndex{static_cast<std::uint32_t>(row)})) {
            t["scale_of"] = blocks.entries[s->weight.value()].key;
        }
        tensorBytes += r.nbytes;
        tensors.push_back(std::move(t));
    }
    j["tensors"] = tensors;
    if (!l.values.empty()) {
        auto values = json::array();
        for (const auto& v : l.values) {
            values.push_back({{"path", v.key},
                              {"stored_in", v.file ? json::array({l.files.at(*v.file)}) : json::array()},
                              {"value", v.value}});
        }
        j["values"] = values;
    }
    json locations = json::object();
    for (const auto& [loc, n] : byLocation) {
        locations[loc] = n;
    }
    j["totals"] = {{"tensors", l.rows.size()},
                   {"tensor_bytes", tensorBytes},
                   {"storage_bytes", l.totalBytes()},
                   {"by_location", locations}};
    out << dumpJson(j) << '\n';
}

}  // namespace

int printSet(const sharded::SetListing& l, const std::string& file, bool json, std::ostream& out)
{
    json ? printSetJson(l, file, out) : printSetText(l, file, out);
    return kExitOk;
}

void noteSetOfFile(const std::string& input, const std::optional<sharded::SetLocation>& set, std::ostream& out)
{
    std::error_code ec;
    if (!set || set->alone || !std::filesystem::is_regular_file(input, ec)) {
        return;
    }
    out << "opened as part of the " << sharded::setKindName(set->kind) << " in " << displayText(set->dir)
        << " (--file-only reads " << displayText(std::filesystem::path(input).filename().string()) << " alone)\n\n";
}

namespace {

// A set's error as every subcommand reports it: one line, and the exit code for it.
int failed(const Error& e, const std::string& input, std::ostream& err)
{
    printError(err, e, input);
    return exitCodeFor(e.code);
}

// What a set is named by in a report: its folder, or the one member file read alone.
std::string setName(const sharded::SetLocation& loc, const sharded::SetListing& l)
{
    return loc.alone ? loc.index : l.dir;
}

}  // namespace

std::optional<int> inspectSet(const std::string& input, bool json, std::ostream& out, std::ostream& err)
{
    const auto loc = sharded::setInput(input);
    if (!loc) {
        return std::nullopt;
    }
    if (!json) {
        noteSetOfFile(input, loc, out);
    }
    ProgressLine progress(err, json, "inspect");
    auto listing = sharded::listSet(*loc, {{}, progress.forOpening()});
    progress.finish();
    if (!listing) {
        return failed(listing.error(), input, err);
    }
    return printSet(*listing, setName(*loc, *listing), json, out);
}

std::optional<int> checkSet(const std::string& input, bool json, const diagnose::CheckOptions& opts, std::ostream& out,
                            std::ostream& err)
{
    const auto loc = sharded::setInput(input);
    if (!loc) {
        return std::nullopt;
    }
    if (!json) {
        noteSetOfFile(input, loc, out);
    }
    // A set opens as one checkpoint, which every single-file rule reads too; an incomplete one as
    // far as its files were read, where its format builds that; one that cannot (a rank file
    // alone, a quantized shard) keeps its own findings and says why.
    ProgressLine progress(err, json, "check");
    auto set = sharded::readSet(*loc, {.groupStorages = true}, {{}, progress.forOpening()});
    progress.finish();
    if (!set) {
        return failed(set.error(), input, err);
    }
    const CheckpointPtr checked = set->view ? set->view : set->partial;
    const Expected<CheckpointPtr> view =
        checked ? Expected<CheckpointPtr>(checked) : Expected<CheckpointPtr>(*set->notWhole);
    return checkSetView(input, set->listing.findings, view, opts, setName(*loc, set->listing), json, out, err);
}

namespace {

// A set is consolidated as its writer's own tools write it, objects included (a DCP BYTE_IO value:
// Megatron-LM's _extra_state holds an io.BytesIO). What torch.load(weights_only=True), PyTorch
// 2.6+'s default, would refuse in the written file is said, with the options that make it load:
// the output's pickle alone is read again (its tensors are not).
void noteRefusedGlobals(const std::string& path, std::ostream& out)
{
    auto written = openCheckpoint(path);
    if (!written) {
        return;
    }
    std::string refused;
    bool extraState = false;  // under a module's _extra_state, which --drop-extra-state leaves out
    for (const auto& g : (*written)->globals) {
        if (!diagnose::isWeightsOnlyAllowed(g.qualified)) {
            extraState = extraState || std::any_of(g.paths.begin(), g.paths.end(), [](const std::string& p) {
                             return p.find("_extra_state") != std::string::npos;
                         });
            refused += (refused.empty() ? "" : ", ") + g.qualified +
                       (g.paths.empty() ? std::string() : " at " + g.paths.front());
        }
    }
    if (refused.empty()) {
        return;
    }
    out << "note: torch.load's default (weights_only=True, PyTorch 2.6+) refuses the output, which holds "
        << displayText(refused) << " as the set's writer saved it: load it with weights_only=False, or convert with "
        << (extraState ? "--drop-extra-state (leaves those values out) or " : "")
        << "--weights-only (makes such values plain, or None)\n";
}

}  // namespace

std::optional<int> convertSet(const std::string& input, const std::optional<sharded::SetLocation>& set,
                              const std::string& output, const std::string& format, bool direct, bool json,
                              SetSource& source, std::ostream& out, std::ostream& err,
                              const sharded::zero::Options& zeroOptions, bool fileOnly)
{
    const bool toTorch = format.empty() || format == "torch";
    const auto* setFormat = set && !set->alone ? sharded::setFormat(set->kind) : nullptr;
    const bool zeroOnly = zeroOptions.weights == sharded::zero::Weights::Module || zeroOptions.keepOptimizer;
    if (zeroOnly && (setFormat == nullptr || !setFormat->takesZeroOptions)) {
        err << "ckptscope convert: " << displayText(input)
            << (fileOnly ? ": --zero-weights module and --keep-optimizer read a DeepSpeed ZeRO set, not --file-only\n"
                         : ": --zero-weights module and --keep-optimizer are for a DeepSpeed ZeRO folder (or one of "
                           "its rank files), and this is none\n");
        return kExitBadInput;
    }
    if (!set) {
        return std::nullopt;
    }
    // Edits, other formats and splits read the set in place, opened as one checkpoint; a ZeRO
    // folder with a storage per tensor, which an edit, split or export can move alone.
    auto inPlace = [&]() -> std::optional<int> {
        sharded::zero::Options perTensor = zeroOptions;
        perTensor.groupStorages = false;
        ProgressLine progress(err, json, "convert");
        auto view = sharded::openView(*set, perTensor, {{}, progress.forOpening()});
        progress.finish();
        if (!view) {
            return failed(view.error(), input, err);
        }
        source.view = std::move(*view);
        return std::nullopt;
    };
    if (!direct || !toTorch) {
        return inPlace();
    }
    // Straight into the output, a ZeRO param group is one storage as zero_to_fp32 writes it: the
    // view above keeps a storage per tensor for the edits, splits and exports that follow.
    sharded::zero::Options grouped = zeroOptions;
    grouped.groupStorages = true;
    // `direct` is never --json: the line follows the member files opened, then the bytes written.
    auto done = [&] {
        ProgressLine progress(err, false, "convert");
        const sharded::ConsolidateProgressScope bytes(
            [line = progress.forBytes()](const sharded::ConsolidateProgress& p) {
                if (line) {
                    line(p.bytesWritten, p.bytesTotal);
                }
                return true;
            });
        auto result = sharded::consolidateSet(*set, output, grouped, {{}, progress.forOpening()});
        progress.finish();
        return result;
    }();
    if (!done && sharded::wouldCopyCode(done.error())) {
        return inPlace();  // the plan drops the value that calls code, and says so, as for a file
    }
    if (!done) {
        return failed(done.error(), input, err);
    }
    // The names the set's model ties, written as views of their tensors: the line a file's plan has.
    if (const auto ties = transform::restoredTiesNote(done->ties, "the set")) {
        printStep(*ties, out);
    }
    out << "wrote " << displayText(done->path) << " (" << humanBytes(done->bytes) << ", " << done->tensors
        << " tensors assembled from " << done->files << " " << (setFormat != nullptr ? setFormat->members : "files")
        << "); 0 values dropped\n";
    if (!done->note.empty()) {
        out << displayText(done->note) << '\n';
    }
    noteRefusedGlobals(done->path, out);
    return kExitOk;
}

}  // namespace ckpt::cli
