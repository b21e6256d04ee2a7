// What says a file is still the one that was read: its inode, size and modification time. A set
// closes its members between reads (the descriptor limit is far below a set's file count) and
// compares this when it opens one again, so a member replaced or rewritten meanwhile is an error,
// never bytes of another file read as if they were the first ones. (Kept out of util/bytes.h,
// which nearly every file includes.)
#pragma once

#include <cstdint>
#include <optional>
#include <sys/stat.h>

namespace ckpt {

struct FileIdentity {
    std::uint64_t dev = 0;
    std::uint64_t ino = 0;
    std::uint64_t size = 0;
    std::int64_t mtimeNs = 0;
    bool operator==(const FileIdentity&) const = default;
};

inline FileIdentity identityOf(const struct stat& st)
{
    return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
            static_cast<std::uint64_t>(st.st_size),
            static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// The identity of the open file `fd` (a mapping's descriptor), nullopt when fstat fails.
inline std::optional<FileIdentity> identityOfFd(int fd)
{
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
        return std::nullopt;
    }
    return identityOf(st);
}

}  // namespace ckpt
