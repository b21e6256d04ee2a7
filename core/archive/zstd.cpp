#include "archive/zstd.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <zstd.h>

namespace ckpt::archive {
namespace {

struct FreeDctx {
    void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

}  // namespace

bool looksLikeZstd(Bytes b)
{
    return b.size() >= 4 && std::memcmp(b.data(), "\x28\xb5\x2f\xfd", 4) == 0;
}

std::optional<ZstdFrameInfo> zstdFrameInfo(Bytes in)
{
    if (!looksLikeZstd(in)) {
        return std::nullopt;
    }
    const std::size_t stored = ZSTD_findFrameCompressedSize(in.data(), in.size());
    if (ZSTD_isError(stored) != 0U) {
        return std::nullopt;
    }
    ZstdFrameInfo info{stored, std::nullopt};
    const unsigned long long content = ZSTD_getFrameContentSize(in.data(), in.size());
    if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != ZSTD_CONTENTSIZE_ERROR) {
        info.content = content;
    }
    return info;
}

Expected<std::uint64_t> unzstdFrame(Bytes in, std::uint64_t limit, const std::function<bool(Bytes)>& sink,
                                    std::size_t chunk)
{
    if (!looksLikeZstd(in)) {
        return makeError(ErrorCode::Corrupt, "is no zstd frame (no 28 b5 2f fd magic number)");
    }
    // What the header claims is refused before anything is inflated; what it does not record
    // (DCP's stream writer never does) is held to the limit as it comes out.
    const unsigned long long claimed = ZSTD_getFrameContentSize(in.data(), in.size());
    if (claimed != ZSTD_CONTENTSIZE_UNKNOWN && claimed != ZSTD_CONTENTSIZE_ERROR && claimed > limit) {
        return makeError(ErrorCode::Limit, "its zstd frame says it holds " + humanBytes(claimed) + ", more than the " +
                                               humanBytes(limit) +
                                               " it can hold: a decompression bomb or a damaged "
                                               "frame; not inflated");
    }
    const std::unique_ptr<ZSTD_DCtx, FreeDctx> dctx(ZSTD_createDCtx());
    if (!dctx) {
        return makeError(ErrorCode::OutOfMemory, "libzstd could not start inflating");
    }
    // libzstd's default window limit (ZSTD_WINDOWLOG_LIMIT_DEFAULT, 2^27, declared only for static
    // linking), said explicitly: a frame asking for a larger window is refused rather than allocated.
    constexpr int kWindowLogMax = 27;
    ZSTD_DCtx_setParameter(dctx.get(), ZSTD_d_windowLogMax, kWindowLogMax);
    std::vector<std::byte> buffer(std::max<std::size_t>(chunk, 1));
    ZSTD_inBuffer src{in.data(), in.size(), 0};
    std::uint64_t produced = 0;
    while (true) {
        ZSTD_outBuffer dst{buffer.data(), buffer.size(), 0};
        const std::size_t before = src.pos;
        const std::size_t ret = ZSTD_decompressStream(dctx.get(), &dst, &src);
        if (ZSTD_isError(ret) != 0U) {
            return makeError(ErrorCode::Corrupt,
                             std::string("its zstd frame is damaged (libzstd: ") + ZSTD_getErrorName(ret) + ")",
                             static_cast<std::uint64_t>(src.pos));
        }
        if (dst.pos > limit - produced) {
            return makeError(ErrorCode::Limit, "its zstd frame inflates past the " + humanBytes(limit) +
                                                   " it can hold: a decompression bomb or a damaged frame");
        }
        produced += dst.pos;
        if (dst.pos > 0 && !sink(Bytes(buffer.data(), dst.pos))) {
            return makeError(ErrorCode::Cancelled, "cancelled");
        }
        if (ret == 0) {
            return produced;  // the first frame is whole (and its checksum, when it has one, checked)
        }
        if (src.pos == src.size && dst.pos < dst.size) {
            return makeError(ErrorCode::Truncated, "its zstd frame ends early: it was cut short",
                             static_cast<std::uint64_t>(in.size()));
        }
        if (dst.pos == 0 && src.pos == before) {
            return makeError(ErrorCode::Corrupt, "its zstd frame makes no progress",
                             static_cast<std::uint64_t>(src.pos));
        }
    }
}

Expected<std::vector<std::byte>> unzstdFrame(Bytes in, std::uint64_t limit)
{
    std::vector<std::byte> out;
    auto r = unzstdFrame(in, limit, [&](Bytes piece) {
        out.insert(out.end(), piece.begin(), piece.end());
        return true;
    });
    if (!r) {
        return r.error();
    }
    return out;
}

}  // namespace ckpt::archive
