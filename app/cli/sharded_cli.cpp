#include "cli/sharded_cli.h"

#include "cli/cli.h"
#include "cli/common.h"
#include "cli/dcp_cli.h"
#include "cli/json_out.h"
#include "cli/set_text.h"
#include "sharded/listing.h"
#include "sharded/sharded.h"
#include "sharded/zero.h"
#include "util/bytes.h"
#include "util/json_text.h"
#include "util/printable.h"
#include "util/shape_text.h"

#include <filesystem>
#include <ostream>

namespace ckpt::cli {

namespace {

// Opens the set `input` names; nothing when it is no set, else the set or the exit code.
std::optional<Expected<sharded::ShardedSet>> openIfSet(const std::string& input)
{
    const auto loc = sharded::detectSet(input);
    std::error_code ec;
    // A ZeRO rank file is a torch.save file of its own: while the set is not read, open it as one.
    if (loc.kind == sharded::SetKind::None ||
        (loc.kind == sharded::SetKind::DeepSpeedZero && std::filesystem::is_regular_file(input, ec))) {
        return std::nullopt;
    }
    return sharded::openSet(loc);
}

// One row of a set's tensor table: the consolidated tensor and where its bytes are.
struct SetRow {
    std::string key;
    DType dtype = DType::Unknown;
    std::vector<std::int64_t> shape;
    std::string location;
    std::uint64_t nbytes = 0;
    std::string where;
};

void printSetTable(const std::vector<SetRow>& rows, const char* whereHeader, std::size_t problems, std::ostream& out)
{
    std::size_t wKey = 3;
    for (const auto& r : rows) {
        wKey = std::max(wKey, displayText(r.key).size());
    }
    auto cell = [&](const std::string& s, std::size_t w) {
        out << s << std::string(w + 2 - std::min(w, s.size()), ' ');
    };
    cell("KEY", wKey);
    cell("DTYPE", 9);
    cell("SHAPE", 18);
    cell("DEVICE", 7);
    cell("SIZE", 10);
    out << whereHeader << '\n';
    for (const auto& r : rows) {
        cell(displayText(r.key), wKey);
        cell(std::string(dtypeName(r.dtype)), 9);
        cell(shapeText(r.shape), 18);
        cell(displayText(r.location), 7);
        cell(humanBytes(r.nbytes), 10);
        out << displayText(r.where) << '\n';
    }
    if (problems > 0) {
        out << "\n" << problems << " problem(s) with the set: run `ckptscope check` on it\n";
    }
}

// A tied name's bytes are its kept key's: listed as "tied to KEY", counted once in the total.
void printSetText(const sharded::ShardedSet& set, std::ostream& out)
{
    const auto tied = set.tiedMap();
    std::uint64_t total = 0;
    std::vector<SetRow> rows;
    for (const auto& t : set.tensors) {
        const auto& e = t.entry;
        const auto kept = tied.find(t.name);
        total += kept == tied.end() ? e.nbytes : 0;
        rows.push_back({t.name, e.dtype, e.shape, e.location, e.nbytes,
                        kept == tied.end() ? set.shardFiles[t.shard] : "tied to " + kept->second});
    }
    out << displayText(set.dir) << ": " << sharded::setKindName(set.kind) << ", index "
        << displayText(std::filesystem::path(set.indexPath).filename().string()) << ", " << set.shardFiles.size()
        << " shards, " << set.tensors.size() << " tensors";
    if (!tied.empty()) {
        out << " (" << tied.size() << " tied to another)";
    }
    out << ", " << humanBytes(total) << " stored\n\n";
    printSetTable(rows, "FILE", set.findings.size(), out);
}

void printSetJson(const sharded::ShardedSet& set, std::ostream& out)
{
    nlohmann::ordered_json j;
    j["schema"] = kJsonSchema;
    j["file"] = set.dir;
    j["set"] = {{"kind", std::string(sharded::setKindName(set.kind))}, {"index", set.indexPath}};
    auto shards = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < set.shardFiles.size(); ++i) {
        shards.push_back({{"file", set.shardFiles[i]},
                          {"read", set.shardRead(i)},
                          {"error", set.shardErrors[i]},
                          {"format", set.shardRead(i) ? std::string(formatName(set.shardFormats[i])) : ""}});
    }
    j["set"]["shards"] = shards;
    const auto tied = set.tiedMap();
    auto tensors = nlohmann::ordered_json::array();
    for (const auto& t : set.tensors) {
        const auto& e = t.entry;
        const auto kept = tied.find(t.name);
        tensors.push_back({{"key", t.name},
                           {"dtype", std::string(dtypeName(e.dtype))},
                           {"shape", e.shape},
                           {"device", e.location},
                           {"bytes", e.nbytes},
                           {"file", set.shardFiles[t.shard]},
                           {"tied_to", kept == tied.end() ? std::string() : kept->second}});
    }
    j["tensors"] = tensors;
    auto codes = nlohmann::ordered_json::array();
    for (const auto& f : set.findings) {
        codes.push_back(f.code);
    }
    j["finding_codes"] = codes;
    out << dumpJson(j) << '\n';
}

// The hidden file beside the output that a set is staged in when it is not written as it stands.
std::optional<int> stage(const std::string& input, const std::string& output,
                         const sharded::TempConsolidated::Writer& consolidate,
                         std::optional<sharded::TempConsolidated>& staged, std::ostream& err)
{
    const std::string dir = std::filesystem::path(output).parent_path().string();
    auto done = sharded::TempConsolidated::write(dir, "set", consolidate);
    if (!done) {
        printError(err, done.error(), input);
        return exitCodeFor(done.error().code);
    }
    staged.emplace(std::move(*done));
    return std::nullopt;
}

// A set read through listing.h (DeepSpeed ZeRO): global shapes and the files holding each tensor.
void printListingText(const sharded::SetListing& l, std::ostream& out)
{
    out << displayText(l.dir) << ": " << sharded::setKindName(l.kind) << ", "
        << displayText(std::filesystem::path(l.index).filename().string()) << ", " << l.files.size() << " files, "
        << l.rows.size() << " tensors, " << humanBytes(l.totalBytes()) << "\n\n";
    std::vector<SetRow> rows;
    for (const auto& r : l.rows) {
        rows.push_back({r.key, r.dtype, r.shape, r.location, r.nbytes, r.storedIn});
    }
    printSetTable(rows, "STORED IN", l.findings.size(), out);
}

void printListingJson(const sharded::SetListing& l, std::ostream& out)
{
    nlohmann::ordered_json j;
    j["schema"] = kJsonSchema;
    j["file"] = l.dir;
    j["set"] = {{"kind", std::string(sharded::setKindName(l.kind))}, {"index", l.index}, {"files", l.files}};
    auto tensors = nlohmann::ordered_json::array();
    for (const auto& r : l.rows) {
        tensors.push_back({{"key", r.key},
                           {"dtype", std::string(dtypeName(r.dtype))},
                           {"shape", r.shape},
                           {"device", r.location},
                           {"bytes", r.nbytes},
                           {"file", r.storedIn},
                           {"tied_to", r.tiedTo}});
    }
    j["tensors"] = tensors;
    auto codes = nlohmann::ordered_json::array();
    for (const auto& f : l.findings) {
        codes.push_back(f.code);
    }
    j["finding_codes"] = codes;
    out << dumpJson(j) << '\n';
}

// A ZeRO folder (the tag folder or the save dir with `latest`), or one of its rank files when
// the folder is a set ckptscope reads (readAsSet); otherwise a rank file stays a file.
bool readsZeroSet(const sharded::SetLocation& loc, const std::string& input)
{
    return loc.kind == sharded::SetKind::DeepSpeedZero && sharded::readAsSet(loc, input);
}

}  // namespace

void noteSetOfFile(const std::string& input, std::ostream& out)
{
    std::error_code ec;
    if (!std::filesystem::is_regular_file(input, ec)) {
        return;
    }
    const auto loc = sharded::detectSet(input);
    if (!sharded::readAsSet(loc, input)) {
        return;
    }
    out << "opened as part of the " << sharded::setKindName(loc.kind) << " in " << displayText(loc.dir)
        << " (--file-only reads " << displayText(std::filesystem::path(input).filename().string()) << " alone)\n\n";
}

std::optional<int> inspectSet(const std::string& input, bool json, std::ostream& out, std::ostream& err)
{
    if (!json) {
        noteSetOfFile(input, out);
    }
    if (auto dcp = inspectDcp(input, json, out, err)) {
        return dcp;
    }
    if (const auto loc = sharded::detectSet(input); readsZeroSet(loc, input)) {
        return withSet(std::optional(sharded::listSet(loc)), input, err,
                       printedAs(json, printListingJson, printListingText, out));
    }
    return withSet(openIfSet(input), input, err, printedAs(json, printSetJson, printSetText, out));
}

std::optional<int> checkSet(const std::string& input, bool json, std::ostream& out, std::ostream& err)
{
    if (!json) {
        noteSetOfFile(input, out);
    }
    if (auto dcp = checkDcp(input, json, out, err)) {
        return dcp;
    }
    if (const auto loc = sharded::detectSet(input); readsZeroSet(loc, input)) {
        return withSet(std::optional(sharded::zero::open(loc)), input, err,
                       [&](const auto& zero) { return printSetFindings(zero.findings, loc.dir, json, out); });
    }
    return withSet(openIfSet(input), input, err,
                   [&](const sharded::ShardedSet& set) { return printSetFindings(set.findings, set.dir, json, out); });
}

std::optional<int> convertSet(const std::string& input, const std::string& output, const std::string& format,
                              bool direct, std::optional<sharded::TempConsolidated>& staged, std::ostream& out,
                              std::ostream& err, const sharded::zero::Options& zeroOptions, bool fileOnly)
{
    const bool toTorch = format.empty() || format == "torch";
    const auto loc = fileOnly ? sharded::SetLocation{} : sharded::detectSet(input);
    const bool zeroOnly = zeroOptions.weights == sharded::zero::Weights::Module || zeroOptions.keepOptimizer;
    if (zeroOnly && !readsZeroSet(loc, input)) {
        err << "ckptscope convert: " << displayText(input)
            << (fileOnly ? ": --zero-weights module and --keep-optimizer read a DeepSpeed ZeRO set, not --file-only\n"
                         : ": --zero-weights module and --keep-optimizer are for a DeepSpeed ZeRO folder (or one of "
                           "its rank files), and this is none\n");
        return kExitBadInput;
    }
    // DCP folders and FSDP rank files: consolidated as dcp_to_torch_save does, directly, or into the
    // staged copy the edits and other formats then work on.
    if (loc.kind == sharded::SetKind::Dcp || loc.kind == sharded::SetKind::FsdpRanks) {
        if (!direct || !toTorch) {
            if (sharded::readAsSet(loc, input)) {
                return stage(
                    input, output, [&loc](const std::string& path) { return sharded::consolidateSet(loc, path); },
                    staged, err);
            }
        } else if (auto dcp = convertDcp(input, output, out, err)) {
            return dcp;
        }
    }
    const bool zero = readsZeroSet(loc, input);
    if (fileOnly) {
        return std::nullopt;
    }
    std::optional<Expected<sharded::ShardedSet>> set;
    if (!zero) {
        set = openIfSet(input);
        if (!set) {
            return std::nullopt;
        }
        if (!*set) {
            printError(err, set->error(), input);
            return exitCodeFor(set->error().code);
        }
    }
    auto consolidate = [&](const std::string& target, const sharded::zero::Options& options) {
        return zero ? sharded::consolidateSet(loc, target, options) : sharded::consolidateTorch(**set, target);
    };
    if (!direct || !toTorch) {
        return stage(
            input, output, [&](const std::string& target) { return consolidate(target, zeroOptions); }, staged, err);
    }
    // Straight into the output, a ZeRO param group is one storage as zero_to_fp32 writes it: the
    // staged copy above keeps a storage per tensor for the edits, splits and exports that follow.
    sharded::zero::Options grouped = zeroOptions;
    grouped.groupStorages = true;
    auto done = consolidate(output, grouped);
    if (!done) {
        printError(err, done.error(), input);
        return exitCodeFor(done.error().code);
    }
    out << "wrote " << displayText(done->path) << " (" << humanBytes(done->bytes) << ", " << done->tensors;
    if (zero) {
        out << " tensors rebuilt from the ZeRO rank files as zero_to_fp32.py does)\n";
    } else {
        out << " tensors from " << (*set)->shardFiles.size() << " shards)\n";
    }
    return kExitOk;
}

}  // namespace ckpt::cli
