// What a diff side is made of: one file, or every file of a Hugging Face sharded set (each of its
// tensors lives whole in one shard, so the shards together are one key space). Sets whose tensors
// are pieces spread over files (DCP, ZeRO, FSDP ranks) need assembling first, which convert does.
#include "diff/diff.h"
#include "sharded/listing.h"

#include <filesystem>

namespace ckpt::diff {

namespace {

Side ofSet(const std::string& path, sharded::ShardedSet&& set)
{
    Side s;
    s.path = path;
    const std::string ext = set.shardFiles.empty() ? "" : std::filesystem::path(set.shardFiles.front()).extension();
    s.format = "huggingface set (" + std::to_string(set.shards.size()) + " shards" +
               (ext.empty() ? "" : ", " + ext.substr(1)) + ")";
    s.parts = std::move(set.shards);
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
        Error e = makeError(ErrorCode::Unsupported,
                            "is a " + std::string(sharded::setKindName(loc.kind)) +
                                ", whose tensors are pieces spread over several files; diff compares single files "
                                "and Hugging Face sharded sets: consolidate it first with `ckptscope convert " +
                                path + " -o model.pt`");
        e.path = path;
        return e;
    }
    auto set = sharded::openSet(loc);
    if (!set) {
        return set.error();
    }
    for (const auto& f : set->findings) {
        if (f.severity == "error") {
            Error e = makeError(ErrorCode::Corrupt, "the sharded set is incomplete: " + f.title + " (ckptscope check " +
                                                        path + " says more)");
            e.path = path;
            return e;
        }
    }
    return ofSet(path, std::move(*set));
}

}  // namespace ckpt::diff
