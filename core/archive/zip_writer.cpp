#include "archive/zip.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unistd.h>

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
constexpr std::size_t kCopyStep = 1U << 30;

class Out {
public:
    void u16(std::uint64_t v) { le(v, 2); }
    void u32(std::uint64_t v) { le(v, 4); }
    void u64(std::uint64_t v) { le(v, 8); }
    void text(std::string_view s) { bytes_.insert(bytes_.end(), asBytes(s).begin(), asBytes(s).end()); }
    void fill(std::size_t n, char c) { bytes_.insert(bytes_.end(), n, static_cast<std::byte>(c)); }
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

Error writeFailed(const std::string& what, int err)
{
    return makeError(ErrorCode::WriteFailed, what + ": " + std::strerror(err));
}

Error usage(const std::string& what)
{
    return makeError(ErrorCode::Usage, what);
}

bool copyUnsupported(int err)
{
    return err == EXDEV || err == ENOSYS || err == EINVAL || err == EOPNOTSUPP || err == EBADF || err == EPERM;
}

}  // namespace

ZipWriter::ZipWriter(int fd, std::uint32_t alignment)
    : fd_(fd), alignment_(std::clamp<std::uint32_t>(alignment, 1, 0x10000))  // the pad length is 16-bit
{
    buf_.reserve(kBufferSize);
}

Expected<void> ZipWriter::writeRaw(Bytes b)
{
    while (!b.empty()) {
        const ssize_t n = ::write(fd_, b.data(), std::min(b.size(), kCopyStep));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            failed_ = true;
            return writeFailed("cannot write the archive", n < 0 ? errno : EIO);
        }
        b = b.subspan(static_cast<std::size_t>(n));
    }
    return {};
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
    const std::uint64_t h = pos_;
    const bool bigSize = size >= kMax32;
    const bool bigOffset = h >= kMax32;
    const std::uint64_t zip64Len = (bigSize || bigOffset) ? 4 + (bigSize ? 16 : 0) + (bigOffset ? 8 : 0) : 0;
    // Same arithmetic as torch's getPadding: the FB field is always there, even with 0 padding.
    const std::uint64_t start = h + 30 + name.size() + 4 + zip64Len;
    const std::uint64_t pad = (alignment_ - start % alignment_) % alignment_;

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
            o.u64(h);
        }
    }
    o.u16(kPaddingId);
    o.u16(pad);
    o.fill(pad, 'Z');
    return writeAll(o.bytes());
}

Expected<void> ZipWriter::writeDescriptor(const Entry& e)
{
    Out o;
    o.u32(kDescriptorSig);
    o.u32(e.crc);
    if (e.size >= kMax32 || e.offset >= kMax32) {
        o.u64(e.size);
        o.u64(e.size);
    } else {
        o.u32(e.size);
        o.u32(e.size);
    }
    return writeAll(o.bytes());
}

Expected<void> ZipWriter::startEntry(std::string_view name, std::uint64_t size)
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

Expected<void> ZipWriter::writeChunk(Bytes chunk)
{
    if (!open_) {
        return usage("no record is open");
    }
    if (chunk.size() > open_->size - openWritten_) {
        return usage("record \"" + open_->name + "\" gets more bytes than the " + std::to_string(open_->size) +
                     " declared");
    }
    if (auto ok = writeAll(chunk); !ok) {
        return ok;
    }
    open_->crc = archive::crc32(chunk, open_->crc);
    openWritten_ += chunk.size();
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
    scratch.resize(static_cast<std::size_t>(std::min<std::uint64_t>(size, kBufferSize)));
    std::uint32_t crc = 0;
    while (size > 0) {
        const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(size, scratch.size()));
        const ssize_t n = ::pread(fd, scratch.data(), want, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return makeError(ErrorCode::Io, std::string("cannot read the source record: ") + std::strerror(errno));
        }
        if (n == 0) {
            return makeError(ErrorCode::Truncated, "the source file ends before the record does", offset);
        }
        crc = archive::crc32({scratch.data(), static_cast<std::size_t>(n)}, crc);
        offset += static_cast<std::uint64_t>(n);
        size -= static_cast<std::uint64_t>(n);
    }
    scratch.clear();
    return crc;
}

}  // namespace

Expected<void> ZipWriter::addRecordFromFile(std::string_view name, int srcFd, std::uint64_t srcOffset,
                                            std::uint64_t size, std::optional<std::uint32_t> knownCrc)
{
    if (auto ok = beginRecord(name, size); !ok) {
        return ok;
    }
    // copy_file_range writes at the descriptor's position: everything buffered must be there first.
    if (auto ok = flush(); !ok) {
        return ok;
    }
    std::uint64_t off = srcOffset;
    std::uint64_t left = size;
    bool kernelCopy = true;
    while (left > 0) {
        ssize_t n = 0;
        const auto step = static_cast<std::size_t>(std::min<std::uint64_t>(left, kCopyStep));
        if (kernelCopy) {
            auto in = static_cast<off_t>(off);
            n = ::copy_file_range(srcFd, &in, fd_, nullptr, step, 0);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0 && copyUnsupported(errno)) {
                kernelCopy = false;  // other filesystem, old kernel, special file: copy by hand
                continue;
            }
            if (n < 0) {
                failed_ = true;
                return writeFailed("cannot copy record \"" + std::string(name) + "\" into the archive", errno);
            }
        } else {
            buf_.resize(std::min(step, kBufferSize));
            n = ::pread(srcFd, buf_.data(), buf_.size(), static_cast<off_t>(off));
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0) {
                const int err = errno;
                buf_.clear();
                failed_ = true;
                return makeError(ErrorCode::Io, "cannot read the source of record \"" + std::string(name) +
                                                    "\": " + std::strerror(err));
            }
            buf_.resize(static_cast<std::size_t>(n));
            auto ok = flush();
            if (!ok) {
                return ok;
            }
        }
        if (n == 0) {
            failed_ = true;
            return makeError(ErrorCode::Truncated,
                             "the source of record \"" + std::string(name) + "\" ends " + std::to_string(left) +
                                 " bytes early",
                             off);
        }
        off += static_cast<std::uint64_t>(n);
        left -= static_cast<std::uint64_t>(n);
        pos_ += static_cast<std::uint64_t>(n);
    }
    if (knownCrc) {
        open_->crc = *knownCrc;
    } else {
        auto crc = crcOfRange(srcFd, srcOffset, size, buf_);
        if (!crc) {
            failed_ = true;
            return std::move(crc.error());
        }
        open_->crc = *crc;
    }
    openWritten_ = size;
    return endRecord();
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
