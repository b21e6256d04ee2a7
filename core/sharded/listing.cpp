#include "sharded/listing.h"

#include <filesystem>
#include <numeric>

namespace ckpt::sharded {

std::uint64_t SetListing::totalBytes() const
{
    return std::accumulate(rows.begin(), rows.end(), std::uint64_t{0},
                           [](std::uint64_t sum, const SetRow& r) { return sum + r.nbytes; });
}

bool readAsSet(const SetLocation& loc, const std::string& path)
{
    std::error_code ec;
    const bool file = std::filesystem::is_regular_file(path, ec);
    return loc.kind != SetKind::None && loc.kind != SetKind::TrainerFolder &&
           !(file && loc.kind == SetKind::DeepSpeedZero);
}

Expected<SetListing> listSet(const SetLocation& loc)
{
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
    for (const auto& t : set->tensors) {
        const TensorEntry& e = set->entry(t);
        l.rows.push_back({t.name, e.dtype, e.shape, e.location, e.nbytes, set->shardFiles.at(t.shard)});
    }
    return l;
}

Expected<ConsolidateResult> consolidateSet(const SetLocation& loc, const std::string& outPath)
{
    // Stage 1/2 keeps one model-states file; stage 3's per-rank ones are openSet's to name.
    std::error_code ec;
    if (loc.kind == SetKind::DeepSpeedZero &&
        std::filesystem::is_regular_file(std::filesystem::path(loc.index) / "mp_rank_00_model_states.pt", ec)) {
        return consolidateZero12(loc, outPath);
    }
    auto set = openSet(loc);
    if (!set) {
        return set.error();
    }
    return consolidateTorch(*set, outPath);
}

}  // namespace ckpt::sharded
