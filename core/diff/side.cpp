// What a diff side is made of: one file, or a set opened as one checkpoint (sharded/set_view.h: a
// Hugging Face set or a ZeRO folder, read in place). Sets whose tensors are boxes spread over files
// (DCP, FSDP ranks) are assembled first, as convert does.
#include "diff/diff.h"
#include "sharded/listing.h"
#include "sharded/set_view.h"

#include <filesystem>

namespace ckpt::diff {

namespace {

// The first error finding of an incomplete set, which a comparison cannot read whole.
Expected<void> checkComplete(const std::string& path, const std::vector<sharded::SetFinding>& findings)
{
    for (const auto& f : findings) {
        if (f.severity == diagnose::Severity::Error) {
            Error e = makeError(ErrorCode::Corrupt, "the sharded set is incomplete: " + f.title + " (ckptscope check " +
                                                        path + " says more)");
            e.path = path;
            return e;
        }
    }
    return {};
}

// A set opened as one checkpoint, its bytes read from its files as they are compared.
Expected<Side> viewSide(const std::string& path, Expected<CheckpointPtr> view, std::string format)
{
    if (!view) {
        Error e = view.error();
        e.path = e.path.empty() ? path : e.path;
        return e;
    }
    Side s = Side::of(std::move(*view));
    s.path = path;
    s.format = std::move(format);
    return s;
}

// A Hugging Face set that is no one checkpoint (a shard holds a tensor no consolidation writes,
// such as a quantized one): each shard a part of the side, all held open, as each tensor lives
// whole in one shard.
Side ofShards(const std::string& path, const sharded::ShardedSet& set, std::string format)
{
    Side s;
    s.path = path;
    s.format = std::move(format);
    for (std::size_t i = 0; i < set.shardFiles.size(); ++i) {
        auto shard = set.shardRead(i) ? set.shard(i) : Expected<CheckpointPtr>(CheckpointPtr());
        s.parts.push_back(shard ? *shard : nullptr);
    }
    return s;
}

Expected<Side> hfSide(const std::string& path, const sharded::SetLocation& loc)
{
    auto set = sharded::openSet(loc);
    if (!set) {
        return set.error();
    }
    if (auto done = checkComplete(path, set->findings); !done) {
        return done.error();
    }
    const std::string ext = set->shardFiles.empty() ? "" : std::filesystem::path(set->shardFiles.front()).extension();
    std::string format = "huggingface set (" + std::to_string(set->shardFiles.size()) + " shards" +
                         (ext.empty() ? "" : ", " + ext.substr(1)) + ")";
    auto view = sharded::viewOf(*set);
    if (!view && view.error().code == ErrorCode::Unsupported) {
        return ofShards(path, *set, std::move(format));
    }
    return viewSide(path, std::move(view), std::move(format));
}

Expected<Side> zeroSide(const std::string& path, const sharded::SetLocation& loc)
{
    auto set = sharded::zero::open(loc);
    if (!set) {
        return set.error();
    }
    if (auto done = checkComplete(path, set->findings); !done) {
        return done.error();
    }
    return viewSide(path, sharded::viewOf(*set),
                    std::string(sharded::setKindName(loc.kind)) + " (" + std::to_string(set->files.size()) +
                        " files, the fp32 model zero_to_fp32 rebuilds)");
}

// A set whose tensors are boxes in several files (DCP, FSDP ranks), compared as the state dict
// `convert` writes from it, each tensor assembled from its boxes as it is read.
Expected<Side> boxSide(const std::string& path, const sharded::SetLocation& loc)
{
    return viewSide(path, sharded::openView(loc),
                    std::string(sharded::setKindName(loc.kind)) + " (assembled into one state dict)");
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
    if (loc.kind == sharded::SetKind::HuggingFace) {
        return hfSide(path, loc);
    }
    if (loc.kind == sharded::SetKind::DeepSpeedZero) {
        return zeroSide(path, loc);
    }
    return boxSide(path, loc);
}

}  // namespace ckpt::diff
