// A Hugging Face sharded set (docs/format.md §16.2) as one view: each shard is read as the single file it
// is, and the index's weight_map says which shard holds each consolidated key. The checks are the
// ones from_pretrained would fail (or silently paper over) on.
#include "diagnose/diagnose.h"
#include "sharded/open_control.h"
#include "sharded/sharded.h"
#include "util/bytes.h"
#include "util/json_text.h"
#include "util/model_config.h"
#include "util/progress.h"
#include "util/tied_pairs.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sys/stat.h>
#include <unordered_map>
#include <unordered_set>

namespace ckpt::sharded {

namespace fs = std::filesystem;

bool ShardedSet::complete() const
{
    // A head config.json calls untied is a problem of the model's loading, not of the stored
    // tensors: every one of them can still be consolidated.
    return std::none_of(findings.begin(), findings.end(),
                        [](const SetFinding& f) { return detail::stopsTheRead(f) && f.code != "tied-weight-missing"; });
}

namespace {

// An index is small; a file far beyond that is not one, and must not be read whole.
constexpr std::uintmax_t kMaxIndexBytes = 64U << 20;

// The index, its weight_map taken aside in file order (the set's tensors follow it). Objects are
// sorted maps (nlohmann::json): ordered_json inserted each key with a linear scan, so 100k entries
// took 46 s and a flood of metadata keys longer; the parse callback keeps weight_map's order
// without inserting its entries anywhere. A name given twice keeps its first place and its last
// file, as Python's dict (json.load) does.
// Its implicit destructor runs nlohmann::json's, whose non-recursive teardown allocates a stack and
// so "may throw" to clang-tidy; a bad_alloc there ends the program as anywhere else.
struct Index {           // NOLINT(bugprone-exception-escape)
    nlohmann::json doc;  // "weight_map" left an empty object
    std::vector<std::pair<std::string, nlohmann::json>> weightMap;
};

Expected<Index> parseIndex(const std::string& text);

Expected<Index> readIndex(const std::string& path)
{
    auto text = readSmallFile(path, kMaxIndexBytes);
    if (!text) {
        return text.error();
    }
    return parseIndex(*text);
}

Expected<Index> parseIndex(const std::string& text)
{
    using Event = nlohmann::json::parse_event_t;
    Index index;
    bool inMap = false;  // reading the top-level "weight_map"'s members
    const nlohmann::json::parser_callback_t takeWeightMap = [&](int depth, Event event, nlohmann::json& parsed) {
        if (event == Event::key && depth == 1) {
            inMap = parsed.is_string() && parsed.get_ref<const std::string&>() == "weight_map";
            if (inMap) {
                index.weightMap.clear();  // the last "weight_map" wins
            }
            return true;
        }
        if (!inMap || depth != 2) {
            return true;
        }
        if (event == Event::key) {
            index.weightMap.emplace_back(parsed.get<std::string>(), nullptr);  // null until its value
            return false;
        }
        if (event == Event::value && !index.weightMap.empty()) {
            index.weightMap.back().second = std::move(parsed);
            return false;
        }
        return true;
    };
    auto parsed = parseJsonText<nlohmann::json>(text, "the index", takeWeightMap);
    if (!parsed) {
        return parsed.error();
    }
    index.doc = std::move(*parsed);
    auto& j = index.doc;
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
        return makeError(ErrorCode::Corrupt, "the index has no \"weight_map\" object (transformers reads "
                                             "index[\"weight_map\"] and fails with KeyError)");
    }
    std::unordered_map<std::string, std::size_t> first;
    std::vector<std::pair<std::string, nlohmann::json>> unique;
    for (auto& [name, file] : index.weightMap) {
        if (auto [it, added] = first.try_emplace(name, unique.size()); !added) {
            unique[it->second].second = std::move(file);
        } else {
            unique.emplace_back(std::move(name), std::move(file));
        }
    }
    index.weightMap = std::move(unique);
    return index;
}

// "-0000i-of-0000N" in a shard name: the N the writer meant, 0 when the name has none.
std::uint64_t declaredShardCount(const std::string& name)
{
    static const std::regex re(R"(-[0-9]{5}-of-([0-9]{5})\.)");
    std::smatch m;
    return std::regex_search(name, m, re) ? std::stoull(m[1].str()) : 0;
}

// What the set keeps of a shard once it is closed: its top-level tensors by key (the rows of a
// flat state dict, with copies of their entries) and its pickle's unsafe-callable findings.
struct ShardScan {
    std::unordered_map<std::string, SetTensor> byName;
    std::vector<SetFinding> unsafe;
};

ShardScan scanShard(const Checkpoint& c, std::uint32_t shard, const std::string& file)
{
    ShardScan scan;
    const Node& root = c.nodes[kRootNode];
    for (std::uint32_t row = 0; row < root.childCount; ++row) {
        const Node& n = c.nodes[root.child(row)];
        if (n.kind != NodeKind::Tensor) {
            continue;
        }
        SetTensor t{std::string(n.name), shard, n.tensor, c.tensors[n.tensor], {}};
        if (t.entry.storage.valid()) {
            t.storage = c.storages[t.entry.storage];
        }
        scan.byName.emplace(t.name, std::move(t));
    }
    detail::unsafeCodeFindings(c, file, scan.unsafe);
    return scan;
}

std::string listSome(const std::vector<std::string>& names)
{
    std::string s;
    for (std::size_t i = 0; i < names.size() && i < 5; ++i) {
        s += (i ? ", " : "") + names[i];
    }
    if (names.size() > 5) {
        s += ", ... (" + std::to_string(names.size()) + " in all)";
    }
    return s;
}

// Reads every shard once, in turn, keeping only its scan: each is closed before the next opens,
// so neither the descriptor limit nor memory grows with the shard count.
Expected<std::vector<ShardScan>> scanShards(ShardedSet& set)
{
    const std::string entry = "weight_map in " + fs::path(set.indexPath).filename().string();
    std::vector<ShardScan> scans(set.shardFiles.size());
    for (std::size_t i = 0; i < set.shardFiles.size(); ++i) {
        const auto& file = set.shardFiles[i];
        if (set.files) {
            set.shardPaths.push_back(set.files->pathOf(file));
            set.shardFormats.push_back(Format::TorchZip);
            set.shardIdentities.emplace_back();
            auto ck = set.files->open(file);
            if (!ck) {
                set.shardErrors.push_back(ck.error().message);
            } else if (!*ck) {
                set.shardErrors.emplace_back("missing");
            } else {
                set.shardErrors.emplace_back();
                set.shardFormats.back() = (**ck)->format;
                scans[i] = scanShard(***ck, static_cast<std::uint32_t>(i), file);
            }
            continue;
        }
        auto member = memberOfFolder(set.dir, file, entry);
        if (!member) {
            return member.error();
        }
        set.shardPaths.push_back(*member);
        set.shardFormats.push_back(Format::TorchZip);
        set.shardIdentities.emplace_back();
        std::error_code ec;
        if (!fs::exists(*member, ec)) {
            set.shardErrors.emplace_back("missing");
            continue;
        }
        auto ck = openMember(*member, i, set.shardFiles.size());
        auto identity = ck ? identityOfCheckpoint(**ck, *member) : Expected<FileIdentity>(ck.error());
        if (!identity) {
            set.shardErrors.push_back(identity.error().message);
            continue;
        }
        set.shardErrors.emplace_back();
        set.shardFormats.back() = (*ck)->format;
        set.shardIdentities.back() = *identity;
        scans[i] = scanShard(**ck, static_cast<std::uint32_t>(i), file);
    }
    return scans;
}

void shardFindings(ShardedSet& set, std::vector<ShardScan>& scans, const std::string& indexName)
{
    std::vector<std::string> missing;
    for (std::size_t i = 0; i < set.shardFiles.size(); ++i) {
        if (set.shardRead(i)) {
            std::move(scans[i].unsafe.begin(), scans[i].unsafe.end(), std::back_inserter(set.findings));
            scans[i].unsafe.clear();
            continue;
        }
        if (set.shardErrors[i] == "missing") {
            missing.push_back(set.shardFiles[i]);
        } else {
            set.findings.push_back({{"shard-unreadable",
                                     diagnose::Severity::Error,
                                     "A shard of the set cannot be read",
                                     set.shardFiles[i] + ": " + set.shardErrors[i] +
                                         ". Loading the set fails on this shard; download it again.",
                                     {set.shardFiles[i]}}});
        }
    }
    if (!missing.empty()) {
        set.findings.push_back(
            {{"shard-missing", diagnose::Severity::Error, "Shard files named by the index are missing",
              std::to_string(missing.size()) + " of the " + std::to_string(set.shardFiles.size()) + " shards " +
                  indexName + " names are not in the folder: " + listSome(missing) +
                  ". from_pretrained fails opening them (FileNotFoundError: No such file or directory). Download "
                  "the missing shards (an interrupted `huggingface-cli download` leaves exactly this).",
              missing}});
    }
    std::uint64_t declared = 0;
    for (const auto& f : set.shardFiles) {
        declared = std::max(declared, declaredShardCount(f));
    }
    if (declared != 0 && declared != set.shardFiles.size()) {
        set.findings.push_back(
            {{"shard-count-mismatch",
              diagnose::Severity::Warning,
              "The shard names and the index disagree on the count",
              "The shard names say -of-" + std::to_string(declared) + " but " + indexName + " names " +
                  std::to_string(set.shardFiles.size()) + " files: a shard was renamed or the index edited by hand.",
              {}}});
    }
}

// `removed` as a second name of set.tensors[kept]: the same shard tensor, so a consolidation writes
// both over one storage with the same view, as torch.save(model.state_dict()) writes a tie.
void addTiedName(ShardedSet& set, std::size_t kept, const std::string& removed)
{
    SetTensor alias = set.tensors[kept];
    alias.name = removed;
    set.tiedNames.emplace_back(removed, set.tensors[kept].name);
    set.tensors.push_back(std::move(alias));
}

// The hub's save_torch_state_dict stores a tied name once and records `removed -> kept` in the
// index metadata (ckptscope's split does the same): the removed name comes back as a view of the
// kept tensor, so a consolidation writes both, sharing one storage, as model.state_dict() has them.
void restoreTiedNames(ShardedSet& set, const nlohmann::json& meta,
                      const std::vector<std::pair<std::string, std::uint32_t>>& weightMap)
{
    if (!meta.is_object()) {
        return;
    }
    std::unordered_set<std::string> listed;
    for (const auto& [name, shard] : weightMap) {
        listed.insert(name);
    }
    std::unordered_map<std::string, std::size_t> present;
    for (std::size_t i = 0; i < set.tensors.size(); ++i) {
        present.emplace(set.tensors[i].name, i);
    }
    for (const auto& [removed, kept] : meta.items()) {
        if (!kept.is_string() || present.contains(removed) || listed.contains(removed)) {
            continue;
        }
        const auto it = present.find(kept.get_ref<const std::string&>());
        if (it == present.end()) {
            continue;
        }
        addTiedName(set, it->second, removed);
    }
}

// config.json beside the set (its model class, ties and quantization_config), read once.
std::optional<ModelConfig> setConfig(const ShardedSet& set)
{
    if (!set.files) {
        return readModelConfig(set.dir);
    }
    auto remote = set.files->readText("config.json", kMaxIndexBytes);
    if (!remote || !*remote) {
        return std::nullopt;
    }
    auto parsed = parseModelConfig(**remote);
    return parsed ? std::optional<ModelConfig>(std::move(*parsed)) : std::nullopt;
}

// The names the set's model ties (util/tied_pairs.h) over its safetensors files, which cannot alias
// (a .bin shard keeps a tie as a shared storage): each absent name the model ties comes back as the
// metadata-recorded ties do, a second name of the tensor it is tied to, shown in the set and written
// by a consolidation; the rest are findings (diagnose::tieFindings). Names recorded in the index
// metadata were restored before and count as stored.
void restoreConfigTies(ShardedSet& set)
{
    const bool safetensors = std::any_of(set.shardFiles.begin(), set.shardFiles.end(),
                                         [](const std::string& f) { return f.ends_with(".safetensors"); });
    if (!safetensors) {
        return;
    }
    std::vector<std::string> keys;
    std::unordered_map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < set.tensors.size(); ++i) {
        keys.push_back(set.tensors[i].name);
        index.emplace(set.tensors[i].name, i);
    }
    set.ties = tiedWeights(set.config, keys);
    const TieReport& report = set.ties;
    for (const auto& t : report.restored) {
        addTiedName(set, index.at(t.source), t.name);
    }
    for (auto& f : diagnose::tieFindings(report, "the set")) {
        set.findings.push_back(
            {{std::move(f.code), f.severity, std::move(f.title), std::move(f.detail), std::move(f.paths)}});
    }
}

// metadata.total_size: the bytes the set stores, as save_pretrained writes it. Loaders ignore it
// (transformers and accelerate never read it), so a wrong one, or one Python's json read as inf
// (`1e400`), NaN or text, is a finding, never a reason to refuse the set.
// `agree`: the index lists exactly the shards' tensors (else those findings say what differs).
void totalSizeFinding(ShardedSet& set, const nlohmann::json& meta, const std::string& indexName, bool agree)
{
    if (!meta.is_object() || !meta.contains("total_size")) {
        return;
    }
    const auto& declared = meta["total_size"];
    std::string problem;
    if (declared.is_number_unsigned()) {
        set.declaredTotalSize = declared.get<std::uint64_t>();
        const bool whole = std::all_of(set.shardErrors.begin(), set.shardErrors.end(),
                                       [](const std::string& error) { return error.empty(); });
        const auto tied = set.tiedMap();
        std::uint64_t stored = 0;
        for (const auto& t : set.tensors) {
            stored += tied.contains(t.name) ? 0 : t.entry.nbytes;
        }
        if (agree && whole && stored != set.declaredTotalSize) {
            problem = "is " + std::to_string(set.declaredTotalSize) + " bytes, but the shards' tensors hold " +
                      std::to_string(stored);
        }
    } else {
        const std::string text = declared.is_string() ? declared.get<std::string>() : declared.dump();
        problem = "is " + text.substr(0, 80) + ", not a count of bytes";
    }
    if (!problem.empty()) {
        set.findings.push_back({{"index-total-size",
                                 diagnose::Severity::Info,
                                 "The index's metadata.total_size is wrong",
                                 "metadata.total_size in " + indexName + " " + problem +
                                     ". Loaders ignore it (transformers and accelerate never read it), so the set "
                                     "loads; tools that size downloads or memory from it are misled. ckptscope "
                                     "writes the right value when it writes the set.",
                                 {}}});
    }
}

}  // namespace

Expected<CheckpointPtr> ShardedSet::shard(std::size_t i) const
{
    const std::string& path = shardPaths.at(i);
    if (!shardRead(i)) {
        Error e = makeError(ErrorCode::Io, "cannot be read: " + shardErrors[i]);
        e.path = path;
        return e;
    }
    progress::noteReading(path);  // which shard a progress line names
    if (files) {
        auto ck = files->open(shardFiles.at(i));
        if (!ck) {
            return ck.error();
        }
        if (!*ck) {
            Error e = makeError(ErrorCode::Io, "is gone");
            e.path = path;
            return e;
        }
        return **ck;
    }
    return openShards->get(i, [&]() { return readShard(i); });
}

Expected<CheckpointPtr> ShardedSet::readShard(std::size_t i) const
{
    const std::string& path = shardPaths.at(i);
    // A member is no model alone: the set restores its ties for the whole model (restoreConfigTies).
    auto ck = openCheckpoint(path, OpenOptions{.modelConfig = false});
    auto identity = ck ? identityOfCheckpoint(**ck, path) : Expected<FileIdentity>(ck.error());
    if (!identity) {
        return identity.error();
    }
    if (auto same = checkSameFile(path, shardIdentities[i], *identity); !same) {
        return same.error();
    }
    return *ck;
}

Expected<void> ShardedSet::checkUnchanged() const
{
    if (files) {
        for (std::size_t i = 0; i < shardFiles.size(); ++i) {
            if (!shardRead(i)) {
                continue;
            }
            auto c = shard(i);
            if (!c) {
                return c.error();
            }
            if (auto same = (*c)->checkUnchanged(); !same) {
                return same;
            }
        }
        return {};
    }
    for (const auto& c : openShards->cached()) {
        if (auto same = c->checkUnchanged(); !same) {
            return same;
        }
    }
    // A shard closed since it was read cannot say whether a read of it faulted; a file that shrank
    // (the only way a read faults) has another size now.
    for (std::size_t i = 0; i < shardPaths.size(); ++i) {
        if (shardRead(i)) {
            if (auto same = checkStillSame(shardPaths[i], shardIdentities[i]); !same) {
                return same;
            }
        }
    }
    return {};
}

std::vector<std::string> detail::indexShardNames(const std::string& indexPath)
{
    std::vector<std::string> names;
    auto index = readIndex(indexPath);
    if (!index) {
        return names;
    }
    std::unordered_set<std::string> seen;
    for (const auto& [key, file] : index->weightMap) {
        if (file.is_string() && seen.insert(file.get_ref<const std::string&>()).second) {
            names.push_back(file.get_ref<const std::string&>());
        }
    }
    return names;
}

namespace {
Expected<ShardedSet> readIndexedSet(ShardedSet set, const Index& parsed);
}  // namespace

Expected<ShardedSet> openSet(const SetLocation& loc)
{
    if (loc.kind == SetKind::None) {
        return makeError(ErrorCode::NotCheckpoint, "not a multi-file checkpoint");
    }
    if (loc.kind != SetKind::HuggingFace) {
        // Each format has its own reader (formats.h); this one reads Hugging Face indexes only.
        Error e = makeError(ErrorCode::Unsupported, loc.what + ": not a Hugging Face sharded set");
        e.path = loc.dir;
        return e;
    }

    auto indexFile = memberOfFolder(loc.dir, fs::path(loc.index).filename().string(), "the set's index");
    auto index = indexFile ? readIndex(*indexFile) : Expected<Index>(indexFile.error());
    if (!index) {
        Error e = index.error();
        e.path = loc.index;
        return e;
    }
    ShardedSet set;
    set.kind = loc.kind;
    set.dir = loc.dir;
    set.indexPath = loc.index;
    return readIndexedSet(std::move(set), *index);
}

Expected<ShardedSet> openSet(std::shared_ptr<const SetFiles> files, const std::string& indexName,
                             const std::string& dir)
{
    const std::string indexPath = files->pathOf(indexName);
    auto named = [&](Error e) {
        e.path = indexPath;
        return e;
    };
    auto text = files->readText(indexName, kMaxIndexBytes);
    if (!text) {
        return named(text.error());
    }
    if (!*text) {
        return named(makeError(ErrorCode::Io, "does not exist"));
    }
    auto index = parseIndex(**text);
    if (!index) {
        return named(index.error());
    }
    ShardedSet set;
    set.kind = SetKind::HuggingFace;
    set.dir = dir;
    set.indexPath = indexPath;
    set.files = std::move(files);
    return readIndexedSet(std::move(set), *index);
}

namespace {

// The set an index describes, its shards read: the part of openSet() after the index, whichever
// way its files are read.
Expected<ShardedSet> readIndexedSet(ShardedSet set, const Index& parsed)
{
    const SetLocation loc{set.kind, set.dir, set.indexPath, {}};
    const Index* index = &parsed;
    // A reference, never a copy: copying a JSON value recurses once per level of its nesting.
    static const nlohmann::json kNoMetadata;
    const auto found = index->doc.find("metadata");
    const auto& meta = found != index->doc.end() ? *found : kNoMetadata;

    std::vector<std::pair<std::string, std::uint32_t>> wanted;  // weight_map in file order
    std::unordered_map<std::string, std::uint32_t> shardOf;
    for (const auto& [name, file] : index->weightMap) {
        if (!file.is_string()) {
            Error e = makeError(ErrorCode::Corrupt, "weight_map[\"" + name + "\"] is not a file name");
            e.path = loc.index;
            return e;
        }
        const auto& f = file.get_ref<const std::string&>();
        if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
            Error e = makeError(ErrorCode::Corrupt,
                                "weight_map[\"" + name + "\"] names \"" + f + "\", not a file beside the index");
            e.path = loc.index;
            return e;
        }
        auto [it, added] = shardOf.emplace(f, static_cast<std::uint32_t>(set.shardFiles.size()));
        if (added) {
            set.shardFiles.push_back(f);
        }
        wanted.emplace_back(name, it->second);
    }
    auto scans = scanShards(set);
    if (!scans) {
        return scans.error();
    }
    const std::string indexName = fs::path(loc.index).filename().string();
    shardFindings(set, *scans, indexName);

    std::vector<std::string> absent;
    for (const auto& [name, shard] : wanted) {
        if (!set.shardRead(shard)) {
            continue;
        }
        auto& names = (*scans)[shard].byName;
        const auto it = names.find(name);
        if (it == names.end()) {
            absent.push_back(name + " (" + set.shardFiles[shard] + ")");
            continue;
        }
        set.tensors.push_back(std::move(it->second));
        names.erase(it);
    }
    restoreTiedNames(set, meta, wanted);
    set.config = setConfig(set);
    restoreConfigTies(set);
    if (!absent.empty()) {
        set.findings.push_back(
            {{"index-missing-tensor", diagnose::Severity::Error, "The index names tensors its shards do not hold",
              std::to_string(absent.size()) +
                  " weight_map entries point at a shard without that tensor: " + listSome(absent) +
                  ". transformers loads the shards and leaves these weights at their random initialisation "
                  "(\"Some weights of ... were not initialized from the model checkpoint ... and are newly "
                  "initialized\"). Re-download the shard, or rebuild the index from the shards.",
              absent}});
    }
    std::vector<std::string> unlisted;
    for (std::size_t i = 0; i < scans->size(); ++i) {
        for (const auto& [name, t] : (*scans)[i].byName) {
            unlisted.push_back(name + " (" + set.shardFiles[i] + ")");
        }
    }
    std::sort(unlisted.begin(), unlisted.end());
    totalSizeFinding(set, meta, indexName, absent.empty() && unlisted.empty());
    if (!unlisted.empty()) {
        set.findings.push_back(
            {{"index-unlisted-tensor", diagnose::Severity::Warning, "Shards hold tensors the index does not list",
              std::to_string(unlisted.size()) + " tensors are in a shard but not in weight_map: " + listSome(unlisted) +
                  ". Loaders that go by the index never see them; consolidation leaves them out.",
              unlisted}});
    }
    return set;
}

}  // namespace

}  // namespace ckpt::sharded
