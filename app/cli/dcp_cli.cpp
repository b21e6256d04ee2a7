#include "cli/dcp_cli.h"

#include "cli/cli.h"
#include "cli/common.h"
#include "cli/json_out.h"
#include "cli/set_text.h"
#include "sharded/dcp.h"
#include "sharded/fsdp.h"
#include "util/bytes.h"
#include "util/json_text.h"
#include "util/printable.h"
#include "util/shape_text.h"

#include <algorithm>
#include <filesystem>
#include <ostream>

namespace ckpt::cli {

namespace {

std::optional<Expected<sharded::dcp::Set>> openIfDcp(const std::string& input)
{
    const auto loc = sharded::detectSet(input);
    if (loc.kind != sharded::SetKind::Dcp) {
        return std::nullopt;
    }
    return sharded::dcp::open(loc);
}

std::uint64_t tensorBytes(const sharded::dcp::Item& t)
{
    return t.numel() * elementSize(t.dtype);
}

std::string chunkText(const sharded::dcp::Set& set, const sharded::dcp::Chunk& c)
{
    std::string s = "at " + shapeText(c.offsets) + " size " + shapeText(c.sizes) + "  ";
    if (!c.at.found) {
        return s + "(no storage_data entry)";
    }
    return s + displayText(set.meta.files[c.at.file]) + " @ " + std::to_string(c.at.offset) + " (" +
           humanBytes(c.at.length) + ")";
}

void printText(const sharded::dcp::Set& set, std::ostream& out)
{
    std::uint64_t total = 0;
    std::size_t tensors = 0;
    std::size_t wKey = 3;
    for (const auto& t : set.meta.items) {
        if (t.isTensor) {
            total += tensorBytes(t);
            ++tensors;
        }
        wKey = std::max(wKey, displayText(t.fqn).size());
    }
    out << displayText(set.loc.dir) << ": " << set.loc.what << "; "
        << (set.meta.version.empty() ? std::string("no version (PyTorch < 2.4)") : "version " + set.meta.version)
        << (set.meta.oldTensorProperties ? ", TensorProperties under torch.distributed._shard" : "") << ", " << tensors
        << " tensors, " << set.meta.items.size() - tensors << " values, " << humanBytes(total) << "\n\n";
    auto cell = [&](const std::string& s, std::size_t w) {
        out << s << std::string(w + 2 - std::min(w, s.size()), ' ');
    };
    cell("KEY", wKey);
    cell("DTYPE", 9);
    cell("SHAPE", 18);
    cell("SIZE", 10);
    out << "CHUNKS\n";
    for (const auto& t : set.meta.items) {
        cell(displayText(t.fqn), wKey);
        if (!t.isTensor) {
            out << "= " << displayText(sharded::dcp::valueText(set, t)) << '\n';
            continue;
        }
        cell(std::string(dtypeName(t.dtype)), 9);
        cell(shapeText(t.size), 18);
        cell(humanBytes(tensorBytes(t)), 10);
        out << t.chunks.size() << '\n';
        if (t.chunks.size() > 1 || (t.chunks.size() == 1 && t.chunks[0].sizes != t.size)) {
            for (const auto& c : t.chunks) {
                out << "    " << chunkText(set, c) << '\n';
            }
        } else if (t.chunks.size() == 1) {
            out << "    whole, " << chunkText(set, t.chunks[0]).substr(chunkText(set, t.chunks[0]).find("  ") + 2)
                << '\n';
        }
    }
    if (!set.findings.empty()) {
        out << "\n" << set.findings.size() << " problem(s) with the set: run `ckptscope check` on it\n";
    }
}

nlohmann::ordered_json pathJson(const sharded::dcp::Item& t)
{
    auto p = nlohmann::ordered_json::array();
    for (const auto& e : t.path) {
        if (e.isIndex) {
            p.push_back(e.index);
        } else {
            p.push_back(e.key);
        }
    }
    return p;
}

void printJson(const sharded::dcp::Set& set, std::ostream& out)
{
    nlohmann::ordered_json j;
    j["schema"] = kJsonSchema;
    j["file"] = set.loc.dir;
    j["set"] = {{"kind", std::string(sharded::setKindName(set.loc.kind))},
                {"index", set.loc.index},
                {"version", set.meta.version},
                {"old_tensor_properties", set.meta.oldTensorProperties}};
    auto files = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < set.meta.files.size(); ++i) {
        files.push_back({{"file", set.meta.files[i]}, {"read", set.data.present(i)}, {"error", set.data.error(i)}});
    }
    j["set"]["shards"] = files;
    auto tensors = nlohmann::ordered_json::array();
    auto values = nlohmann::ordered_json::array();
    for (const auto& t : set.meta.items) {
        if (!t.isTensor) {
            values.push_back({{"key", t.fqn},
                              {"path", pathJson(t)},
                              {"file", t.bytes.found ? set.meta.files[t.bytes.file] : ""},
                              {"value", sharded::dcp::valueText(set, t)}});
            continue;
        }
        auto chunks = nlohmann::ordered_json::array();
        for (const auto& c : t.chunks) {
            chunks.push_back({{"offsets", c.offsets},
                              {"sizes", c.sizes},
                              {"file", c.at.found ? set.meta.files[c.at.file] : ""},
                              {"offset", c.at.offset},
                              {"length", c.at.length}});
        }
        tensors.push_back({{"key", t.fqn},
                           {"path", pathJson(t)},
                           {"dtype", std::string(dtypeName(t.dtype))},
                           {"shape", t.size},
                           {"device", "cpu"},
                           {"bytes", tensorBytes(t)},
                           {"chunks", chunks}});
    }
    j["tensors"] = tensors;
    j["values"] = values;
    auto codes = nlohmann::ordered_json::array();
    for (const auto& f : set.findings) {
        codes.push_back(f.code);
    }
    j["finding_codes"] = codes;
    out << dumpJson(j) << '\n';
}

std::optional<Expected<sharded::fsdp::Set>> openIfFsdp(const std::string& input)
{
    const auto loc = sharded::detectSet(input);
    if (loc.kind != sharded::SetKind::FsdpRanks) {
        return std::nullopt;
    }
    std::error_code ec;
    return sharded::fsdp::open(loc, std::filesystem::is_regular_file(input, ec));
}

// The bytes of a rank's local tensor (its piece of the global tensor).
std::uint64_t localBytes(const TensorEntry& t)
{
    std::uint64_t n = elementSize(t.dtype);
    for (const auto d : t.shape) {
        n *= static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0));
    }
    return n;
}

std::string boxText(const sharded::dcp::detail::Box& b)
{
    return "at " + shapeText(b.offsets) + " size " + shapeText(b.sizes);
}

void printFsdpText(const sharded::fsdp::Set& set, std::ostream& out)
{
    std::uint64_t total = 0;
    std::size_t wKey = 3;
    for (const auto& t : set.tensors) {
        total += t.numel() * elementSize(t.dtype);
        wKey = std::max(wKey, displayText(t.key).size());
    }
    const auto& first = set.files.front();
    out << displayText(set.oneFile ? first.path : set.loc.dir) << ": " << set.loc.what << "; "
        << (set.oneFile ? "rank " + std::to_string(first.rank) + " of " + std::to_string(first.world) +
                              " opened alone (its local shards; the folder gives the consolidated tensors)"
                        : std::to_string(set.files.size()) + " rank files")
        << ", " << set.tensors.size() << " tensors, " << humanBytes(total) << " global\n\n";
    auto cell = [&](const std::string& s, std::size_t w) {
        out << s << std::string(w + 2 - std::min(w, s.size()), ' ');
    };
    cell("KEY", wKey);
    cell("KIND", 13);
    cell("DTYPE", 9);
    cell("GLOBAL SHAPE", 18);
    out << "SHARDS\n";
    for (const auto& t : set.tensors) {
        cell(displayText(t.key), wKey);
        cell(t.plain ? "tensor" : (t.dtensor ? "DTensor" : "ShardedTensor"), 13);
        cell(std::string(dtypeName(t.dtype)), 9);
        cell(shapeText(t.size), 18);
        out << t.shards.size() << (set.oneFile ? " local of " + std::to_string(t.declared.size()) : "") << '\n';
        for (const auto& s : t.shards) {
            out << "    " << boxText(s.box) << "  " << humanBytes(localBytes(s.tensor)) << "  "
                << displayText(std::filesystem::path(set.files[s.file].path).filename().string()) << '\n';
        }
    }
    if (!set.findings.empty()) {
        out << "\n" << set.findings.size() << " finding(s): run `ckptscope check` on it\n";
    }
}

void printFsdpJson(const sharded::fsdp::Set& set, std::ostream& out)
{
    nlohmann::ordered_json j;
    j["schema"] = kJsonSchema;
    j["file"] = set.oneFile ? set.files.front().path : set.loc.dir;
    j["set"] = {{"kind", std::string(sharded::setKindName(set.loc.kind))}, {"one_file", set.oneFile}};
    auto files = nlohmann::ordered_json::array();
    for (const auto& f : set.files) {
        files.push_back({{"file", f.path}, {"rank", f.rank}, {"world_size", f.world}});
    }
    j["set"]["shards"] = files;
    auto tensors = nlohmann::ordered_json::array();
    for (const auto& t : set.tensors) {
        auto shards = nlohmann::ordered_json::array();
        for (const auto& s : t.shards) {
            shards.push_back({{"offsets", s.box.offsets},
                              {"sizes", s.box.sizes},
                              {"local_shape", std::vector<std::int64_t>(s.tensor.shape.begin(), s.tensor.shape.end())},
                              {"local_bytes", localBytes(s.tensor)},
                              {"file", set.files[s.file].path},
                              {"rank", set.files[s.file].rank}});
        }
        tensors.push_back({{"key", t.key},
                           {"kind", t.plain ? "tensor" : (t.dtensor ? "DTensor" : "ShardedTensor")},
                           {"dtype", std::string(dtypeName(t.dtype))},
                           {"shape", t.size},
                           {"device", t.device},
                           {"bytes", t.numel() * elementSize(t.dtype)},
                           {"declared_shards", t.declared.size()},
                           {"shards", shards}});
    }
    j["tensors"] = tensors;
    auto codes = nlohmann::ordered_json::array();
    for (const auto& f : set.findings) {
        codes.push_back(f.code);
    }
    j["finding_codes"] = codes;
    out << dumpJson(j) << '\n';
}

// What convert says of a set it consolidated as it stands, or why it could not.
int printWritten(const Expected<sharded::ConsolidateResult>& done, const char* files, const std::string& input,
                 std::ostream& out, std::ostream& err)
{
    if (!done) {
        printError(err, done.error(), input);
        return exitCodeFor(done.error().code);
    }
    out << "wrote " << displayText(done->path) << " (" << humanBytes(done->bytes) << ", " << done->tensors
        << " tensors assembled from " << done->files << " " << files << ")\n";
    return kExitOk;
}

}  // namespace

std::optional<int> inspectDcp(const std::string& input, bool json, std::ostream& out, std::ostream& err)
{
    if (auto rc = withSet(openIfFsdp(input), input, err, printedAs(json, printFsdpJson, printFsdpText, out))) {
        return rc;
    }
    return withSet(openIfDcp(input), input, err, printedAs(json, printJson, printText, out));
}

std::optional<int> checkDcp(const std::string& input, bool json, std::ostream& out, std::ostream& err)
{
    if (auto rc = withSet(openIfFsdp(input), input, err, [&](const sharded::fsdp::Set& ranks) {
            return printSetFindings(ranks.findings, ranks.oneFile ? ranks.files.front().path : ranks.loc.dir, json,
                                    out);
        })) {
        return rc;
    }
    return withSet(openIfDcp(input), input, err, [&](const sharded::dcp::Set& set) {
        return printSetFindings(set.findings, set.loc.dir, json, out);
    });
}

std::optional<int> convertDcp(const std::string& input, const std::string& output, std::ostream& out, std::ostream& err)
{
    if (auto rc = withSet(openIfFsdp(input), input, err, [&](const sharded::fsdp::Set& ranks) {
            return printWritten(sharded::fsdp::consolidate(ranks, output), "rank files", input, out, err);
        })) {
        return rc;
    }
    return withSet(openIfDcp(input), input, err, [&](const sharded::dcp::Set& set) {
        return printWritten(sharded::dcp::consolidate(set, output), "DCP data files", input, out, err);
    });
}

}  // namespace ckpt::cli
