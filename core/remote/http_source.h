// A file over HTTP(S) as a byte source (source/byte_source.h): the ranges a reader asks for, read
// with range requests. It knows no format: the readers decide what to read, and say ahead of time
// what they will (prefetch), so that ranges less than 256 KiB apart share one request. Opened with a
// pool of connections (connections.h: a folder's members are), a prefetch's requests are made
// several at a time, and prefetchAll makes those of several files together.
//
// The first request is a range of the head or of the tail (a suffix range): its Content-Range
// gives the file's size and its ETag the version every later reply must match, without a HEAD.
// What a reader reads is kept (the directories and pickles it parses); small reads of storages go
// through 1 MiB blocks, kept up to 256 MiB, so neighbouring storages share a request; large ones
// are streamed from the server to the caller, never kept.
#pragma once

#include "remote/connections.h"
#include "remote/http_client.h"
#include "source/byte_source.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ckpt::remote {

class HttpSource final : public source::ByteSource {
public:
    enum class First : std::uint8_t { Head, Tail };
    // Opens `url` with one request of `firstBytes` from its head or its tail. `connections`: where a
    // prefetch makes its requests several at a time (none: one after another on `client`).
    static Expected<std::shared_ptr<HttpSource>> open(std::shared_ptr<HttpClient> client, std::string url, First first,
                                                      std::uint64_t firstBytes,
                                                      std::shared_ptr<const Connections> connections = nullptr);

    // Ranges of one source about to be read (prefetchAll's unit).
    struct Wanted {
        const HttpSource* source = nullptr;
        std::vector<source::Range> ranges;
    };
    // What prefetch does for each of `wanted`, their requests made together on `connections`; the
    // first failure, once every request has ended.
    static Expected<void> prefetchAll(const Connections& connections, std::span<const Wanted> wanted);

    [[nodiscard]] std::uint64_t size() const override { return identity_.size; }
    [[nodiscard]] Expected<source::Held> read(std::uint64_t offset, std::uint64_t length) const override;
    Expected<void> stream(std::uint64_t offset, std::uint64_t length, const source::Sink& sink,
                          std::size_t chunk) const override;
    Expected<void> prefetch(std::span<const source::Range> ranges) const override;
    [[nodiscard]] bool holds(source::Range range) const override;
    // One more request for the file's size and ETag, compared with the first reply's.
    [[nodiscard]] Expected<void> checkUnchanged() const override;

    [[nodiscard]] const std::string& etag() const { return identity_.etag; }
    [[nodiscard]] const std::string& url() const { return url_; }

    static constexpr std::uint64_t kBlock = std::uint64_t{1} << 20;         // cache block and "small read"
    static constexpr std::uint64_t kCacheLimit = std::uint64_t{256} << 20;  // cached small reads, at most
    static constexpr std::uint64_t kMergeGap = std::uint64_t{256} << 10;    // prefetched ranges sharing a request

private:
    HttpSource() = default;
    // The held span that covers [offset, offset + length), if one does (mutex_ held).
    [[nodiscard]] std::optional<source::Held> heldLocked(std::uint64_t offset, std::uint64_t length) const;
    // Fetches [offset, offset + length) and keeps it (mutex_ held).
    Expected<source::Held> fetchLocked(std::uint64_t offset, std::uint64_t length) const;
    // The requests that fetch what of `ranges` is not held yet, ranges close together merged.
    [[nodiscard]] std::vector<source::Range> missing(std::span<const source::Range> ranges) const;
    // Fetches `range` on `client` (mutex_ not held: others run beside it) and keeps it.
    Expected<void> fetchOn(HttpClient& client, source::Range range) const;

    std::shared_ptr<HttpClient> client_;
    std::shared_ptr<const Connections> connections_;
    std::string url_;
    mutable std::optional<FileIdentity> identityOpt_;
    FileIdentity identity_;
    // What was fetched and kept, by where it starts; spans may overlap (each read is one of them).
    mutable std::map<std::uint64_t, std::shared_ptr<const std::vector<std::byte>>> held_;
    mutable std::uint64_t cached_ = 0;  // bytes the block cache added
    mutable std::mutex mutex_;
};

}  // namespace ckpt::remote
