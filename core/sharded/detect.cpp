// Which multi-file format a path belongs to, from file names alone (docs/format.md §16.1): nothing is
// parsed here except a Hugging Face index, to learn which index lists a given shard.
#include "sharded/dcp.h"
#include "sharded/formats.h"
#include "sharded/fsdp.h"
#include "sharded/probes.h"
#include "sharded/sharded.h"
#include "sharded/zero.h"
#include "util/bytes.h"
#include "write/targets.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <system_error>

namespace ckpt::sharded {

namespace fs = std::filesystem;

namespace {

bool isFile(const fs::path& p)
{
    std::error_code ec;
    return fs::is_regular_file(p, ec);
}

bool isDir(const fs::path& p)
{
    std::error_code ec;
    return fs::is_directory(p, ec);
}

// Sorted, so the same folder always gives the same answer.
std::vector<fs::path> entries(const fs::path& dir)
{
    std::vector<fs::path> out;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        out.push_back(it->path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

bool endsWith(std::string_view s, std::string_view tail)
{
    return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// huggingface_hub's shard names (docs/format.md §16.2): {stem}-{i:05d}-of-{N:05d}{ext}.
bool isHfShardName(const std::string& name)
{
    static const std::regex re(R"(^.+-[0-9]{5}-of-[0-9]{5}\.(bin|safetensors)$)");
    return std::regex_match(name, re);
}

std::vector<fs::path> hfIndexes(const fs::path& dir)
{
    std::vector<fs::path> out;
    for (const auto& p : entries(dir)) {
        if (endsWith(p.filename().string(), ".index.json") && isFile(p)) {
            out.push_back(p);
        }
    }
    return out;
}

// The index whose weight_map names `shard`; transformers' variants (`model.safetensors.index.fp16.json`)
// and renamed indexes make guessing the name from the shard's unreliable.
std::optional<fs::path> indexListing(const fs::path& dir, const std::string& shard)
{
    std::error_code ec;
    for (const auto& p : entries(dir)) {
        const std::string n = p.filename().string();
        if (!endsWith(n, ".json") || n.find(".index") == std::string::npos || fs::file_size(p, ec) > (64U << 20)) {
            continue;
        }
        const auto names = detail::indexShardNames(p.string());
        if (std::find(names.begin(), names.end(), shard) != names.end()) {
            return p;
        }
    }
    return std::nullopt;
}

bool isZeroFile(const std::string& n)
{
    static const std::regex re(
        R"(^((bf16_)?zero_pp_rank_[0-9]+_mp_rank_[0-9]+_(optim|model)_states|mp_rank_[0-9]+_model_states)\.pt$)");
    return std::regex_match(n, re);
}

}  // namespace

namespace detail {

std::optional<SetLocation> hfAt(const fs::path& p)
{
    if (isDir(p)) {
        auto idx = hfIndexes(p);
        if (idx.empty()) {
            return std::nullopt;
        }
        return SetLocation{SetKind::HuggingFace, p.string(), idx.front().string(),
                           "Hugging Face sharded checkpoint (" + idx.front().filename().string() + ")"};
    }
    const std::string name = p.filename().string();
    if (endsWith(name, ".index.json")) {
        return SetLocation{SetKind::HuggingFace, p.parent_path().string(), p.string(),
                           "Hugging Face sharded checkpoint (" + name + ")"};
    }
    if (isHfShardName(name)) {
        const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
        if (auto idx = indexListing(dir, name)) {
            return SetLocation{SetKind::HuggingFace, dir.string(), idx->string(),
                               "Hugging Face sharded checkpoint (" + idx->filename().string() + ")"};
        }
    }
    return std::nullopt;
}

// A DeepSpeed save_dir (with `latest`), or one of its tag folders, or a file in one.
std::optional<SetLocation> deepspeedAt(const fs::path& p)
{
    fs::path dir = isDir(p) ? p : (p.has_parent_path() ? p.parent_path() : fs::path("."));
    if (!isDir(p) && !isZeroFile(p.filename().string()) && p.filename() != "latest") {
        return std::nullopt;
    }
    fs::path tag = dir;
    if (isFile(dir / "latest") && !zero::latestOf(dir.string())) {
        // Never read: zero::open refuses the folder, naming where `latest` leads.
        return SetLocation{SetKind::DeepSpeedZero, dir.string(), dir.string(), "DeepSpeed ZeRO checkpoint"};
    }
    if (isFile(dir / "latest")) {
        auto text = readSmallFile((dir / "latest").string(), zero::kMaxLatestBytes);
        const std::string t = text ? zero::tagIn(*text) : std::string();
        // A tag that is no plain child name (`..`, `.`, `../x`) would make the set its parent's or
        // a neighbour's files: it is kept as named, and zero::open refuses it in a sentence.
        if (text && !zero::isChildTag(t)) {
            return SetLocation{SetKind::DeepSpeedZero, dir.string(), (dir / t).string(),
                               "DeepSpeed ZeRO checkpoint (latest names '" + t + "')"};
        }
        if (!t.empty() && isDir(dir / t)) {
            tag = dir / t;
        }
    }
    int optim = 0;
    int model = 0;
    bool stage3 = false;
    bool bf16 = false;
    for (const auto& e : entries(tag)) {
        const std::string n = e.filename().string();
        if (!isZeroFile(n)) {
            continue;
        }
        if (endsWith(n, "_optim_states.pt")) {
            ++optim;
            bf16 = bf16 || n.rfind("bf16_", 0) == 0;
        } else {
            ++model;
            stage3 = stage3 || n.rfind("zero_pp_rank_", 0) == 0;
        }
    }
    // A lone model-states file (the partitions not fetched) is what its user has: the stage 1/2
    // file holds the whole 16-bit `module`. Only a folder with optimizer states makes a file part
    // of a set to open.
    if ((optim == 0 && model == 0) || (optim == 0 && !isDir(p))) {
        return std::nullopt;
    }
    std::string what = "DeepSpeed ZeRO";
    what += stage3 ? " stage 3" : " stage 1/2";
    what += " checkpoint, tag " + tag.filename().string() + ": " + std::to_string(model) + " model-state and " +
            std::to_string(optim) + " optimizer-state rank files" + (bf16 ? " (bf16 optimizer)" : "");
    return SetLocation{SetKind::DeepSpeedZero, dir.string(), tag.string(), what};
}

std::optional<SetLocation> dcpAt(const fs::path& p)
{
    const fs::path dir = isDir(p) ? p : (p.has_parent_path() ? p.parent_path() : fs::path("."));
    const std::string n = p.filename().string();
    auto rankMetadata = [](const std::string& name) { return dcp::rankOfMetadata(name).has_value(); };
    if (!isDir(p) && n != ".metadata" && !endsWith(n, ".distcp") && !rankMetadata(n)) {
        return std::nullopt;
    }
    int data = 0;
    int perRank = 0;
    for (const auto& e : entries(dir)) {
        data += endsWith(e.filename().string(), ".distcp") ? 1 : 0;
        perRank += rankMetadata(e.filename().string()) ? 1 : 0;
    }
    if (!isFile(dir / ".metadata") && data == 0 && perRank == 0) {
        return std::nullopt;
    }
    const bool megatron = isFile(dir / "common.pt") || isFile(dir / "metadata.json");
    std::string what = megatron ? "Megatron-LM torch_dist checkpoint (a DCP directory)"
                                : "torch.distributed.checkpoint (DCP) directory";
    what += ": " +
            (isFile(dir / ".metadata") ? std::string(".metadata and ")
             : perRank > 0             ? std::to_string(perRank) + " per-rank __R.metadata files and "
                                       : std::string("no .metadata, ")) +
            std::to_string(data) + " .distcp data files";
    return SetLocation{SetKind::Dcp, dir.string(), (dir / ".metadata").string(), what};
}

std::optional<SetLocation> megatronAt(const fs::path& p)
{
    // From the save dir, an iter_N folder, an mp_rank folder or a model_optim_rng.pt file upwards.
    fs::path d = isDir(p) ? p : (p.has_parent_path() ? p.parent_path() : fs::path("."));
    if (!isDir(p) && p.filename() != "model_optim_rng.pt" && p.filename() != "distrib_optim.pt") {
        return std::nullopt;
    }
    for (int up = 0; up < 3 && !d.empty(); ++up, d = d.parent_path()) {
        if (isFile(d / "latest_checkpointed_iteration.txt")) {
            return SetLocation{SetKind::Megatron, d.string(), (d / "latest_checkpointed_iteration.txt").string(),
                               "Megatron-LM legacy checkpoint (latest_checkpointed_iteration.txt, "
                               "iter_N/mp_rank_TT/model_optim_rng.pt)"};
        }
        if (d == d.parent_path()) {
            break;
        }
    }
    // A lone rank file without its save dir is a plain torch.save file: open it as one.
    return std::nullopt;
}

// Rank files by name, confirmed by their pickle naming ShardedTensor or DTensor; a folder goes by
// its first such file and the siblings named like it.
std::optional<SetLocation> fsdpAt(const fs::path& p)
{
    std::vector<fs::path> candidates;
    if (isDir(p)) {
        candidates = entries(p);
    } else {
        candidates.push_back(p);
    }
    for (const auto& c : candidates) {
        const auto name = fsdp::rankFileName(c.filename().string());
        if (!name || !isFile(c) || !fsdp::namesShardedTensors(c.string())) {
            continue;
        }
        const fs::path dir = c.has_parent_path() ? c.parent_path() : fs::path(".");
        int files = 0;
        for (const auto& e : entries(dir)) {
            const auto other = fsdp::rankFileName(e.filename().string());
            files += other && other->first == name->first ? 1 : 0;
        }
        return SetLocation{SetKind::FsdpRanks, dir.string(), c.string(),
                           "FSDP per-rank state dicts (" + std::to_string(files) + " files " + name->first + ")"};
    }
    return std::nullopt;
}

// accelerate's save_state under FSDP with SHARDED_STATE_DICT leaves one DCP folder per model
// (`pytorch_model_fsdp_N`) and per optimizer (`optimizer_N`) beside its RNG and scheduler pickles
// (accelerate/utils/fsdp_utils.py save_fsdp_model/save_fsdp_optimizer): the folder opens as its
// first model.
std::optional<SetLocation> accelerateAt(const fs::path& p)
{
    if (!isDir(p)) {
        return std::nullopt;
    }
    std::vector<std::string> models;
    std::vector<std::string> optimizers;
    for (const auto& e : entries(p)) {
        const std::string n = e.filename().string();
        if (isDir(e) && n.rfind("pytorch_model_fsdp_", 0) == 0 && dcpAt(e)) {
            models.push_back(n);
        } else if (isDir(e) && n.rfind("optimizer_", 0) == 0 && dcpAt(e)) {
            optimizers.push_back(n);
        }
    }
    if (models.empty()) {
        return std::nullopt;
    }
    std::sort(models.begin(), models.end());
    auto loc = dcpAt(p / models.front());
    std::string note = "accelerate save_state folder, model " + models.front();
    if (models.size() > 1) {
        note += " (of " + std::to_string(models.size()) + " models: name another folder to open it)";
    }
    if (!optimizers.empty()) {
        note += "; the optimizer state is the DCP folder " + optimizers.front();
    }
    loc->what = note + "; " + loc->what;
    return loc;
}

}  // namespace detail

namespace detail {

namespace {

// The set's folder, "." for a set named without one.
fs::path folderOf(const SetLocation& loc)
{
    return loc.dir.empty() ? fs::path(".") : fs::path(loc.dir);
}

// `paths` that exist (a dangling link counts: writing over it would still replace a member).
std::vector<std::string> existing(const std::vector<fs::path>& paths)
{
    std::vector<std::string> out;
    for (const auto& p : paths) {
        std::error_code ec;
        if (fs::exists(fs::symlink_status(p, ec))) {
            out.push_back(p.string());
        }
    }
    return out;
}

// The folder's entries whose names `keep` accepts.
template <class Keep> std::vector<fs::path> entriesNamed(const fs::path& dir, const Keep& keep)
{
    std::vector<fs::path> out;
    for (const auto& e : entries(dir)) {
        if (keep(e.filename().string())) {
            out.push_back(e);
        }
    }
    return out;
}

}  // namespace

std::vector<std::string> hfFiles(const SetLocation& loc)
{
    std::vector<fs::path> paths{loc.index};
    for (const auto& name : indexShardNames(loc.index)) {
        paths.push_back(folderOf(loc) / name);
    }
    return existing(paths);
}

std::vector<std::string> deepspeedFiles(const SetLocation& loc)
{
    auto paths = entriesNamed(loc.index, [](const std::string& n) { return isZeroFile(n); });
    paths.insert(paths.begin(), folderOf(loc) / "latest");
    return existing(paths);
}

std::vector<std::string> dcpFiles(const SetLocation& loc)
{
    return existing(entriesNamed(folderOf(loc), [](const std::string& n) {
        return n == ".metadata" || endsWith(n, ".distcp") || dcp::rankOfMetadata(n) || n == "common.pt" ||
               n == "metadata.json";
    }));
}

std::vector<std::string> fsdpFiles(const SetLocation& loc)
{
    const auto stem = fsdp::rankFileName(fs::path(loc.index).filename().string());
    return existing(entriesNamed(folderOf(loc), [&](const std::string& n) {
        const auto name = fsdp::rankFileName(n);
        return name && stem && name->first == stem->first;
    }));
}

std::vector<std::string> indexFile(const SetLocation& loc)
{
    return loc.index.empty() ? std::vector<std::string>{} : existing({loc.index});
}

}  // namespace detail

Expected<void> checkOutputOutsideSet(const SetLocation& loc, const std::string& output)
{
    if (loc.kind == SetKind::None) {
        return {};
    }
    auto target = write::resolveTarget(output);
    if (!target) {
        return target.error();
    }
    const auto members = memberFiles(loc);
    if (const auto hit = write::sameFileAs(*target, members)) {
        Error e = makeError(ErrorCode::Usage, "the output is " + members[*hit] + ", a file of the " +
                                                  std::string(setKindName(loc.kind)) +
                                                  " it is read from, which it would replace; nothing was written "
                                                  "(inputs are never modified)");
        e.path = output;
        return e;
    }
    return {};
}

SetLocation detectSet(const std::string& path)
{
    const fs::path p(path);
    if (!isDir(p) && !isFile(p)) {
        return {};
    }
    // Each format's probe, in the registry's order (formats.cpp).
    for (const auto& format : setFormats()) {
        if (auto loc = format.probe(p)) {
            return *loc;
        }
    }
    return {};
}

}  // namespace ckpt::sharded
