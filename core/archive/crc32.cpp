#include "archive/zip.h"

#include <algorithm>
#include <zlib.h>

namespace ckpt::archive {

// zlib's crc32 is already linked for inflate and runs at several GB/s (braided since 1.2.12);
// a hand-written table would only be slower. It counts in 32-bit lengths, hence the chunks.
std::uint32_t crc32(Bytes data, std::uint32_t crc)
{
    constexpr std::size_t kChunk = 1U << 30;
    uLong c = crc;
    for (std::size_t at = 0; at < data.size(); at += kChunk) {
        const std::size_t n = std::min(kChunk, data.size() - at);
        c = ::crc32(c, reinterpret_cast<const Bytef*>(data.data() + at), static_cast<uInt>(n));  // NOLINT
    }
    return static_cast<std::uint32_t>(c);
}

}  // namespace ckpt::archive
