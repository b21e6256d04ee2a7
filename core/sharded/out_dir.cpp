#include "sharded/out_dir.h"

#include <cerrno>
#include <cstdio>

namespace ckpt::sharded::detail {

namespace fs = std::filesystem;

namespace {

Error usage(const std::string& path, const std::string& message)
{
    Error e = makeError(ErrorCode::Usage, message);
    e.path = path;
    return e;
}

}  // namespace

// An existing folder takes the set only when no file of it would be replaced or mixed with a
// set of the same stem left from before (transformers would load the stale shards' keys too).
Expected<bool> checkTargetDir(const fs::path& dir, const std::string& stem, const std::string& ext)
{
    std::error_code ec;
    const auto st = fs::symlink_status(dir, ec);
    if (ec || !fs::exists(st)) {
        return false;
    }
    if (!fs::is_directory(fs::status(dir, ec))) {
        return usage(dir.string(), "exists and is not a folder; a sharded set is written into a folder "
                                   "(give a new or empty folder)");
    }
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.starts_with(stem) && (name.ends_with(ext) || name.ends_with(".index.json"))) {
            return usage(dir.string(), "already holds " + name + " of a " + stem +
                                           " set; write the new set into a new or empty folder (nothing was "
                                           "written)");
        }
    }
    return true;
}

Expected<void> moveInto(const TempDir& tmp, const fs::path& dir, bool dirExists, const std::vector<std::string>& files)
{
    if (!dirExists) {
        if (::rename(tmp.path().c_str(), dir.c_str()) != 0) {
            return write::detail::writeError(dir.string(), "cannot rename the written set into place", errno);
        }
        return {};
    }
    // Nothing already there is replaced (checkTargetDir refused what a set of the same stem leaves;
    // this is for any other file that happens to carry a written name, a member of the set being
    // converted included): all are checked before the first move.
    for (const auto& f : files) {
        std::error_code ec;
        if (fs::exists(fs::symlink_status(dir / f, ec))) {
            return usage((dir / f).string(), "already exists and would be replaced by the written set; write it into "
                                             "a new or empty folder (nothing was written)");
        }
    }
    // The index goes last: until it is there, no loader sees a set.
    for (const auto& f : files) {
        const fs::path from = fs::path(tmp.path()) / f;
        if (::rename(from.c_str(), (dir / f).c_str()) != 0) {
            return write::detail::writeError((dir / f).string(), "cannot move the shard into place", errno);
        }
    }
    return {};
}

}  // namespace ckpt::sharded::detail
