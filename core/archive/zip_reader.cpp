#include "archive/zip.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <limits>
#include <unistd.h>
#include <zlib.h>

namespace ckpt::archive {
namespace {

constexpr std::uint32_t kLocalSig = 0x04034b50;     // PK\3\4
constexpr std::uint32_t kCentralSig = 0x02014b50;   // PK\1\2
constexpr std::uint32_t kEndSig = 0x06054b50;       // PK\5\6
constexpr std::uint32_t kZip64EndSig = 0x06064b50;  // PK\6\6
constexpr std::uint32_t kLocatorSig = 0x07064b50;   // PK\6\7

constexpr std::size_t kLocalSize = kLocalHeaderSize;
constexpr std::size_t kCentralSize = 46;
constexpr std::size_t kEndSize = 22;
constexpr std::size_t kZip64EndSize = 56;
constexpr std::size_t kLocatorSize = 20;
constexpr std::size_t kMaxComment = 0xFFFF;
constexpr std::uint32_t kOverflow32 = 0xFFFFFFFF;

// Inflating is the one place a declared size turns into an allocation. Deflate cannot expand
// data by more than ~1032:1, so a declared size beyond that ratio is a lie, and 16 GiB is more
// than any record we would want in memory rather than mapped.
constexpr std::uint64_t kMaxInflated = 16ULL << 30;
constexpr std::uint64_t kMaxDeflateRatio = 1032;

std::uint32_t u16(Bytes b, std::size_t at)
{
    return static_cast<std::uint32_t>(loadLE(b, at, 2));
}
std::uint32_t u32(Bytes b, std::size_t at)
{
    return static_cast<std::uint32_t>(loadLE(b, at, 4));
}
std::uint64_t u64(Bytes b, std::size_t at)
{
    return loadLE(b, at, 8);
}

// [at, at + length) lies before `end` (a file's size, or where a region ends), without overflowing.
bool fits(std::uint64_t at, std::uint64_t length, std::uint64_t end)
{
    return at <= end && length <= end - at;
}

Error corrupt(std::string what, std::uint64_t offset)
{
    return makeError(ErrorCode::Corrupt, std::move(what), offset);
}

struct EndInfo {
    std::uint64_t entries = 0;
    std::uint64_t cdSize = 0;
    std::uint64_t cdOffset = 0;
    std::uint64_t cdLimit = 0;  // where the central directory must end (the first end structure)
};

// The file's last bytes, where the end records are looked for: the whole of a mapped file.
struct Tail {
    Bytes bytes;
    std::uint64_t start = 0;  // where `bytes` starts in the file
    std::uint64_t fileSize = 0;
};
// Bytes [offset, offset + length) of the file (checked to lie inside it by the caller).
using Fetch = std::function<Expected<source::Held>(std::uint64_t, std::uint64_t)>;

// The end record is the last `PK\5\6` whose comment length reaches exactly to the end of the
// file; a signature inside a comment or payload does not count. Scanning further back than the
// longest comment is pointless, so a truncated archive is found out in at most 64 KiB of reads.
std::optional<std::uint64_t> findEndRecord(const Tail& t)
{
    const Bytes f = t.bytes;
    if (f.size() < kEndSize) {
        return std::nullopt;
    }
    const std::size_t last = f.size() - kEndSize;
    const std::size_t first = last > kMaxComment ? last - kMaxComment : 0;
    for (std::size_t at = last + 1; at-- > first;) {
        if (u32(f, at) == kEndSig && t.start + at + kEndSize + u16(f, at + 20) == t.fileSize) {
            return t.start + at;
        }
    }
    return std::nullopt;
}

Expected<EndInfo> readEnd(const Tail& t, const Fetch& fetch)
{
    const auto endAt = findEndRecord(t);
    if (!endAt) {
        if (t.start == 0 && t.bytes.size() >= 4 && u32(t.bytes, 0) == kLocalSig) {
            return makeError(ErrorCode::Truncated, "zip archive is truncated: central directory not found");
        }
        return makeError(ErrorCode::NotCheckpoint, "not a zip archive: no end of central directory record");
    }
    const std::uint64_t e = *endAt;
    const Bytes f = t.bytes;
    const auto at = [&](std::uint64_t offset) { return static_cast<std::size_t>(offset - t.start); };
    EndInfo info;
    info.entries = u16(f, at(e) + 10);
    info.cdSize = u32(f, at(e) + 12);
    info.cdOffset = u32(f, at(e) + 16);
    info.cdLimit = e;
    if (u16(f, at(e) + 4) != 0 || u16(f, at(e) + 6) != 0) {
        return makeError(ErrorCode::Unsupported, "multi-disk (split) zip archives are not supported", e);
    }
    // torch writes the ZIP64 end record and locator for every archive; others write them only
    // when a classic field overflows. When present, the ZIP64 values win (as in Python's zipfile).
    if (e >= t.start + kLocatorSize && u32(f, at(e - kLocatorSize)) == kLocatorSig) {
        const std::uint64_t loc = e - kLocatorSize;
        const std::uint64_t z = u64(f, at(loc) + 8);
        if (!fits(z, kZip64EndSize, loc)) {
            return corrupt("ZIP64 end of central directory record missing or misplaced", loc);
        }
        auto record = fetch(z, kZip64EndSize);  // in the tail, unless a long comment pushed it out
        if (!record) {
            return std::move(record.error());
        }
        const Bytes zr = record->bytes;
        if (u32(zr, 0) != kZip64EndSig) {
            return corrupt("ZIP64 end of central directory record missing or misplaced", loc);
        }
        info.entries = u64(zr, 32);
        info.cdSize = u64(zr, 40);
        info.cdOffset = u64(zr, 48);
        info.cdLimit = z;
    }
    if (!fits(info.cdOffset, info.cdSize, info.cdLimit)) {
        return corrupt("central directory (offset " + std::to_string(info.cdOffset) + ", size " +
                           std::to_string(info.cdSize) + ") lies outside the file",
                       info.cdLimit);
    }
    if (info.entries > info.cdSize / kCentralSize) {
        return corrupt("central directory declares " + std::to_string(info.entries) + " entries but has room for " +
                           std::to_string(info.cdSize / kCentralSize),
                       info.cdLimit);
    }
    return info;
}

// Fills the 0xFFFFFFFF fields of a central entry from its ZIP64 extra (id 1), in the standard
// order: uncompressed size, compressed size, local header offset — only the overflowing ones.
Expected<void> applyZip64Extra(Bytes extra, std::uint64_t extraAt, ZipRecord& r, bool usize, bool csize, bool off)
{
    std::size_t at = 0;
    while (at + 4 <= extra.size()) {
        const std::uint32_t id = u16(extra, at);
        const std::uint32_t len = u16(extra, at + 2);
        if (at + 4 + len > extra.size()) {
            break;  // a short trailing field: tolerated like Python's zipfile, unless we needed it
        }
        if (id == 1) {
            const Bytes field = extra.subspan(at + 4, len);
            std::size_t p = 0;
            auto take = [&](std::uint64_t& v) {
                if (p + 8 > field.size()) {
                    return false;
                }
                v = u64(field, p);
                p += 8;
                return true;
            };
            if ((usize && !take(r.size)) || (csize && !take(r.compressedSize)) || (off && !take(r.localHeaderOffset))) {
                return corrupt("ZIP64 extra field of \"" + r.name + "\" is too short", extraAt + at);
            }
            return {};
        }
        at += 4 + len;
    }
    if (usize || csize || off) {
        return corrupt("\"" + r.name + "\" needs a ZIP64 extra field but has none", extraAt);
    }
    return {};
}

std::uint64_t hashName(std::string_view s)
{
    return std::hash<std::string_view>{}(s);
}

char lowerAscii(char c)
{
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool equalsIgnoreCase(std::string_view a, std::string_view b)
{
    if (a.size() != b.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (lowerAscii(a[i]) != lowerAscii(b[i])) {
            return false;
        }
    }
    return true;
}

// FNV-1a over the ASCII-lowercased name: equal for names equalsIgnoreCase calls equal.
std::uint64_t hashFolded(std::string_view s)
{
    std::uint64_t h = 14695981039346656037ULL;
    for (char c : s) {
        h = (h ^ static_cast<unsigned char>(lowerAscii(c))) * 1099511628211ULL;
    }
    return h;
}

// Power-of-two table at most half full; linear probing. Filled in record order, so of records
// with equal keys the first is met first on any probe path.
template <class Hash> std::vector<std::uint32_t> slotTable(const std::vector<ZipRecord>& records, Hash hash)
{
    std::size_t cap = 16;
    while (cap < records.size() * 2) {
        cap *= 2;
    }
    std::vector<std::uint32_t> slots(cap, 0);
    for (std::size_t i = 0; i < records.size(); ++i) {
        std::size_t s = hash(records[i].name) & (cap - 1);
        while (slots[s] != 0) {
            s = (s + 1) & (cap - 1);
        }
        slots[s] = static_cast<std::uint32_t>(i + 1);
    }
    return slots;
}

Expected<void> inflateInto(Bytes in, std::uint64_t size, std::vector<std::byte>& out, std::uint64_t at)
{
    out.resize(static_cast<std::size_t>(size));
    z_stream zs{};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
        return makeError(ErrorCode::Internal, "zlib inflateInit2 failed");
    }
    std::size_t inPos = 0;
    std::size_t outPos = 0;
    int rc = Z_OK;
    std::byte none{};                        // zlib rejects a null next_out even when nothing is to be written
    constexpr std::size_t kStep = 1U << 30;  // zlib counts in 32-bit uInt
    while (rc == Z_OK) {
        const std::size_t inChunk = std::min(in.size() - inPos, kStep);
        const std::size_t outChunk = std::min(out.size() - outPos, kStep);
        zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.empty() ? &none : in.data() + inPos));
        zs.avail_in = static_cast<uInt>(inChunk);
        zs.next_out = reinterpret_cast<Bytef*>(out.empty() ? &none : out.data() + outPos);  // NOLINT
        zs.avail_out = static_cast<uInt>(outChunk);
        rc = inflate(&zs, Z_NO_FLUSH);
        const std::size_t usedIn = inChunk - zs.avail_in;
        const std::size_t madeOut = outChunk - zs.avail_out;
        inPos += usedIn;
        outPos += madeOut;
        if (rc == Z_BUF_ERROR || (rc == Z_OK && usedIn == 0 && madeOut == 0)) {
            break;  // no progress possible: input exhausted or output full before the stream ended
        }
    }
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || outPos != out.size()) {
        return corrupt("deflated record does not inflate to its declared size of " + std::to_string(size) + " bytes",
                       at);
    }
    return {};
}

}  // namespace

namespace {

// The 30 fixed bytes of the local header at `lh` (inside `file`, checked by the caller). Near the
// previous header the mapping's page is most likely mapped already; far from it, pread.
std::array<std::byte, kLocalSize> localHeaderAt(Bytes file, int fd, std::uint64_t lh, std::uint64_t& previous)
{
    static constexpr std::uint64_t kFar = 256U << 10;
    const bool far = lh > previous + kFar || lh + kFar < previous;
    previous = lh;
    std::array<std::byte, kLocalSize> h{};
    if (fd >= 0 && far && ::pread(fd, h.data(), h.size(), static_cast<off_t>(lh)) == static_cast<ssize_t>(h.size())) {
        return h;
    }
    std::memcpy(h.data(), file.data() + lh, h.size());
    return h;
}

// One local record of a truncated archive, read without a central directory. `next` is where the
// following record starts, 0 when this one is not whole (or is no record: `directory` when the
// central directory starts here).
struct LocalScan {
    ZipRecord record;
    std::uint64_t next = 0;
    bool directory = false;
    bool encrypted = false;
};

constexpr std::size_t kDescriptor32 = 16;
constexpr std::size_t kDescriptor64 = 24;

// `at` is the file's end or starts with "PK" (as far as the file goes).
bool signatureOrEnd(Bytes f, std::uint64_t at)
{
    static constexpr std::array<std::byte, 2> kPK{std::byte{'P'}, std::byte{'K'}};
    for (std::size_t i = 0; i < kPK.size() && at + i < f.size(); ++i) {
        if (f[static_cast<std::size_t>(at + i)] != kPK[i]) {
            return false;
        }
    }
    return true;
}

// The data descriptor that ends a record whose payload starts at `data`: the first `PK\7\8` whose
// compressed size is exactly its distance from `data`, with 4-byte sizes (16 bytes) or ZIP64's
// 8-byte ones (24). A signature inside the payload fails that test (its "size" would have to
// equal its own offset), so the search is one pass over the payload, bounded by the file's end.
// Returns the descriptor's offset and size.
std::optional<std::pair<std::uint64_t, std::size_t>> findDescriptor(Bytes f, std::uint64_t data)
{
    static constexpr std::array<char, 4> kSig{'P', 'K', '\x07', '\x08'};
    const std::string_view text = asText(f);
    for (std::size_t p = text.find(std::string_view(kSig.data(), kSig.size()), data); p != std::string_view::npos;
         p = text.find(std::string_view(kSig.data(), kSig.size()), p + 1)) {
        const std::uint64_t distance = p - data;
        // Both forms can match (the 8-byte size of a small record starts with its 4-byte size):
        // the right one is followed by the next signature or by the file's end.
        if (fits(p, kDescriptor64, f.size()) && u64(f, p + 8) == distance && signatureOrEnd(f, p + kDescriptor64)) {
            return std::pair{std::uint64_t{p}, kDescriptor64};
        }
        if (fits(p, kDescriptor32, f.size()) && u32(f, p + 8) == distance && signatureOrEnd(f, p + kDescriptor32)) {
            return std::pair{std::uint64_t{p}, kDescriptor32};
        }
    }
    return std::nullopt;
}

LocalScan scanLocalRecord(Bytes f, std::uint64_t at)
{
    LocalScan out;
    if (!fits(at, 4, f.size())) {
        return out;
    }
    const auto h = static_cast<std::size_t>(at);
    const std::uint32_t sig = u32(f, h);
    if (sig != kLocalSig) {
        out.directory = sig == kCentralSig || sig == kZip64EndSig || sig == kEndSig;
        return out;
    }
    if (!fits(at, kLocalSize, f.size())) {
        return out;
    }
    const std::uint32_t flags = u16(f, h + 6);
    const std::uint32_t nameLen = u16(f, h + 26);
    const std::uint32_t extraLen = u16(f, h + 28);
    ZipRecord& r = out.record;
    r.localHeaderOffset = at;
    if (fits(at + kLocalSize, nameLen, f.size())) {
        r.name.assign(asText(f.subspan(h + kLocalSize, nameLen)));
    }
    const std::uint64_t data = at + kLocalSize + nameLen + extraLen;
    if (!fits(at + kLocalSize, std::uint64_t{nameLen} + extraLen, f.size())) {
        return out;
    }
    out.encrypted = (flags & 1U) != 0;
    if (out.encrypted) {
        return out;
    }
    r.method = static_cast<std::uint16_t>(u16(f, h + 8));
    r.dataOffset = data;
    if ((flags & 8U) != 0) {
        // Sizes and CRC follow the payload (torch writes every non-empty record so, format.md §2.2).
        const auto descriptor = findDescriptor(f, data);
        if (!descriptor) {
            return out;
        }
        const auto [d, length] = *descriptor;
        r.crc32 = u32(f, static_cast<std::size_t>(d) + 4);
        r.compressedSize = d - data;
        r.size = length == kDescriptor32 ? u32(f, static_cast<std::size_t>(d) + 12)
                                         : u64(f, static_cast<std::size_t>(d) + 16);
        out.next = d + length;
    } else {
        r.crc32 = u32(f, h + 14);
        r.compressedSize = u32(f, h + 18);
        r.size = u32(f, h + 22);
        const Bytes extra = f.subspan(h + kLocalSize + nameLen, extraLen);
        if (!applyZip64Extra(extra, at + kLocalSize + nameLen, r, r.size == kOverflow32,
                             r.compressedSize == kOverflow32, false)) {
            return out;
        }
        if (!fits(data, r.compressedSize, f.size())) {
            return out;
        }
        out.next = data + r.compressedSize;
    }
    if (r.method == 0 && r.compressedSize != r.size) {
        out.next = 0;  // a damaged header: nothing after it can be trusted either
    }
    return out;
}

}  // namespace

std::uint64_t torchDataOffset(const ZipRecord& r)
{
    std::uint64_t start = r.localHeaderOffset + kLocalSize + r.name.size() + 4;  // the "FB" field's id and length
    if (r.size >= kOverflow32 || r.localHeaderOffset >= kOverflow32) {
        start += 4;
        start += r.size >= kOverflow32 ? 16 : 0;
        start += r.localHeaderOffset >= kOverflow32 ? 8 : 0;
    }
    constexpr std::uint64_t kAlignment = 64;
    return (start + kAlignment - 1) / kAlignment * kAlignment;
}

Expected<std::uint64_t> payloadOffset(const ZipRecord& r, Bytes header)
{
    if (header.size() < kLocalSize || u32(header, 0) != kLocalSig) {
        return corrupt("local header of \"" + r.name + "\" is missing or outside the file", r.localHeaderOffset);
    }
    return r.localHeaderOffset + kLocalSize + u16(header, 26) + u16(header, 28);
}

Expected<ZipReader> ZipReader::parse(Bytes file, int fd)
{
    return parseFrom(file, fd, nullptr);
}

Expected<ZipReader> ZipReader::parse(const source::SourcePtr& src)
{
    if (const auto span = src->span()) {
        return parseFrom(*span, src->fd(), nullptr);
    }
    return parseFrom({}, -1, src);
}

Expected<ZipReader> ZipReader::parseFrom(Bytes file, int fd, const source::SourcePtr& src)
{
    const std::uint64_t size = src ? src->size() : file.size();
    const Fetch fetch = [&](std::uint64_t offset, std::uint64_t length) -> Expected<source::Held> {
        if (src) {
            return src->read(offset, length);
        }
        return source::Held{file.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(length)), nullptr};
    };
    Tail tail{file, 0, size};
    source::Held tailHeld;
    auto readTail = [&](std::uint64_t n) -> Expected<void> {
        auto read = src->read(size - n, n);
        if (!read) {
            return std::move(read.error());
        }
        tailHeld = std::move(*read);
        tail = Tail{tailHeld.bytes, size - n, size};
        return {};
    };
    // From a source, the last 64 KiB (what a remote source's first request holds): an end record
    // whose comment reaches further back (no writer of checkpoints leaves one) is not looked for
    // at the cost of a request for every file that is no zip.
    constexpr std::uint64_t kSourceTail = std::uint64_t{64} << 10;
    if (src) {
        if (auto ok = readTail(std::min(size, kSourceTail)); !ok) {
            return std::move(ok.error());
        }
    }
    auto end = readEnd(tail, fetch);
    if (!end) {
        if (end.error().code == ErrorCode::Truncated && !src) {
            return salvageLocal(file);
        }
        return std::move(end.error());
    }
    const EndInfo& info = *end;
    auto directory = fetch(info.cdOffset, info.cdSize);
    if (!directory) {
        return std::move(directory.error());
    }
    const Bytes cd = directory->bytes;
    ZipReader z;
    z.file_ = file;
    z.source_ = src;
    z.size_ = size;
    z.records_.reserve(static_cast<std::size_t>(info.entries));

    std::uint64_t at = 0;  // in the directory
    std::uint64_t previousHeader = 0;
    for (std::uint64_t i = 0; i < info.entries; ++i) {
        if (!fits(at, kCentralSize, cd.size()) || u32(cd, static_cast<std::size_t>(at)) != kCentralSig) {
            return corrupt("central directory entry " + std::to_string(i) + " is missing or has a bad signature",
                           info.cdOffset + at);
        }
        const auto c = static_cast<std::size_t>(at);
        const std::uint32_t nameLen = u16(cd, c + 28);
        const std::uint32_t extraLen = u16(cd, c + 30);
        const std::uint32_t commentLen = u16(cd, c + 32);
        const std::uint64_t varLen = std::uint64_t{nameLen} + extraLen + commentLen;
        if (!fits(at + kCentralSize, varLen, cd.size())) {
            return corrupt("central directory entry " + std::to_string(i) + " runs past the directory's end",
                           info.cdOffset + at);
        }
        ZipRecord r;
        r.method = static_cast<std::uint16_t>(u16(cd, c + 10));
        r.crc32 = u32(cd, c + 16);
        r.compressedSize = u32(cd, c + 20);
        r.size = u32(cd, c + 24);
        r.localHeaderOffset = u32(cd, c + 42);
        r.name.assign(asText(cd.subspan(c + kCentralSize, nameLen)));
        if ((u16(cd, c + 8) & 1U) != 0) {
            return makeError(ErrorCode::Unsupported, "record \"" + r.name + "\" is encrypted", info.cdOffset + at);
        }
        auto z64 = applyZip64Extra(cd.subspan(c + kCentralSize + nameLen, extraLen),
                                   info.cdOffset + at + kCentralSize + nameLen, r, r.size == kOverflow32,
                                   r.compressedSize == kOverflow32, r.localHeaderOffset == kOverflow32);
        if (!z64) {
            return std::move(z64.error());
        }
        // The payload offset comes from the LOCAL header's own lengths: torch may put ZIP64 extras
        // or different padding there than in the central directory.
        const std::uint64_t lh = r.localHeaderOffset;
        if (!fits(lh, kLocalSize, info.cdOffset)) {
            return corrupt("local header of \"" + r.name + "\" is missing or outside the file", lh);
        }
        if (!src) {
            const auto local = localHeaderAt(file, fd, lh, previousHeader);
            auto offset = payloadOffset(r, Bytes(local.data(), local.size()));
            if (!offset) {
                return std::move(offset.error());
            }
            r.dataOffset = *offset;
        } else {
            r.dataOffset = torchDataOffset(r);
            r.dataOffsetAssumed = true;
            // A payload assumed to run into the directory is another writer's (a Python zipfile copy
            // with ZIP64 extras: its last payload ended 44 bytes inside the directory): its header
            // (4 KiB of extra field at most, ZIP64's is 20 bytes) is read rather than assumed.
            if (!fits(r.dataOffset, r.compressedSize, info.cdOffset)) {
                constexpr std::uint64_t kExtraRead = 4096;
                const std::uint64_t n = std::min<std::uint64_t>(info.cdOffset - lh, kLocalSize + nameLen + kExtraRead);
                auto header = src->read(lh, n);
                if (!header) {
                    return std::move(header.error());
                }
                auto offset = payloadOffset(r, header->bytes);
                if (!offset) {
                    return std::move(offset.error());
                }
                r.dataOffset = *offset;
                r.dataOffsetAssumed = false;
            }
        }
        if (!fits(r.dataOffset, r.compressedSize, info.cdOffset)) {
            return corrupt("data of \"" + r.name + "\" (" + std::to_string(r.compressedSize) +
                               " bytes) runs past the start of the central directory",
                           lh);
        }
        if (r.method == 0 && r.compressedSize != r.size) {
            return corrupt("stored record \"" + r.name + "\" has different compressed and uncompressed sizes",
                           info.cdOffset + at);
        }
        z.records_.push_back(std::move(r));
        at += kCentralSize + varLen;
    }

    if (auto indexed = z.index(info.cdOffset); !indexed) {
        return std::move(indexed.error());
    }
    return z;
}

Expected<void> ZipReader::index(std::uint64_t firstEntryAt)
{
    if (!records_.empty()) {
        const std::string& first = records_.front().name;
        const auto slash = first.find('/');
        // No folder: torch.load refuses it ("file in archive is not in a subdirectory"), which the
        // checkpoint loader says; the 2.1-2.5 torch.export archive is such a zip (docs/format.md §14).
        folder_ = slash == std::string::npos ? std::string() : first.substr(0, slash);
        flat_ = slash == std::string::npos;
        flatFirstAt_ = firstEntryAt;
    }
    slots_ = slotTable(records_, hashName);
    // The case-insensitive fallback gets its own table rather than a scan of every record: an
    // archive whose pickle says data/N for records named DATA/N (120k of them) took 40 s so.
    // Built here, not on first use, so a const reader stays safe to share.
    foldedSlots_ = slotTable(records_, hashFolded);
    return {};
}

Expected<ZipReader> ZipReader::salvageLocal(Bytes file)
{
    ZipReader z;
    z.file_ = file;
    ZipSalvage salvage;
    salvage.fileSize = file.size();
    std::uint64_t at = 0;
    for (;;) {
        LocalScan scan = scanLocalRecord(file, at);
        if (scan.encrypted) {
            return makeError(ErrorCode::Unsupported, "record \"" + scan.record.name + "\" is encrypted", at);
        }
        if (scan.next == 0) {
            salvage.cutAt = at;
            salvage.cutRecord = std::move(scan.record.name);
            salvage.inCentralDirectory = scan.directory;
            break;
        }
        z.records_.push_back(std::move(scan.record));
        at = scan.next;
    }
    if (z.records_.empty()) {
        const std::string in = salvage.cutRecord.empty() ? std::string() : " inside record '" + salvage.cutRecord + "'";
        return makeError(ErrorCode::Truncated, "zip archive is truncated: central directory not found and no record is "
                                               "whole (the file ends after " +
                                                   std::to_string(file.size()) + " bytes" + in + ")");
    }
    z.salvage_ = std::move(salvage);
    if (auto indexed = z.index(0); !indexed) {
        return std::move(indexed.error());
    }
    return z;
}

const ZipRecord* ZipReader::findExact(std::string_view fullName) const
{
    if (slots_.empty()) {
        return nullptr;
    }
    const std::size_t mask = slots_.size() - 1;
    // The first record with a name wins when names repeat: the table is filled in order.
    for (std::size_t s = hashName(fullName) & mask; slots_[s] != 0; s = (s + 1) & mask) {
        const ZipRecord& r = records_[slots_[s] - 1];
        if (r.name == fullName) {
            return &r;
        }
    }
    return nullptr;
}

const ZipRecord* ZipReader::find(std::string_view relName) const
{
    std::string full;
    full.reserve(folder_.size() + 1 + relName.size());
    if (!flat_) {
        full.append(folder_).append("/");
    }
    full.append(relName);
    if (const ZipRecord* r = findExact(full)) {
        return r;
    }
    // miniz (torch's reader) compares names case-insensitively by default.
    if (foldedSlots_.empty()) {
        return nullptr;
    }
    const std::size_t mask = foldedSlots_.size() - 1;
    for (std::size_t s = hashFolded(full) & mask; foldedSlots_[s] != 0; s = (s + 1) & mask) {
        const ZipRecord& r = records_[foldedSlots_[s] - 1];
        if (equalsIgnoreCase(r.name, full)) {
            return &r;
        }
    }
    return nullptr;
}

void ZipReader::readHeldHeaders()
{
    if (!source_) {
        return;
    }
    for (auto& r : records_) {
        if (!r.dataOffsetAssumed || !source_->holds({r.localHeaderOffset, kLocalSize})) {
            continue;
        }
        auto header = source_->read(r.localHeaderOffset, kLocalSize);
        if (!header) {
            continue;  // left assumed: checked when its payload is read
        }
        if (auto offset = payloadOffset(r, header->bytes); offset && fits(*offset, r.compressedSize, size_)) {
            r.dataOffset = *offset;
            r.dataOffsetAssumed = false;
        }
    }
}

std::vector<source::Range> ZipReader::recordRanges(const std::vector<const ZipRecord*>& wanted)
{
    std::vector<source::Range> out;
    out.reserve(wanted.size());
    for (const ZipRecord* r : wanted) {
        out.push_back({r->localHeaderOffset, r->dataOffset + r->compressedSize - r->localHeaderOffset});
    }
    return out;
}

Expected<source::Held> ZipReader::payload(const ZipRecord& r) const
{
    if (!r.dataOffsetAssumed) {
        return source_->read(r.dataOffset, r.compressedSize);
    }
    // The header comes with the payload in one read, and says whether the payload is where it was
    // assumed; a header longer than torch writes moves it, and it is read again from there.
    auto both = source_->read(r.localHeaderOffset, r.dataOffset + r.compressedSize - r.localHeaderOffset);
    if (!both) {
        return both;
    }
    auto offset = payloadOffset(r, both->bytes);
    if (!offset) {
        return offset.error();
    }
    if (*offset == r.dataOffset) {
        both->bytes = both->bytes.subspan(static_cast<std::size_t>(r.dataOffset - r.localHeaderOffset));
        return both;
    }
    if (!fits(*offset, r.compressedSize, source_->size())) {
        return corrupt("record \"" + r.name + "\" lies outside the file", r.localHeaderOffset);
    }
    return source_->read(*offset, r.compressedSize);
}

Expected<Bytes> ZipReader::data(const ZipRecord& r, std::vector<std::byte>& scratch) const
{
    const std::uint64_t size = source_ ? source_->size() : file_.size();
    if (!fits(r.dataOffset, r.compressedSize, size)) {
        return corrupt("record \"" + r.name + "\" lies outside the file", r.localHeaderOffset);
    }
    Bytes raw;
    source::Held fetched;
    if (source_) {
        auto got = payload(r);
        if (!got) {
            return std::move(got.error());
        }
        fetched = std::move(*got);
        raw = fetched.bytes;
    } else {
        raw = file_.subspan(static_cast<std::size_t>(r.dataOffset), static_cast<std::size_t>(r.compressedSize));
    }
    if (r.method == 0) {
        if (r.compressedSize != r.size) {
            return corrupt("stored record \"" + r.name + "\" has different compressed and uncompressed sizes",
                           r.localHeaderOffset);
        }
        if (source_) {
            scratch.assign(raw.begin(), raw.end());  // the fetched bytes go with `fetched`
            return Bytes{scratch.data(), scratch.size()};
        }
        return raw;
    }
    if (r.method != 8) {
        return makeError(ErrorCode::Unsupported,
                         "record \"" + r.name + "\" uses compression method " + std::to_string(r.method) +
                             " (only stored and deflate are read)",
                         r.localHeaderOffset);
    }
    if (r.size > kMaxInflated) {
        return makeError(ErrorCode::Limit,
                         "deflated record \"" + r.name + "\" is " + humanBytes(r.size) +
                             ", more than the 16 GiB read into memory; re-save it uncompressed",
                         r.localHeaderOffset);
    }
    if (r.size / kMaxDeflateRatio > r.compressedSize + 1) {
        return corrupt("deflated record \"" + r.name + "\" declares a size its compressed bytes cannot hold",
                       r.localHeaderOffset);
    }
    auto ok = inflateInto(raw, r.size, scratch, r.dataOffset);
    if (!ok) {
        return std::move(ok.error());
    }
    return Bytes{scratch.data(), scratch.size()};
}

}  // namespace ckpt::archive
