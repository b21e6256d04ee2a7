// What a diff side is made of: one file, or a set of any format opened as one checkpoint
// (sharded/formats.h readSet, read in place, each tensor assembled from its files as it is read).
#include "diff/diff.h"
#include "sharded/formats.h"
#include "sharded/listing.h"
#include "sharded/set_view.h"

#include <filesystem>

namespace ckpt::diff {

namespace {

// A set opened as one checkpoint, its bytes read from its files as they are compared.
Side viewSide(const std::string& path, CheckpointPtr view, std::string format)
{
    Side s = Side::of(std::move(view));
    s.path = path;
    s.format = std::move(format);
    return s;
}

// A set that is no one checkpoint (a shard holds a tensor no consolidation writes, such as a
// quantized one) whose tensors each live whole in one member file: each file a part of the side,
// all held open.
Side ofParts(const std::string& path, std::vector<CheckpointPtr> parts, std::string format)
{
    Side s;
    s.path = path;
    s.format = std::move(format);
    s.parts = std::move(parts);
    return s;
}

// What the side is, for diff's header: the set's kind and how many files it was read from.
std::string setFormatText(const sharded::SetListing& l, const char* how)
{
    return std::string(sharded::setKindName(l.kind)) + " (" + std::to_string(l.files.size()) +
           (l.files.size() == 1 ? " file, " : " files, ") + how + ")";
}

Error withPath(Error e, const std::string& path)
{
    e.path = e.path.empty() ? path : e.path;
    return e;
}

}  // namespace

Expected<Side> openSide(const std::string& path)
{
    const auto loc = sharded::wholeSetInput(path);
    if (!loc) {
        auto c = openCheckpoint(path);
        if (!c) {
            return c.error();
        }
        return Side::of(std::move(*c));
    }
    auto set = sharded::readSet(*loc);
    if (!set) {
        return withPath(set.error(), path);
    }
    if (set->view) {
        return viewSide(path, std::move(set->view), setFormatText(set->listing, "assembled into one state dict"));
    }
    const auto* f = sharded::setFormat(loc->kind);
    if (set->notWhole->code == ErrorCode::Unsupported && f != nullptr && f->parts != nullptr) {
        auto parts = f->parts(*loc);
        if (!parts) {
            return withPath(parts.error(), path);
        }
        return ofParts(path, std::move(*parts), setFormatText(set->listing, "compared file by file"));
    }
    return withPath(*set->notWhole, path);
}

}  // namespace ckpt::diff
