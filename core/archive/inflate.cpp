#include "archive/inflate.h"

#include "archive/zinflate.h"

#include <algorithm>
#include <vector>

namespace ckpt::archive {
namespace {

Error recordError(ErrorCode code, const ZipRecord& r, const std::string& what)
{
    return makeError(code, "record \"" + r.name + "\" " + what, r.localHeaderOffset);
}

}  // namespace

std::string methodName(std::uint16_t method)
{
    switch (method) {
    case 0:
        return "stored";
    case 8:
        return "deflate";
    case 9:
        return "deflate64";
    case 12:
        return "bzip2";
    case 14:
        return "LZMA";
    case 93:
        return "zstd";
    case 95:
        return "xz";
    default:
        return "method " + std::to_string(method);
    }
}

Expected<void> readRecord(Bytes file, const ZipRecord& r, std::uint64_t offset, std::uint64_t length,
                          const ChunkSink& sink, std::size_t chunk)
{
    if (offset > r.size || length > r.size - offset) {
        return recordError(ErrorCode::Corrupt, r,
                           "holds " + std::to_string(r.size) + " bytes, fewer than the " +
                               std::to_string(offset + length) + " read from it");
    }
    if (r.dataOffset > file.size() || r.compressedSize > file.size() - r.dataOffset) {
        return recordError(ErrorCode::Truncated, r, "lies past the end of the file (truncated)");
    }
    const Bytes raw = file.subspan(static_cast<std::size_t>(r.dataOffset), static_cast<std::size_t>(r.compressedSize));
    auto cancelled = [] { return makeError(ErrorCode::Cancelled, "cancelled"); };
    if (r.method == 0) {
        if (r.compressedSize != r.size) {
            return recordError(ErrorCode::Corrupt, r, "is stored but declares different sizes");
        }
        for (std::uint64_t at = offset; at < offset + length;) {
            const std::uint64_t n = std::min<std::uint64_t>(chunk, offset + length - at);
            if (!sink(raw.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(n)))) {
                return cancelled();
            }
            at += n;
        }
        return {};
    }
    if (r.method != 8) {
        return recordError(ErrorCode::Unsupported, r,
                           "is compressed with " + methodName(r.method) +
                               ", which torch.load cannot read either (PyTorch reads stored and deflated records)");
    }
    ZInflate inf(-MAX_WBITS);  // raw deflate, as zip records hold it
    if (!inf.ok()) {
        return makeError(ErrorCode::Internal, "zlib inflateInit2 failed");
    }
    z_stream& zs = inf.stream();
    const bool whole = offset == 0 && length == r.size;
    // No bigger than the read needs (a 4-byte storage used to zero a 4 MiB chunk, 30 000 times for
    // a re-zipped checkpoint), nor than `chunk`; a little room past a small record lets a whole
    // read see it inflate to more than it declares.
    constexpr std::uint64_t kMinBuffer = 4096;
    std::vector<std::byte> buffer(static_cast<std::size_t>(
        std::clamp<std::uint64_t>(offset + length, std::min<std::uint64_t>(kMinBuffer, chunk), chunk)));
    std::uint32_t crc = 0;
    std::uint64_t produced = 0;  // uncompressed bytes so far
    std::size_t inPos = 0;
    int rc = Z_OK;
    constexpr std::size_t kInStep = 1U << 30;  // zlib counts in 32-bit uInt
    // A whole read goes on to the stream's end, so a record that inflates to more than it declares
    // is caught; a partial read stops once its range is delivered.
    while (rc != Z_STREAM_END && (whole || produced < offset + length)) {
        if (zs.avail_in == 0 && inPos < raw.size()) {
            const std::size_t n = std::min(raw.size() - inPos, kInStep);
            zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(raw.data() + inPos));  // NOLINT
            zs.avail_in = static_cast<uInt>(n);
            inPos += n;
        }
        zs.next_out = reinterpret_cast<Bytef*>(buffer.data());  // NOLINT
        zs.avail_out = static_cast<uInt>(buffer.size());
        rc = inflate(&zs, Z_NO_FLUSH);
        if (rc == Z_BUF_ERROR) {  // no progress with all input given: the stream is cut short
            return recordError(ErrorCode::Corrupt, r, "ends before its deflate stream does (truncated or corrupt)");
        }
        if (rc != Z_OK && rc != Z_STREAM_END) {
            return recordError(ErrorCode::Corrupt, r,
                               "has a corrupt deflate stream (" +
                                   std::string(zs.msg != nullptr ? zs.msg : "zlib error " + std::to_string(rc)) + ")");
        }
        const std::size_t made = buffer.size() - zs.avail_out;
        if (produced + made > r.size) {
            return recordError(ErrorCode::Corrupt, r,
                               "inflates to more than the " + std::to_string(r.size) + " bytes it declares");
        }
        const Bytes piece{buffer.data(), made};
        if (whole) {
            crc = archive::crc32(piece, crc);
        }
        // The part of this piece inside [offset, offset + length).
        const std::uint64_t begin = std::max(produced, offset);
        const std::uint64_t end = std::min(produced + made, offset + length);
        if (begin < end &&
            !sink(piece.subspan(static_cast<std::size_t>(begin - produced), static_cast<std::size_t>(end - begin)))) {
            return cancelled();
        }
        produced += made;
    }
    if (produced < offset + length) {
        return recordError(ErrorCode::Corrupt, r,
                           "inflates to " + std::to_string(produced) + " bytes, not the " + std::to_string(r.size) +
                               " it declares");
    }
    if (whole && crc != r.crc32) {
        return recordError(ErrorCode::Corrupt, r, "fails its CRC-32 check (corrupt)");
    }
    return {};
}

Expected<void> verifyRecord(Bytes file, const ZipRecord& r)
{
    return readRecord(file, r, 0, r.size, [](Bytes) { return true; });
}

}  // namespace ckpt::archive
