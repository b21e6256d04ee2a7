#include "sharded/listing.h"

#include "sharded/dcp.h"
#include "sharded/fsdp.h"
#include "sharded/zero.h"

#include <filesystem>
#include <numeric>

namespace ckpt::sharded {

std::uint64_t SetListing::totalBytes() const
{
    return std::accumulate(rows.begin(), rows.end(), std::uint64_t{0},
                           [](std::uint64_t sum, const SetRow& r) { return sum + (r.tiedTo.empty() ? r.nbytes : 0); });
}

bool readAsSet(const SetLocation& loc, const std::string& path)
{
    std::error_code ec;
    const bool file = std::filesystem::is_regular_file(path, ec);
    if (file && loc.kind == SetKind::DeepSpeedZero) {
        return zero::opensAsSet(loc);
    }
    return loc.kind != SetKind::None && !(file && loc.kind == SetKind::FsdpRanks);
}

bool listsAsSet(SetKind kind)
{
    return kind == SetKind::HuggingFace || kind == SetKind::Dcp || kind == SetKind::FsdpRanks ||
           kind == SetKind::DeepSpeedZero;
}

namespace {

std::string chunkFiles(const std::vector<std::string>& names)
{
    std::string s = std::to_string(names.size()) + (names.size() == 1 ? " chunk: " : " chunks: ");
    for (std::size_t i = 0; i < names.size() && i < 4; ++i) {
        s += (i ? ", " : "") + names[i];
    }
    return names.size() > 4 ? s + ", ..." : s;
}

Expected<SetListing> listDcp(const SetLocation& loc)
{
    auto set = dcp::open(loc);
    if (!set) {
        return set.error();
    }
    SetListing l{loc.kind, loc.dir, loc.index, set->meta.files, {}, set->findings};
    for (const auto& t : set->meta.items) {
        if (!t.isTensor) {
            continue;
        }
        std::vector<std::string> names;
        for (const auto& c : t.chunks) {
            names.push_back(c.at.found ? set->meta.files[c.at.file] : std::string("?"));
        }
        l.rows.push_back({t.fqn, t.dtype, t.size, "cpu", t.numel() * elementSize(t.dtype), chunkFiles(names)});
    }
    return l;
}

Expected<SetListing> listFsdp(const SetLocation& loc)
{
    auto set = fsdp::open(loc, false);
    if (!set) {
        return set.error();
    }
    SetListing l{loc.kind, loc.dir, loc.index, {}, {}, set->findings};
    for (const auto& f : set->files) {
        l.files.push_back(std::filesystem::path(f.path).filename().string());
    }
    for (const auto& t : set->tensors) {
        std::vector<std::string> names;
        for (const auto& s : t.shards) {
            names.push_back(l.files[s.file]);
        }
        l.rows.push_back({t.key, t.dtype, t.size, t.device, t.numel() * elementSize(t.dtype), chunkFiles(names)});
    }
    return l;
}

std::string rankFiles(const zero::Set& set, const zero::Tensor& t)
{
    std::vector<std::string> names;
    for (const auto f : t.files) {
        std::error_code ec;
        const bool there = std::filesystem::is_regular_file(std::filesystem::path(set.loc.index) / set.files[f], ec);
        names.push_back(set.files[f] + (set.sources.present(f) ? "" : (there ? " (unreadable)" : " (missing)")));
    }
    std::string s = std::to_string(names.size()) + (names.size() == 1 ? " file: " : " rank files: ");
    for (std::size_t i = 0; i < names.size() && i < 4; ++i) {
        s += (i ? ", " : "") + names[i];
    }
    return names.size() > 4 ? s + ", ..." : s;
}

Expected<SetListing> listZero(const SetLocation& loc)
{
    auto set = zero::open(loc);
    if (!set) {
        return set.error();
    }
    SetListing l{loc.kind, loc.dir, loc.index, set->files, {}, set->findings};
    for (const auto& t : set->tensors) {
        std::string device = "cpu";
        if (!t.pieces.empty()) {
            auto src = set->sources.get(t.pieces.front().source);
            if (!src) {
                return src.error();
            }
            device = (*src)->storages[t.pieces.front().storage].location;
        }
        std::string where = rankFiles(*set, t);
        if (t.aliasOf) {
            where = "shares " + set->tensors[*t.aliasOf].key + " (shared_params)";
        } else if (t.role == "buffer" && t.from != t.dtype) {
            where += " (" + std::string(dtypeName(t.from)) + " buffer, cast to float32)";
        }
        l.rows.push_back({t.key, t.dtype, t.shape, device, t.numel() * elementSize(t.dtype), where,
                          t.aliasOf ? set->tensors[*t.aliasOf].key : std::string()});
    }
    return l;
}

}  // namespace

Expected<SetListing> listSet(const SetLocation& loc)
{
    if (loc.kind == SetKind::Dcp) {
        return listDcp(loc);
    }
    if (loc.kind == SetKind::FsdpRanks) {
        return listFsdp(loc);
    }
    if (loc.kind == SetKind::DeepSpeedZero) {
        return listZero(loc);
    }
    auto set = openSet(loc);
    if (!set) {
        return set.error();
    }
    SetListing l;
    l.kind = set->kind;
    l.dir = set->dir;
    l.index = set->indexPath;
    l.files = set->shardFiles;
    l.findings = set->findings;
    l.rows.reserve(set->tensors.size());
    const auto tied = set->tiedMap();
    for (const auto& t : set->tensors) {
        const TensorEntry& e = t.entry;
        const auto kept = tied.find(t.name);
        l.rows.push_back({t.name, e.dtype, e.shape, e.location, e.nbytes, set->shardFiles.at(t.shard),
                          kept == tied.end() ? std::string() : kept->second});
    }
    return l;
}

Expected<ConsolidateResult> consolidateSet(const SetLocation& loc, const std::string& outPath,
                                           const zero::Options& zeroOptions)
{
    if (auto outside = checkOutputOutsideSet(loc, outPath); !outside) {
        return outside.error();
    }
    if (loc.kind == SetKind::DeepSpeedZero) {
        auto set = zero::open(loc, zeroOptions.weights, zeroOptions.keepOptimizer);
        return set ? zero::consolidate(*set, outPath, zeroOptions.groupStorages)
                   : Expected<ConsolidateResult>(set.error());
    }
    if (loc.kind == SetKind::Dcp) {
        auto set = dcp::open(loc);
        return set ? dcp::consolidate(*set, outPath) : Expected<ConsolidateResult>(set.error());
    }
    if (loc.kind == SetKind::FsdpRanks) {
        auto set = fsdp::open(loc, false);
        return set ? fsdp::consolidate(*set, outPath) : Expected<ConsolidateResult>(set.error());
    }
    auto set = openSet(loc);
    if (!set) {
        return set.error();
    }
    return consolidateTorch(*set, outPath);
}

}  // namespace ckpt::sharded
