// What a diff side is made of: one file, or a set of any format opened as one checkpoint
// (sharded::openView, read in place, each tensor assembled from its files as it is read).
#include "diff/diff.h"
#include "sharded/formats.h"
#include "sharded/listing.h"
#include "sharded/set_view.h"

#include <string>
#include <vector>

namespace ckpt::diff {

namespace {

// A set's side: its parts (the set opened as one checkpoint, or each member file where every
// tensor lives whole in one), named by its kind, how many files it was read from and how.
Side setSide(const std::string& path, const sharded::SetLocation& loc, std::vector<CheckpointPtr> parts,
             std::size_t files, const char* how)
{
    Side s;
    s.path = path;
    s.format = std::string(sharded::setKindName(loc.kind)) + " (" + std::to_string(files) +
               (files == 1 ? " file, " : " files, ") + how + ")";
    s.parts = std::move(parts);
    return s;
}

Error withPath(Error e, const std::string& path)
{
    e.path = e.path.empty() ? path : e.path;
    return e;
}

}  // namespace

Expected<Side> openSide(const std::string& path, const sharded::OpenControl& control)
{
    const auto loc = sharded::wholeSetInput(path);
    if (!loc) {
        auto c = openCheckpoint(path);
        if (!c) {
            return c.error();
        }
        return Side::of(std::move(*c));
    }
    auto view = sharded::openView(*loc, {.groupStorages = true}, control);
    if (view) {
        const std::size_t files = (*view)->setFiles.size();
        return setSide(path, *loc, {std::move(*view)}, files, "assembled into one state dict");
    }
    // A set that is no one checkpoint (a shard holds a tensor no consolidation writes, such as a
    // quantized one) is compared file by file where its format can give its files so.
    const auto* f = sharded::setFormat(loc->kind);
    if (view.error().code == ErrorCode::Unsupported && f != nullptr && f->parts != nullptr) {
        auto parts = f->parts(*loc);
        if (!parts) {
            return withPath(parts.error(), path);
        }
        const std::size_t files = parts->size();
        return setSide(path, *loc, std::move(*parts), files, "compared file by file");
    }
    return withPath(view.error(), path);
}

}  // namespace ckpt::diff
