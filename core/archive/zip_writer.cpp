#include "archive/zip.h"
#include "util/file_copy.h"

#include <algorithm>
#include <zlib.h>

namespace ckpt::archive {
namespace {

constexpr std::uint32_t kLocalSig = 0x04034b50;
constexpr std::uint32_t kDescriptorSig = 0x08074b50;
constexpr std::uint32_t kCentralSig = 0x02014b50;
constexpr std::uint32_t kEndSig = 0x06054b50;
constexpr std::uint32_t kZip64EndSig = 0x06064b50;
constexpr std::uint32_t kLocatorSig = 0x07064b50;
constexpr std::uint64_t kMax32 = 0xFFFFFFFF;
constexpr std::uint16_t kPaddingId = 0x4246;  // "FB", torch's alignment padding field
constexpr std::size_t kBufferSize = 1U << 20;
// Where a run of records copied in one go starts decides how fast the kernel copies it. At the same
// offset within a page as its source, it moves whole page-cache pages; and since it moves 64 KiB
// (one pipe of 16 pages) per step, a start within the first page of a 64 KiB block also lets each
// step fill one 64 KiB folio rather than several small ones. For a 1 GiB run: 0.31 s out of page
// phase, 0.265 s in page phase, 0.22 s in block phase. The padding this costs is paid once per run,
// so each placement is used only for runs big enough to keep it under 0.4%; smaller runs keep
// torch's plain alignment.
constexpr std::uint64_t kPage = 4096;
constexpr std::uint64_t kPipeBlock = 64U << 10;
constexpr std::uint64_t kPagePhaseMinSize = 1U << 20;
constexpr std::uint64_t kBlockPhaseMinSize = 16U << 20;
// The most padding a header written over a gap between two source records may carry; a wider gap
// (a record left out of the output lies there) ends the run instead of copying it for nothing.
constexpr std::uint64_t kMaxGapPad = kPage;

class Out {
public:
    void u16(std::uint64_t v) { le(v, 2); }
    void u32(std::uint64_t v) { le(v, 4); }
    void u64(std::uint64_t v) { le(v, 8); }
    void text(std::string_view s) { bytes_.insert(bytes_.end(), asBytes(s).begin(), asBytes(s).end()); }
    void fill(std::size_t n, char c) { bytes_.insert(bytes_.end(), n, static_cast<std::byte>(c)); }
    void append(const Out& o) { bytes_.insert(bytes_.end(), o.bytes_.begin(), o.bytes_.end()); }
    [[nodiscard]] Bytes bytes() const { return {bytes_.data(), bytes_.size()}; }

private:
    void le(std::uint64_t v, int width)
    {
        for (int i = 0; i < width; ++i) {
            bytes_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
        }
    }
    std::vector<std::byte> bytes_;
};

std::uint16_t flagsFor(std::uint64_t size)
{
    return size > 0 ? 0x0808 : 0x0800;
}
std::uint64_t clamp32(std::uint64_t v)
{
    return std::min(v, kMax32);
}

Error usage(const std::string& what)
{
    return makeError(ErrorCode::Usage, what);
}

std::uint64_t zip64ExtraSize(std::uint64_t size, std::uint64_t headerOffset)
{
    const bool bigSize = size >= kMax32;
    const bool bigOffset = headerOffset >= kMax32;
    return (bigSize || bigOffset) ? 4 + (bigSize ? 16 : 0) + (bigOffset ? 8 : 0) : 0;
}

// A local header without its padding: fixed part, name, ZIP64 extra, the FB field's own 4 bytes.
std::uint64_t localHeaderSize(std::size_t nameLen, std::uint64_t size, std::uint64_t headerOffset)
{
    return 30 + nameLen + zip64ExtraSize(size, headerOffset) + 4;
}

Out localHeader(std::string_view name, std::uint64_t size, std::uint64_t headerOffset, std::uint64_t pad)
{
    const bool bigSize = size >= kMax32;
    const bool bigOffset = headerOffset >= kMax32;
    const std::uint64_t zip64Len = zip64ExtraSize(size, headerOffset);
    Out o;
    o.u32(kLocalSig);
    o.u16(0);  // version needed, as torch's miniz writes it
    o.u16(flagsFor(size));
    o.u16(0);  // stored
    o.u16(0);  // time
    o.u16(0);  // date
    o.u32(0);  // CRC and sizes live in the data descriptor
    o.u32(0);
    o.u32(0);
    o.u16(name.size());
    o.u16(zip64Len + 4 + pad);
    o.text(name);
    if (zip64Len > 0) {
        o.u16(1);
        o.u16(zip64Len - 4);
        if (bigSize) {
            o.u64(size);
            o.u64(0);
        }
        if (bigOffset) {
            o.u64(headerOffset);
        }
    }
    o.u16(kPaddingId);
    o.u16(pad);
    o.fill(pad, 'Z');
    return o;
}

std::uint64_t descriptorSize(std::uint64_t size, std::uint64_t headerOffset)
{
    return size >= kMax32 || headerOffset >= kMax32 ? 24 : 16;
}

Out descriptor(std::uint64_t size, std::uint64_t headerOffset, std::uint32_t crc)
{
    Out o;
    o.u32(kDescriptorSig);
    o.u32(crc);
    if (descriptorSize(size, headerOffset) == 24) {
        o.u64(size);
        o.u64(size);
    } else {
        o.u32(size);
        o.u32(size);
    }
    return o;
}

}  // namespace

ZipWriter::ZipWriter(int fd, std::uint32_t alignment)
    : ownSink_(std::make_unique<FileSink>(fd)), sink_(ownSink_.get()),
      alignment_(std::clamp<std::uint32_t>(alignment, 1, 0x10000))  // the pad length is 16-bit
{
    buf_.reserve(kBufferSize);
}

ZipWriter::ZipWriter(ByteSink& sink, std::uint32_t alignment)
    : sink_(&sink), alignment_(std::clamp<std::uint32_t>(alignment, 1, 0x10000))
{
    buf_.reserve(kBufferSize);
}

Expected<void> ZipWriter::writeRaw(Bytes b)
{
    auto ok = sink_->append(b);
    if (!ok) {
        failed_ = true;
    }
    return ok;
}

Expected<void> ZipWriter::flush()
{
    auto ok = writeRaw({buf_.data(), buf_.size()});
    buf_.clear();
    return ok;
}

Expected<void> ZipWriter::writeAll(Bytes b)
{
    if (failed_) {
        return makeError(ErrorCode::WriteFailed, "an earlier write to the archive failed");
    }
    if (buf_.size() + b.size() > kBufferSize) {
        if (auto ok = flush(); !ok) {
            return ok;
        }
    }
    if (b.size() >= kBufferSize) {
        if (auto ok = writeRaw(b); !ok) {
            return ok;
        }
    } else {
        buf_.insert(buf_.end(), b.begin(), b.end());
    }
    pos_ += b.size();
    return {};
}

Expected<void> ZipWriter::writeLocalHeader(std::string_view name, std::uint64_t size)
{
    // Same arithmetic as torch's getPadding: the FB field is always there, even with 0 padding.
    const std::uint64_t start = pos_ + localHeaderSize(name.size(), size, pos_);
    return writeAll(localHeader(name, size, pos_, (alignment_ - start % alignment_) % alignment_).bytes());
}

Expected<void> ZipWriter::writeDescriptor(const Entry& e)
{
    return writeAll(descriptor(e.size, e.offset, e.crc).bytes());
}

Expected<void> ZipWriter::checkCanStart(std::string_view name) const
{
    if (finished_) {
        return usage("the archive is already finished");
    }
    if (open_) {
        return usage("record \"" + open_->name + "\" is still open");
    }
    if (name.empty() || name.size() > 0xFFFF) {
        return usage("a record name must have 1 to 65535 bytes");
    }
    if (names_.contains(std::string(name))) {
        return usage("record \"" + std::string(name) + "\" written twice");
    }
    return {};
}

Expected<void> ZipWriter::startEntry(std::string_view name, std::uint64_t size)
{
    if (auto ok = checkCanStart(name); !ok) {
        return ok;
    }
    Entry e{std::string(name), pos_, size, 0};
    if (auto ok = writeLocalHeader(name, size); !ok) {
        return ok;
    }
    names_.emplace(name);
    open_ = std::move(e);
    openWritten_ = 0;
    return {};
}

Expected<void> ZipWriter::beginRecord(std::string_view name, std::uint64_t size)
{
    return startEntry(name, size);
}

Expected<void> ZipWriter::checkFits(std::uint64_t size) const
{
    if (!open_) {
        return usage("no record is open");
    }
    if (size > open_->size - openWritten_) {
        return usage("record \"" + open_->name + "\" gets more bytes than the " + std::to_string(open_->size) +
                     " declared");
    }
    return {};
}

Expected<void> ZipWriter::writeChunk(Bytes chunk)
{
    if (auto ok = checkFits(chunk.size()); !ok) {
        return ok;
    }
    if (auto ok = writeAll(chunk); !ok) {
        return ok;
    }
    open_->crc = archive::crc32(chunk, open_->crc);
    openWritten_ += chunk.size();
    return {};
}

Expected<void> ZipWriter::writeChunkFromFile(int srcFd, std::uint64_t srcOffset, std::uint64_t size, std::uint32_t crc,
                                             const CopyStep& step)
{
    if (auto ok = checkFits(size); !ok) {
        return ok;
    }
    // copy_file_range writes at the descriptor's position: everything buffered must be there first.
    if (auto ok = flush(); !ok) {
        return ok;
    }
    if (auto ok = sink_->appendFromFile(srcFd, srcOffset, size, step); !ok) {
        failed_ = true;
        Error e = ok.error();
        e.message = "cannot copy into record \"" + open_->name + "\": " + e.message;
        return e;
    }
    pos_ += size;
    open_->crc = static_cast<std::uint32_t>(crc32_combine(open_->crc, crc, static_cast<z_off_t>(size)));
    openWritten_ += size;
    return {};
}

Expected<void> ZipWriter::endRecord()
{
    if (!open_) {
        return usage("no record is open");
    }
    if (openWritten_ != open_->size) {
        return usage("record \"" + open_->name + "\" got " + std::to_string(openWritten_) + " of the " +
                     std::to_string(open_->size) + " bytes declared");
    }
    if (open_->size > 0) {
        if (auto ok = writeDescriptor(*open_); !ok) {
            return ok;
        }
    }
    entries_.push_back(std::move(*open_));
    open_.reset();
    return {};
}

Expected<void> ZipWriter::addRecord(std::string_view name, Bytes data)
{
    if (auto ok = beginRecord(name, data.size()); !ok) {
        return ok;
    }
    if (auto ok = writeChunk(data); !ok) {
        return ok;
    }
    return endRecord();
}

namespace {

Expected<std::uint32_t> crcOfRange(int fd, std::uint64_t offset, std::uint64_t size, std::vector<std::byte>& scratch)
{
    std::uint32_t crc = 0;
    auto ok = readFileRange(fd, offset, size, scratch, [&crc](Bytes piece) {
        crc = archive::crc32(piece, crc);
        return true;
    });
    scratch.clear();
    if (!ok) {
        return std::move(ok.error());
    }
    return crc;
}

}  // namespace

Expected<void> ZipWriter::addRecordFromFile(std::string_view name, int srcFd, std::uint64_t srcOffset,
                                            std::uint64_t size, std::optional<std::uint32_t> knownCrc)
{
    const FileRecord one{std::string(name), srcOffset, size, knownCrc};
    auto added = addRecordsFromFile({&one, 1}, srcFd);
    if (!added) {
        return std::move(added.error());
    }
    return {};
}

std::vector<ZipWriter::Placement> ZipWriter::placeRun(std::span<const FileRecord> records,
                                                      std::uint64_t phaseBlock) const
{
    const FileRecord& first = records.front();
    const std::uint64_t start = pos_ + localHeaderSize(first.name.size(), first.size, pos_);
    std::uint64_t pad = (alignment_ - start % alignment_) % alignment_;
    if (phaseBlock > 0) {
        pad = (phaseBlock + first.srcOffset % kPage - start % phaseBlock) % phaseBlock;
        // The pad length shares a 16-bit field with the FB field's header and any ZIP64 extra.
        if (pad + 4 + zip64ExtraSize(first.size, pos_) > 0xFFFF) {
            pad %= kPage;
        }
    }
    std::vector<Placement> run{{pos_, pad, start + pad}};
    std::unordered_set<std::string_view> inRun{first.name};
    for (std::size_t k = 1; k < records.size(); ++k) {
        const FileRecord& prev = records[k - 1];
        const FileRecord& r = records[k];
        // Empty records have no descriptor and nothing to copy; a record out of the source's order
        // or off torch's alignment relative to the first cannot sit at the same distance.
        if (prev.size == 0 || r.size == 0 || r.srcOffset < prev.srcOffset + prev.size ||
            (r.srcOffset - first.srcOffset) % alignment_ != 0) {
            break;
        }
        if (r.name.empty() || r.name.size() > 0xFFFF || names_.contains(r.name) || !inRun.insert(r.name).second) {
            break;  // the record is refused with its reason when it starts a run of its own
        }
        const Placement& last = run.back();
        const std::uint64_t header = last.data + prev.size + descriptorSize(prev.size, last.header);
        const std::uint64_t data = run.front().data + (r.srcOffset - first.srcOffset);
        const std::uint64_t fixed = localHeaderSize(r.name.size(), r.size, header);
        if (data < header + fixed || data - header - fixed > kMaxGapPad) {
            break;
        }
        run.push_back({header, data - header - fixed, data});
    }
    return run;
}

Expected<std::size_t> ZipWriter::addRecordsFromFile(std::span<const FileRecord> records, int srcFd,
                                                    const CopyStep& step)
{
    if (records.empty()) {
        return std::size_t{0};
    }
    const FileRecord& first = records.front();
    if (auto ok = checkCanStart(first.name); !ok) {
        return std::move(ok.error());
    }
    // A phased placement keeps torch's alignment only when the source itself is aligned.
    const bool canPhase = first.srcOffset % alignment_ == 0 && kPage % alignment_ == 0;
    std::vector<Placement> run = placeRun(records, canPhase ? kPipeBlock : 0);
    std::uint64_t payload = 0;
    for (std::size_t k = 0; k < run.size(); ++k) {
        payload += records[k].size;
    }
    if (canPhase && payload < kBlockPhaseMinSize) {
        run = placeRun(records, payload >= kPagePhaseMinSize ? kPage : 0);
    }
    const FileRecord& last = records[run.size() - 1];

    if (auto ok = writeAll(localHeader(first.name, first.size, run[0].header, run[0].pad).bytes()); !ok) {
        return std::move(ok.error());
    }
    // copy_file_range writes at the descriptor's position: everything buffered must be there first.
    if (auto ok = flush(); !ok) {
        return std::move(ok.error());
    }
    auto added = sink_->patchable() ? copyRun(records, run, srcFd, step) : streamRun(records, run, srcFd, step);
    if (!added) {
        failed_ = true;
        return std::move(added.error());
    }
    for (Entry& e : *added) {
        names_.insert(e.name);
        entries_.push_back(std::move(e));
    }
    if (last.size > 0) {
        if (auto ok = writeDescriptor(entries_.back()); !ok) {
            return std::move(ok.error());
        }
    }
    return run.size();
}

Expected<std::vector<ZipWriter::Entry>> ZipWriter::copyRun(std::span<const FileRecord> records,
                                                           const std::vector<Placement>& run, int srcFd,
                                                           const CopyStep& step)
{
    const FileRecord& first = records.front();
    const FileRecord& last = records[run.size() - 1];
    const std::uint64_t span = last.srcOffset + last.size - first.srcOffset;
    if (auto ok = sink_->appendFromFile(srcFd, first.srcOffset, span, step); !ok) {
        Error e = ok.error();
        e.message = "cannot copy record \"" + first.name + "\" into the archive: " + e.message;
        return e;
    }
    pos_ += span;

    std::vector<Entry> added;
    added.reserve(run.size());
    for (std::size_t k = 0; k < run.size(); ++k) {
        const FileRecord& r = records[k];
        std::uint32_t crc = 0;
        if (r.knownCrc) {
            crc = *r.knownCrc;
        } else {
            auto computed = crcOfRange(srcFd, r.srcOffset, r.size, buf_);
            if (!computed) {
                return std::move(computed.error());
            }
            crc = *computed;
        }
        added.push_back({r.name, run[k].header, r.size, crc});
    }
    // The copy brought the source's own bytes between the records (its descriptors and headers, or
    // anything else that lay there); every one of them is overwritten with ours.
    for (std::size_t k = 1; k < run.size(); ++k) {
        const Entry& prev = added[k - 1];
        Out gap = descriptor(prev.size, prev.offset, prev.crc);
        gap.append(localHeader(records[k].name, records[k].size, run[k].header, run[k].pad));
        const std::uint64_t at = run[k - 1].data + prev.size;
        if (at + gap.bytes().size() != run[k].data) {
            return makeError(ErrorCode::Internal, "zip run placement is inconsistent at \"" + records[k].name + "\"");
        }
        if (auto ok = writeAt(gap.bytes(), at); !ok) {
            return std::move(ok.error());
        }
    }
    return added;
}

Expected<void> ZipWriter::writeAt(Bytes b, std::uint64_t offset)
{
    auto ok = sink_->writeAt(b, offset);
    if (!ok) {
        failed_ = true;
    }
    return ok;
}

Expected<std::vector<ZipWriter::Entry>> ZipWriter::streamRun(std::span<const FileRecord> records,
                                                             const std::vector<Placement>& run, int srcFd,
                                                             const CopyStep& step)
{
    // The bytes the patched copy leaves, in their order: record k's data, then (between records) its
    // descriptor and record k+1's header, whose padding the placement chose as the copy would.
    std::vector<Entry> added;
    added.reserve(run.size());
    std::vector<std::byte> scratch;
    for (std::size_t k = 0; k < run.size(); ++k) {
        const FileRecord& r = records[k];
        std::uint32_t crc = 0;
        Expected<void> appended;
        auto read = readFileRange(srcFd, r.srcOffset, r.size, scratch, [&](Bytes piece) {
            if (!r.knownCrc) {
                crc = archive::crc32(piece, crc);
            }
            appended = sink_->append(piece);
            return appended.ok() && (!step || step(piece.size()));
        });
        if (!appended) {
            return std::move(appended.error());
        }
        if (!read) {
            Error e = read.error();
            if (e.code != ErrorCode::Cancelled) {
                e.message = "cannot copy record \"" + r.name + "\" into the archive: " + e.message;
            }
            return e;
        }
        pos_ += r.size;
        added.push_back({r.name, run[k].header, r.size, r.knownCrc.value_or(crc)});
        if (k + 1 < run.size()) {
            Out gap = descriptor(r.size, run[k].header, added.back().crc);
            gap.append(localHeader(records[k + 1].name, records[k + 1].size, run[k + 1].header, run[k + 1].pad));
            if (pos_ + gap.bytes().size() != run[k + 1].data) {
                return makeError(ErrorCode::Internal,
                                 "zip run placement is inconsistent at \"" + records[k + 1].name + "\"");
            }
            if (auto ok = writeAll(gap.bytes()); !ok) {
                return std::move(ok.error());
            }
            if (auto ok = flush(); !ok) {
                return std::move(ok.error());
            }
        }
    }
    return added;
}

Expected<void> ZipWriter::finish()
{
    if (finished_) {
        return usage("the archive is already finished");
    }
    if (open_) {
        return usage("record \"" + open_->name + "\" is still open");
    }
    const std::uint64_t cdOffset = pos_;
    for (const Entry& e : entries_) {
        const bool bigSize = e.size >= kMax32;
        const bool bigOffset = e.offset >= kMax32;
        const std::uint64_t zip64Len = (bigSize || bigOffset) ? 4 + (bigSize ? 16 : 0) + (bigOffset ? 8 : 0) : 0;
        Out o;
        o.u32(kCentralSig);
        o.u16(0);  // made by
        o.u16(0);  // needed
        o.u16(flagsFor(e.size));
        o.u16(0);  // stored
        o.u16(0);  // time
        o.u16(0);  // date
        o.u32(e.crc);
        o.u32(clamp32(e.size));
        o.u32(clamp32(e.size));
        o.u16(e.name.size());
        o.u16(zip64Len);
        o.u16(0);  // comment
        o.u16(0);  // disk
        o.u16(0);  // internal attributes
        o.u32(0);  // external attributes
        o.u32(clamp32(e.offset));
        o.text(e.name);
        if (zip64Len > 0) {
            o.u16(1);
            o.u16(zip64Len - 4);
            if (bigSize) {
                o.u64(e.size);
                o.u64(e.size);
            }
            if (bigOffset) {
                o.u64(e.offset);
            }
        }
        if (auto ok = writeAll(o.bytes()); !ok) {
            return ok;
        }
    }
    const std::uint64_t cdSize = pos_ - cdOffset;
    const std::uint64_t zip64End = pos_;
    const std::uint64_t n = entries_.size();

    Out o;
    o.u32(kZip64EndSig);
    o.u64(44);      // size of the rest of this record
    o.u16(0x031E);  // made by, as torch's miniz
    o.u16(45);      // needed: ZIP64
    o.u32(0);
    o.u32(0);
    o.u64(n);
    o.u64(n);
    o.u64(cdSize);
    o.u64(cdOffset);

    o.u32(kLocatorSig);
    o.u32(0);
    o.u64(zip64End);
    o.u32(1);

    o.u32(kEndSig);
    o.u16(0);
    o.u16(0);
    o.u16(std::min<std::uint64_t>(n, 0xFFFF));
    o.u16(std::min<std::uint64_t>(n, 0xFFFF));
    o.u32(clamp32(cdSize));
    o.u32(clamp32(cdOffset));
    o.u16(0);  // comment
    if (auto ok = writeAll(o.bytes()); !ok) {
        return ok;
    }
    if (auto ok = flush(); !ok) {
        return ok;
    }
    finished_ = true;
    return {};
}

}  // namespace ckpt::archive
