#include "cli/sharded_cli.h"

#include "cli/cli.h"
#include "cli/common.h"
#include "cli/dcp_cli.h"
#include "cli/json_out.h"
#include "cli/set_text.h"
#include "sharded/listing.h"
#include "sharded/sharded.h"
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

void printSetText(const sharded::ShardedSet& set, std::ostream& out)
{
    std::uint64_t total = 0;
    for (const auto& t : set.tensors) {
        total += set.entry(t).nbytes;
    }
    out << displayText(set.dir) << ": " << sharded::setKindName(set.kind) << ", index "
        << displayText(std::filesystem::path(set.indexPath).filename().string()) << ", " << set.shardFiles.size()
        << " shards, " << set.tensors.size() << " tensors, " << humanBytes(total) << "\n\n";
    std::size_t wKey = 3;
    for (const auto& t : set.tensors) {
        wKey = std::max(wKey, displayText(t.name).size());
    }
    auto cell = [&](const std::string& s, std::size_t w) {
        out << s << std::string(w + 2 - std::min(w, s.size()), ' ');
    };
    cell("KEY", wKey);
    cell("DTYPE", 9);
    cell("SHAPE", 18);
    cell("DEVICE", 7);
    cell("SIZE", 10);
    out << "FILE\n";
    for (const auto& t : set.tensors) {
        const auto& e = set.entry(t);
        cell(displayText(t.name), wKey);
        cell(std::string(dtypeName(e.dtype)), 9);
        cell(shapeText(e.shape), 18);
        cell(displayText(e.location), 7);
        cell(humanBytes(e.nbytes), 10);
        out << displayText(set.shardFiles[t.shard]) << '\n';
    }
    if (!set.findings.empty()) {
        out << "\n" << set.findings.size() << " problem(s) with the set: run `ckptscope check` on it\n";
    }
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
                          {"read", set.shards[i] != nullptr},
                          {"error", set.shardErrors[i]},
                          {"format", set.shards[i] ? std::string(formatName(set.shards[i]->format)) : ""}});
    }
    j["set"]["shards"] = shards;
    auto tensors = nlohmann::ordered_json::array();
    for (const auto& t : set.tensors) {
        const auto& e = set.entry(t);
        tensors.push_back({{"key", t.name},
                           {"dtype", std::string(dtypeName(e.dtype))},
                           {"shape", e.shape},
                           {"device", e.location},
                           {"bytes", e.nbytes},
                           {"file", set.shardFiles[t.shard]}});
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

}  // namespace

std::optional<int> inspectSet(const std::string& input, bool json, std::ostream& out, std::ostream& err)
{
    if (auto dcp = inspectDcp(input, json, out, err)) {
        return dcp;
    }
    return withSet(openIfSet(input), input, err, printedAs(json, printSetJson, printSetText, out));
}

std::optional<int> checkSet(const std::string& input, bool json, std::ostream& out, std::ostream& err)
{
    if (auto dcp = checkDcp(input, json, out, err)) {
        return dcp;
    }
    std::error_code ec;
    if (const auto loc = sharded::detectSet(input);
        loc.kind == sharded::SetKind::DeepSpeedZero && std::filesystem::is_directory(input, ec)) {
        return withSet(
            std::optional(sharded::zeroFindings(loc)), input, err,
            [&](const std::vector<sharded::SetFinding>& found) { return printSetFindings(found, loc.dir, json, out); });
    }
    return withSet(openIfSet(input), input, err,
                   [&](const sharded::ShardedSet& set) { return printSetFindings(set.findings, set.dir, json, out); });
}

std::optional<int> convertSet(const std::string& input, const std::string& output, const std::string& format,
                              bool direct, std::optional<sharded::TempConsolidated>& staged, std::ostream& out,
                              std::ostream& err)
{
    const bool toTorch = format.empty() || format == "torch";
    const auto loc = sharded::detectSet(input);
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
    std::error_code ec;
    const bool zero12 =
        loc.kind == sharded::SetKind::DeepSpeedZero && std::filesystem::is_directory(input, ec) &&
        std::filesystem::is_regular_file(std::filesystem::path(loc.index) / "mp_rank_00_model_states.pt", ec);
    std::optional<Expected<sharded::ShardedSet>> set;
    if (!zero12) {
        set = openIfSet(input);
        if (!set) {
            return std::nullopt;
        }
        if (!*set) {
            printError(err, set->error(), input);
            return exitCodeFor(set->error().code);
        }
    }
    auto consolidate = [&](const std::string& target) {
        return zero12 ? sharded::consolidateZero12(loc, target) : sharded::consolidateTorch(**set, target);
    };
    if (!direct || !toTorch) {
        return stage(input, output, consolidate, staged, err);
    }
    auto done = consolidate(output);
    if (!done) {
        printError(err, done.error(), input);
        return exitCodeFor(done.error().code);
    }
    out << "wrote " << displayText(done->path) << " (" << humanBytes(done->bytes) << ", " << done->tensors;
    if (zero12) {
        out << " fp32 parameters from the ZeRO stage 1/2 partitions)\n";
    } else {
        out << " tensors from " << (*set)->shardFiles.size() << " shards)\n";
    }
    return kExitOk;
}

}  // namespace ckpt::cli
