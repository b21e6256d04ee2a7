#include "archive/compressed.h"

#include "archive/zinflate.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace ckpt::archive {
namespace {

bool startsWith(Bytes b, std::string_view magic)
{
    return b.size() >= magic.size() && std::memcmp(b.data(), magic.data(), magic.size()) == 0;
}

}  // namespace

Compression sniffCompression(Bytes file)
{
    if (startsWith(file, "\x1f\x8b")) {
        return Compression::Gzip;
    }
    if (startsWith(file, "\x28\xb5\x2f\xfd")) {
        return Compression::Zstd;
    }
    if (startsWith(file, std::string_view("\xfd\x37\x7a\x58\x5a\x00", 6))) {
        return Compression::Xz;
    }
    if (startsWith(file, "BZh") && file.size() > 3) {
        const auto level = std::to_integer<char>(file[3]);
        if (level >= '1' && level <= '9') {
            return Compression::Bzip2;
        }
    }
    return Compression::None;
}

std::string_view compressionName(Compression c)
{
    switch (c) {
    case Compression::Gzip:
        return "gzip";
    case Compression::Zstd:
        return "zstd";
    case Compression::Xz:
        return "xz";
    case Compression::Bzip2:
        return "bzip2";
    case Compression::None:
        break;
    }
    return "";
}

std::string_view decompressCommand(Compression c)
{
    switch (c) {
    case Compression::Gzip:
        return "gunzip";
    case Compression::Zstd:
        return "zstd -d";
    case Compression::Xz:
        return "unxz";
    case Compression::Bzip2:
        return "bunzip2";
    case Compression::None:
        break;
    }
    return "";
}

Expected<std::vector<std::byte>> gunzip(Bytes file, std::uint64_t limit)
{
    std::vector<std::byte> out;
    constexpr std::size_t kChunk = std::size_t{1} << 20;
    Bytes rest = file;
    // A file may hold several members back to back (`cat a.gz b.gz`); gunzip joins them.
    while (!rest.empty()) {
        ZInflate gz(16 + MAX_WBITS);  // gzip framing
        if (!gz.ok()) {
            return makeError(ErrorCode::OutOfMemory, "zlib could not start inflating");
        }
        z_stream& zs = gz.stream();
        // zlib takes at most 4 GiB of input per call: a bigger file is fed in pieces.
        std::size_t fed = 0;
        auto refill = [&] {
            const std::size_t feed = std::min<std::size_t>(rest.size() - fed, std::numeric_limits<uInt>::max());
            // NOLINTNEXTLINE: zlib's API is not const
            zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(rest.data() + fed));
            zs.avail_in = static_cast<uInt>(feed);
            fed += feed;
        };
        refill();
        int rc = Z_OK;
        while (rc != Z_STREAM_END) {
            if (zs.avail_in == 0 && fed < rest.size()) {
                refill();
            }
            if (out.size() >= limit) {
                return makeError(ErrorCode::Limit,
                                 "inflates past " + humanBytes(limit) + ", more than ckptscope holds in memory for it");
            }
            const std::size_t at = out.size();
            const std::size_t room = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, limit - at));
            out.resize(at + room);
            zs.next_out = reinterpret_cast<Bytef*>(out.data() + at);
            zs.avail_out = static_cast<uInt>(room);
            rc = inflate(&zs, Z_NO_FLUSH);
            out.resize(at + room - zs.avail_out);
            if (rc == Z_BUF_ERROR && zs.avail_in == 0 && fed == rest.size()) {
                return makeError(ErrorCode::Truncated, "the gzip stream ends early: the file is truncated",
                                 file.size());
            }
            if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
                return makeError(ErrorCode::Corrupt,
                                 std::string("the gzip stream is damaged (zlib: ") + (zs.msg ? zs.msg : "error") + ")",
                                 static_cast<std::uint64_t>(file.size() - rest.size() + (fed - zs.avail_in)));
            }
        }
        const std::size_t used = fed - zs.avail_in;
        rest = rest.subspan(used);
        // gzip ignores zero padding after the last member (tape blocks); so does ckptscope.
        if (!rest.empty() && !startsWith(rest, "\x1f\x8b")) {
            if (std::all_of(rest.begin(), rest.end(), [](std::byte b) { return b == std::byte{0}; })) {
                break;
            }
            return makeError(ErrorCode::Corrupt, "trailing bytes after the gzip stream are not another gzip member",
                             static_cast<std::uint64_t>(file.size() - rest.size()));
        }
    }
    return out;
}

}  // namespace ckpt::archive
