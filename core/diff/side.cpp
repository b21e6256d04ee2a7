// What a diff side is made of: one file, or every file of a Hugging Face sharded set (each of its
// tensors lives whole in one shard, so the shards together are one key space). Sets whose tensors
// are pieces spread over files (DCP, ZeRO, FSDP ranks) are assembled first, as convert does.
#include "diff/diff.h"
#include "sharded/listing.h"
#include "sharded/temp_consolidated.h"

#include <filesystem>

namespace ckpt::diff {

namespace {

Side ofSet(const std::string& path, sharded::ShardedSet&& set)
{
    Side s;
    s.path = path;
    const std::string ext = set.shardFiles.empty() ? "" : std::filesystem::path(set.shardFiles.front()).extension();
    s.format = "huggingface set (" + std::to_string(set.shardFiles.size()) + " shards" +
               (ext.empty() ? "" : ", " + ext.substr(1)) + ")";
    // A diff compares every tensor's bytes, so it holds every shard open (the set itself keeps few).
    for (std::size_t i = 0; i < set.shardFiles.size(); ++i) {
        auto shard = set.shardRead(i) ? set.shard(i) : Expected<CheckpointPtr>(CheckpointPtr());
        s.parts.push_back(shard ? *shard : nullptr);
    }
    return s;
}

// A set whose tensors are pieces of several files is compared as the one file `convert` writes
// from it: written to the temporary directory and removed as soon as it is mapped, so nothing is
// left behind however the comparison ends.
Expected<Side> consolidatedSide(const std::string& path, const sharded::SetLocation& loc)
{
    std::error_code ec;
    auto whole = sharded::TempConsolidated::write(loc, std::filesystem::temp_directory_path(ec).string(), "diff");
    Expected<CheckpointPtr> opened = whole ? whole->openAndRemove() : Expected<CheckpointPtr>(whole.error());
    if (!opened) {
        Error e = opened.error();
        e.message =
            "cannot assemble the " + std::string(sharded::setKindName(loc.kind)) + " to compare it: " + e.message;
        e.path = path;
        return e;
    }
    Side s = Side::of(std::move(*opened));
    s.path = path;
    s.format = std::string(sharded::setKindName(loc.kind)) + " (assembled into one state dict)";
    return s;
}

}  // namespace

Expected<Side> openSide(const std::string& path)
{
    const auto loc = sharded::detectSet(path);
    if (!sharded::readAsSet(loc, path)) {
        auto c = openCheckpoint(path);
        if (!c) {
            return c.error();
        }
        return Side::of(std::move(*c));
    }
    if (loc.kind != sharded::SetKind::HuggingFace) {
        return consolidatedSide(path, loc);
    }
    auto set = sharded::openSet(loc);
    if (!set) {
        return set.error();
    }
    for (const auto& f : set->findings) {
        if (f.severity == diagnose::Severity::Error) {
            Error e = makeError(ErrorCode::Corrupt, "the sharded set is incomplete: " + f.title + " (ckptscope check " +
                                                        path + " says more)");
            e.path = path;
            return e;
        }
    }
    return ofSet(path, std::move(*set));
}

}  // namespace ckpt::diff
