// Byte sources: the one way a reader gets at a file's bytes, wherever the file is (issue 37).
//
// A source has a size and gives ranges of its bytes; where it is mapped (a local file, bytes in
// memory) it also gives the whole file as one span, and readers index that directly, copying
// nothing. Where it is not (a file over HTTP), readers ask for the ranges they need, say ahead of
// time which they will need (prefetch: close ranges then share one request), and stream large ones
// (storages) to a sink in bounded pieces. A transport is one ByteSource subclass: it knows nothing
// of formats, and no reader knows which transport it reads.
#pragma once

#include "util/bytes.h"
#include "util/error.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ckpt::source {

// Bytes [offset, offset + length) of a source.
struct Range {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    friend bool operator==(const Range&, const Range&) = default;
};

// Bytes a source gave, and what keeps them alive: nothing for a view of a mapping (the source
// does), the buffer they were fetched into otherwise.
struct Held {
    Bytes bytes;
    std::shared_ptr<const void> owner;
};

using Sink = std::function<bool(Bytes)>;  // false stops the read with Cancelled

class ByteSource {
public:
    ByteSource() = default;
    ByteSource(const ByteSource&) = delete;
    ByteSource& operator=(const ByteSource&) = delete;
    ByteSource(ByteSource&&) = delete;
    ByteSource& operator=(ByteSource&&) = delete;
    virtual ~ByteSource() = default;

    [[nodiscard]] virtual std::uint64_t size() const = 0;
    // The whole file as one span, where it is mapped or in memory; readers then index it.
    [[nodiscard]] virtual std::optional<Bytes> span() const { return std::nullopt; }
    // A local file's descriptor (convert copies from it with copy_file_range), or -1.
    [[nodiscard]] virtual int fd() const { return -1; }
    // Bytes [offset, offset + length); a range past the end is a Truncated error. Meant for what a
    // reader parses (headers, directories, pickles); storages go through stream().
    [[nodiscard]] virtual Expected<Held> read(std::uint64_t offset, std::uint64_t length) const = 0;
    // Bytes [offset, offset + length) to `sink` in pieces of at most `chunk`, never held whole.
    virtual Expected<void> stream(std::uint64_t offset, std::uint64_t length, const Sink& sink,
                                  std::size_t chunk) const;
    // Ranges about to be read: a remote source fetches what it does not hold, close ranges in one
    // request. Nothing to do for a mapped one.
    virtual Expected<void> prefetch(std::span<const Range> /*ranges*/) const { return {}; }
    // Whether reading `range` costs nothing now: mapped, or already fetched.
    [[nodiscard]] virtual bool holds(Range /*range*/) const { return span().has_value(); }
    // Every byte read is still the source's: a local file did not shrink (util/bytes.h's SIGBUS
    // guard), a remote one has the size and ETag of the first reply.
    [[nodiscard]] virtual Expected<void> checkUnchanged() const = 0;

    // Whether reading a few scattered bytes costs nothing (a mapping): readers then read what a
    // remote reader would assume (a zip record's local header, a legacy record's count).
    [[nodiscard]] bool cheap() const { return span().has_value(); }

protected:
    // The error for a range past the end, shared by the subclasses.
    [[nodiscard]] Error pastEnd(std::uint64_t offset, std::uint64_t length) const;
};

using SourcePtr = std::shared_ptr<const ByteSource>;

// Bytes in memory (a fuzzer's input, an inflated gzip, a file downloaded whole), owned or viewed.
class MemorySource final : public ByteSource {
public:
    // Views `bytes`, which `owner` (may be null) keeps alive.
    MemorySource(Bytes bytes, std::shared_ptr<const void> owner) : bytes_(bytes), owner_(std::move(owner)) {}
    [[nodiscard]] std::uint64_t size() const override { return bytes_.size(); }
    [[nodiscard]] std::optional<Bytes> span() const override { return bytes_; }
    [[nodiscard]] Expected<Held> read(std::uint64_t offset, std::uint64_t length) const override;
    [[nodiscard]] Expected<void> checkUnchanged() const override { return {}; }

private:
    Bytes bytes_;
    std::shared_ptr<const void> owner_;
};

// A local file, mapped (MappedFile: read-only, with its SIGBUS guard).
class MappedSource final : public ByteSource {
public:
    static Expected<std::shared_ptr<const MappedSource>> open(const std::string& path);
    explicit MappedSource(std::shared_ptr<const MappedFile> file) : file_(std::move(file)) {}
    [[nodiscard]] std::uint64_t size() const override { return file_->bytes().size(); }
    [[nodiscard]] std::optional<Bytes> span() const override { return file_->bytes(); }
    [[nodiscard]] int fd() const override { return file_->fd(); }
    [[nodiscard]] Expected<Held> read(std::uint64_t offset, std::uint64_t length) const override;
    [[nodiscard]] Expected<void> checkUnchanged() const override { return file_->checkUnchanged(); }
    [[nodiscard]] const std::shared_ptr<const MappedFile>& file() const { return file_; }

private:
    std::shared_ptr<const MappedFile> file_;
};

// `ranges` sorted and merged where less than `gap` bytes apart (what a remote source fetches as
// one request), each clipped to `size`.
[[nodiscard]] std::vector<Range> mergedRanges(std::vector<Range> ranges, std::uint64_t gap, std::uint64_t size);

}  // namespace ckpt::source
