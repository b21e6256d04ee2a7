#include "sharded/temp_consolidated.h"

#include "sharded/listing.h"
#include "write/output_file.h"
#include "write/targets.h"

#include <cerrno>
#include <cstdlib>
#include <unistd.h>
#include <utility>

namespace ckpt::sharded {

Expected<TempConsolidated> TempConsolidated::write(const std::string& dir, const std::string& tag,
                                                   const Writer& consolidate)
{
    const std::string where = dir.empty() ? std::string(".") : dir;
    std::string pattern = write::detail::tempPrefix(where, tag) + std::to_string(::getpid()) + "-XXXXXX";
    const int fd = ::mkstemp(pattern.data());
    if (fd < 0) {
        return write::detail::writeError(where, "cannot create a temporary file for the consolidated set", errno);
    }
    ::close(fd);
    TempConsolidated t(pattern, write::detail::registerTemp(pattern));
    auto done = consolidate(t.path_);
    if (!done) {
        return done.error();
    }
    t.result_ = std::move(*done);
    return t;
}

Expected<TempConsolidated> TempConsolidated::write(const SetLocation& loc, const std::string& dir,
                                                   const std::string& tag)
{
    return write(dir, tag, [&loc](const std::string& path) { return consolidateSet(loc, path); });
}

TempConsolidated::TempConsolidated(TempConsolidated&& o) noexcept
    : path_(std::exchange(o.path_, {})), slot_(std::exchange(o.slot_, -1)), result_(std::move(o.result_))
{
}

TempConsolidated::~TempConsolidated()
{
    remove();
}

void TempConsolidated::remove()
{
    if (!path_.empty()) {
        ::unlink(path_.c_str());
        path_.clear();
    }
    write::detail::unregisterTemp(std::exchange(slot_, -1));
}

Expected<CheckpointPtr> TempConsolidated::openAndRemove()
{
    auto opened = openCheckpoint(path_);
    remove();
    return opened;
}

}  // namespace ckpt::sharded
