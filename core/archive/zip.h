// Stored-only zip reader and writer for PyTorch's archive container (docs/format.md §2).
//
// Layout read: local headers `PK\3\4` (30 bytes + name + extra) each followed by data (and a
// `PK\7\8` data descriptor when flag bit 3 is set), then the central directory, an optional
// ZIP64 end record + locator, and the classic end record `PK\5\6` (22 bytes + comment) at the
// end. Sizes and offsets come from the central directory (ZIP64 extras when a field is
// 0xFFFFFFFF); a record's payload starts at local-header offset + 30 + the LOCAL name length +
// the LOCAL extra length, which is exactly the offset torch maps with mmap=True.
//
// Layout written (as torch's miniz writer): each local header carries an extra field 0x4246 ("FB")
// padded with 'Z' so the payload starts on a 64-byte boundary; ZIP64 fields when a size or
// offset reaches 0xFFFFFFFF; the ZIP64 end record + locator always; stored, never compressed.
#pragma once

#include "source/byte_source.h"
#include "util/byte_sink.h"
#include "util/bytes.h"
#include "util/error.h"
#include "util/file_copy.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace ckpt::archive {

struct ZipRecord {
    std::string name;  // full name, archive folder included
    std::uint64_t localHeaderOffset = 0;
    std::uint64_t dataOffset = 0;  // payload start in the file
    std::uint64_t size = 0;        // uncompressed
    std::uint64_t compressedSize = 0;
    std::uint32_t crc32 = 0;   // from the central directory
    std::uint16_t method = 0;  // 0 stored, 8 deflate
    // `dataOffset` is where torch's writer puts a payload (torchDataOffset), assumed because the
    // local header was not read (a source that is not mapped: core/remote), and checked against
    // that header when the payload is read (payloadOffset).
    bool dataOffsetAssumed = false;
};

// The fixed part of a local header.
inline constexpr std::size_t kLocalHeaderSize = 30;

// Where torch's writer (and ckptscope's, below) puts a record's payload: after a local header whose
// extra field ("FB" padding, ZIP64 sizes where they overflow) ends on a 64-byte boundary.
[[nodiscard]] std::uint64_t torchDataOffset(const ZipRecord& r);

// Where a record's payload starts by its own local header, whose first kLocalHeaderSize bytes are
// `header`: Corrupt when they are no local header.
Expected<std::uint64_t> payloadOffset(const ZipRecord& r, Bytes header);

// What torch.load (1.13) says of an archive without its end record.
inline constexpr std::string_view kTruncatedTorchError =
    "PytorchStreamReader failed reading zip archive: failed finding central directory";

// What parse() found when the end record was gone (a download or copy cut off) and the records
// were read from their local headers instead (docs/format.md §2.5).
struct ZipSalvage {
    std::uint64_t fileSize = 0;
    // Where the first piece that is not whole starts: a local header, or the central directory.
    std::uint64_t cutAt = 0;
    std::string cutRecord;            // the name of the record the file ends inside, "" when unknown or none
    bool inCentralDirectory = false;  // every record is whole; the file ends in the directory after them
};

class ZipReader {
public:
    // Parses the central directory of `file` (which must outlive the reader). Errors name the cause:
    // not a zip, corrupt entry, entries past the end of the file. An archive without its end record
    // that starts with a local header is salvaged: its whole records are read from the local
    // headers, the first one that is cut ends the list, and salvage() says where the file ends.
    // With `fd` (the same file, open), a local header far from the previous one is read with pread
    // rather than through the mapping: touching one page in each 2 MiB region makes the kernel build
    // a page table for it, which cost 15 of the 37 ms of opening a 1 GiB file of 512 records.
    static Expected<ZipReader> parse(Bytes file, int fd = -1);
    // The same over any byte source (which the reader keeps): a mapped one is parse(Bytes, fd); for
    // one that is not, the reader reads the end records and the central directory, and assumes each
    // payload where torch's writer puts it (ZipRecord::dataOffsetAssumed) rather than reading every
    // local header, unless that would run into the directory (another writer's zip). Salvaging a
    // truncated archive needs the whole file: Truncated then, and the caller reads it whole.
    static Expected<ZipReader> parse(const source::SourcePtr& src);

    [[nodiscard]] const std::vector<ZipRecord>& records() const { return records_; }
    // Set when the records come from the local headers of a truncated archive.
    [[nodiscard]] const std::optional<ZipSalvage>& salvage() const { return salvage_; }
    // Everything before the first '/' of the first central entry (docs/format.md §2.1).
    [[nodiscard]] const std::string& folder() const { return folder_; }
    // Whether the first record sits in no folder (then folder() is "" and find() looks names up as
    // they are); torch's reader refuses such an archive. flatFirstAt(): that record's central entry.
    [[nodiscard]] bool flat() const { return flat_; }
    [[nodiscard]] std::uint64_t flatFirstAt() const { return flatFirstAt_; }
    // Looks up `folder/relName` (`relName` in a flat archive); nullptr when absent.
    [[nodiscard]] const ZipRecord* find(std::string_view relName) const;
    // The first record named exactly `fullName` (archive folder included); nullptr when absent.
    [[nodiscard]] const ZipRecord* findExact(std::string_view fullName) const;
    // The payload of a record: a view into the file for stored records (a copy in `scratch` from a
    // source that is not mapped, its assumed offset checked first); deflated records are inflated
    // into `scratch` (and the returned span points there).
    Expected<Bytes> data(const ZipRecord& r, std::vector<std::byte>& scratch) const;
    // Reads the local headers the source now holds (fetched with other records) in place of the
    // offsets assumed for them, as a mapped file's are read.
    void readHeldHeaders();
    // The ranges of the records `wanted` with their local headers, for the source to fetch together.
    [[nodiscard]] static std::vector<source::Range> recordRanges(const std::vector<const ZipRecord*>& wanted);

private:
    Bytes file_;
    source::SourcePtr source_;  // set when the file is not mapped
    std::uint64_t size_ = 0;    // the file's
    std::string folder_;
    bool flat_ = false;
    std::uint64_t flatFirstAt_ = 0;
    std::vector<ZipRecord> records_;
    std::optional<ZipSalvage> salvage_;
    static Expected<ZipReader> parseFrom(Bytes file, int fd, const source::SourcePtr& src);
    // A record's payload read from source_, its assumed offset checked against its local header.
    [[nodiscard]] Expected<source::Held> payload(const ZipRecord& r) const;
    // Names the records' folder and builds the lookup tables once records_ is complete.
    Expected<void> index(std::uint64_t firstEntryAt);
    // Reads the whole records of `file` from its local headers (no central directory).
    static Expected<ZipReader> salvageLocal(Bytes file);
    // Open-addressing hash of record names (index + 1, 0 = empty), so lookups stay O(1) for
    // archives with tens of thousands of records without one allocation per name.
    std::vector<std::uint32_t> slots_;
    // The same over ASCII-lowercased names, for the case-insensitive fallback of find().
    std::vector<std::uint32_t> foldedSlots_;
};

// Standard CRC-32 (zlib polynomial); `crc` is the running value for incremental use.
[[nodiscard]] std::uint32_t crc32(Bytes data, std::uint32_t crc = 0);

// A record whose bytes are a range of another file.
struct FileRecord {
    std::string name;
    std::uint64_t srcOffset = 0;
    std::uint64_t size = 0;
    std::optional<std::uint32_t> knownCrc;  // the source's CRC-32 when the bytes are a whole source record
};

// Streams an archive into a file descriptor or a ByteSink, record by record, with torch's alignment.
class ZipWriter {
public:
    // Into the file `fd` at its position (a FileSink of its own).
    explicit ZipWriter(int fd, std::uint32_t alignment = 64);
    // Into `sink`, which outlives the writer. A sink that is not patchable (a stream) gets the same
    // bytes strictly in order: a stretch of records is then copied record by record, each record's
    // CRC computed as its bytes pass where it is not known, and our headers written between them.
    explicit ZipWriter(ByteSink& sink, std::uint32_t alignment = 64);

    // A record whose bytes are all in memory.
    Expected<void> addRecord(std::string_view name, Bytes data);
    // A record copied from another file descriptor without passing through memory as a whole
    // (copy_file_range, falling back to pread/write). `knownCrc` skips the CRC pass when the
    // bytes are copied unchanged from a record whose CRC the input's central directory gave.
    Expected<void> addRecordFromFile(std::string_view name, int srcFd, std::uint64_t srcOffset, std::uint64_t size,
                                     std::optional<std::uint32_t> knownCrc);
    // Adds records[0] and as many of the following as can share one copy: records that lie in
    // `srcFd` in this order, on torch's alignment relative to each other, with gaps between them
    // that can hold our descriptor and next local header. The whole stretch is one kernel copy and
    // the gaps are then overwritten with our headers, so the records keep their source distances;
    // big stretches are also placed where the kernel copies fastest (see zip_writer.cpp). A 1 GiB
    // file of 2 MiB records: 0.22 s so, 0.30 s record by record. `step` sees the copy's progress
    // and may cancel.
    // Returns how many records were added (at least one unless `records` is empty).
    Expected<std::size_t> addRecordsFromFile(std::span<const FileRecord> records, int srcFd, const CopyStep& step = {});
    // A record produced in pieces: begin, write chunks, end. The size must be declared up front.
    Expected<void> beginRecord(std::string_view name, std::uint64_t size);
    Expected<void> writeChunk(Bytes chunk);
    // The next `size` bytes of the open record copied from `srcFd` (copy_file_range), their CRC
    // `crc` known (a stored record's, from its archive's central directory) and folded into the
    // record's with crc32_combine: no pass over the bytes in this process. `step` as above.
    Expected<void> writeChunkFromFile(int srcFd, std::uint64_t srcOffset, std::uint64_t size, std::uint32_t crc,
                                      const CopyStep& step = {});
    Expected<void> endRecord();
    // Central directory, ZIP64 end record and locator, end record.
    Expected<void> finish();

    [[nodiscard]] std::uint64_t bytesWritten() const { return pos_; }

private:
    struct Entry {
        std::string name;
        std::uint64_t offset;
        std::uint64_t size;
        std::uint32_t crc;
    };
    Expected<void> writeAll(Bytes b);
    Expected<void> flush();
    Expected<void> writeRaw(Bytes b);
    Expected<void> writeAt(Bytes b, std::uint64_t offset);
    [[nodiscard]] Expected<void> checkCanStart(std::string_view name) const;
    // A record is open and has room for `size` more bytes.
    [[nodiscard]] Expected<void> checkFits(std::uint64_t size) const;
    Expected<void> startEntry(std::string_view name, std::uint64_t size);
    Expected<void> writeLocalHeader(std::string_view name, std::uint64_t size);
    // Where each record of a shared-copy run goes: its local header, the header's padding, its data.
    struct Placement {
        std::uint64_t header;
        std::uint64_t pad;
        std::uint64_t data;
    };
    // The longest prefix of `records` that can share one copy. With a `phaseBlock` (a power of two
    // of at least a page) the first record's bytes start at its source's offset within a page, in
    // the first page of a block; with 0, on torch's plain alignment.
    [[nodiscard]] std::vector<Placement> placeRun(std::span<const FileRecord> records, std::uint64_t phaseBlock) const;
    // A run placed by placeRun copied in one go, then its gaps written over (a patchable sink): the
    // entries added.
    Expected<std::vector<Entry>> copyRun(std::span<const FileRecord> records, const std::vector<Placement>& run,
                                         int srcFd, const CopyStep& step);
    // A run placed by placeRun written in order (a sink that cannot be patched): each record's bytes
    // read once, for the sink and for its CRC, then its descriptor and the next header.
    Expected<std::vector<Entry>> streamRun(std::span<const FileRecord> records, const std::vector<Placement>& run,
                                           int srcFd, const CopyStep& step);
    Expected<void> writeDescriptor(const Entry& e);

    std::unique_ptr<FileSink> ownSink_;  // ZipWriter(int fd)
    ByteSink* sink_;
    std::uint32_t alignment_;
    std::uint64_t pos_ = 0;
    std::vector<Entry> entries_;
    // the record in progress (beginRecord/writeChunk/endRecord)
    std::optional<Entry> open_;
    std::uint64_t openWritten_ = 0;
    // headers and small records collect here so a 40k-record export is not 120k write() calls
    std::vector<std::byte> buf_;
    std::unordered_set<std::string> names_;  // torch refuses to write a name twice; so do we
    bool failed_ = false;                    // after a write error the archive is unusable
    bool finished_ = false;
};

}  // namespace ckpt::archive
