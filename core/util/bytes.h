// Byte spans and a read-only file mapping: every reader takes a span, so it can be fuzzed from
// memory; the mapping is only how a path becomes a span without copying.
#pragma once

#include "util/error.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <sys/stat.h>

namespace ckpt {

using Bytes = std::span<const std::byte>;

inline std::string_view asText(Bytes b)
{
    return {reinterpret_cast<const char*>(b.data()), b.size()};
}

inline Bytes asBytes(std::string_view s)
{
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// Little-endian loads that never read past the span (callers check the size first).
inline std::uint64_t loadLE(Bytes b, std::size_t at, std::size_t width)
{
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < width; ++i) {
        v |= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(b[at + i])) << (8 * i);
    }
    return v;
}

// The little-endian store that loadLE reads back: `width` bytes of `v` at `at` of `out`.
inline void storeLE(std::span<std::byte> out, std::size_t at, std::uint64_t v, std::size_t width)
{
    for (std::size_t i = 0; i < width; ++i) {
        out[at + i] = static_cast<std::byte>((v >> (8 * i)) & 0xFFU);
    }
}

// A 64-bit hash of bytes (not cryptographic): diff's candidate moved tensors (then compared byte
// for byte) and a quantizer's scale tensors named by content.
[[nodiscard]] std::uint64_t hashBytes(Bytes b);

// Opens `path` for reading only when it is a regular file (symlinks followed), filling `st`; a
// FIFO, socket, device or directory is an Io error saying which, and never blocks the open. The
// caller owns the descriptor.
Expected<int> openRegularFile(const std::string& path, struct stat& st);

// A small regular file (an index, `latest`, config.json) read whole; Limit past `maxBytes`.
Expected<std::string> readSmallFile(const std::string& path, std::uint64_t maxBytes);

// A whole file mapped read-only (MAP_PRIVATE). Empty files map to an empty span.
//
// A file that shrinks while mapped (truncated by another process, a download restarted over it)
// would kill the process with SIGBUS at the first read past its new end. A process-wide SIGBUS
// handler instead maps zero pages over the lost part of any live mapping and remembers it, so the
// read finishes with wrong bytes and the caller asks checkUnchanged() before trusting its result.
class MappedFile {
public:
    static Expected<std::shared_ptr<const MappedFile>> open(const std::string& path);
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    [[nodiscard]] Bytes bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
    [[nodiscard]] const std::string& path() const { return path_; }
    [[nodiscard]] int fd() const { return fd_; }  // kept open for copy_file_range

    // An Io error "changed size while being read" once a read faulted past the file's end or the
    // file is now shorter than when it was mapped; what was read from it since cannot be trusted.
    [[nodiscard]] Expected<void> checkUnchanged() const;

private:
    MappedFile() = default;
    std::string path_;
    void* data_ = nullptr;
    std::size_t size_ = 0;
    int fd_ = -1;
    int guardSlot_ = -1;  // this mapping's slot in the SIGBUS handler's table
};

// "1.5 GiB", "512 B": binary units, one decimal above KiB.
[[nodiscard]] std::string humanBytes(std::uint64_t n);

}  // namespace ckpt
