// A remote file read piece by piece: a sparse in-memory image of the whole file (an anonymous
// mapping of its size, untouched pages taking no memory) into which the fetched ranges are copied,
// so the format readers of core/archive and core/checkpoint parse it as they parse a mapped file,
// and a read-through block cache for small reads (neighbouring small storages share a request).
// Large reads are streamed from the server to the caller, never stored.
//
// The first request is a range of the head or of the tail (a suffix range): its Content-Range
// gives the file's size and its ETag the version every later reply must match, without a HEAD.
#pragma once

#include "remote/http_client.h"
#include "util/bytes.h"
#include "util/error.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ckpt::remote {

class RemoteFile {
public:
    enum class First : std::uint8_t { Head, Tail };
    // Opens `url` with one request of `firstBytes` from its head or its tail.
    static Expected<std::shared_ptr<RemoteFile>> open(std::shared_ptr<HttpClient> client, std::string url, First first,
                                                      std::uint64_t firstBytes);
    RemoteFile(const RemoteFile&) = delete;
    RemoteFile& operator=(const RemoteFile&) = delete;
    RemoteFile(RemoteFile&&) = delete;
    RemoteFile& operator=(RemoteFile&&) = delete;
    ~RemoteFile();

    [[nodiscard]] std::uint64_t size() const { return identity_.size; }
    [[nodiscard]] const std::string& etag() const { return identity_.etag; }
    [[nodiscard]] const std::string& url() const { return url_; }
    // The whole file's extent; only the ranges fetched hold its bytes (the rest reads as zeros).
    [[nodiscard]] Bytes image() const;
    [[nodiscard]] bool holds(std::uint64_t offset, std::uint64_t length) const;

    // Fetches `ranges` (offset, length) into the image, skipping what it holds, merging ranges less
    // than `mergeGap` apart into one request.
    Expected<void> fetch(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges, std::uint64_t mergeGap);
    // Writes `bytes` at `offset` of the image where the file's own are not held: what a format
    // reader takes them for until they are fetched (a torch-shaped zip local header, a legacy
    // record's element count), checked by whoever reads the bytes behind them.
    void assume(std::uint64_t offset, Bytes bytes);
    // Bytes [offset, offset + length) to `sink` in pieces of at most `chunk`: from the image or the
    // block cache for small reads, streamed from the server for large ones.
    Expected<void> read(std::uint64_t offset, std::uint64_t length, const std::function<bool(Bytes)>& sink,
                        std::size_t chunk);
    // One more request for the file's size and ETag, compared with the first reply's.
    Expected<void> checkUnchanged();

    static constexpr std::uint64_t kBlock = std::uint64_t{1} << 20;         // cache block and "small read"
    static constexpr std::uint64_t kCacheLimit = std::uint64_t{256} << 20;  // cached small reads, at most

private:
    RemoteFile() = default;
    Expected<void> fetchSpan(std::uint64_t offset, std::uint64_t length);  // into the image
    void markHeld(std::uint64_t offset, std::uint64_t end);

    std::shared_ptr<HttpClient> client_;
    std::string url_;
    std::optional<FileIdentity> identityOpt_;
    FileIdentity identity_;
    std::byte* image_ = nullptr;
    std::size_t mapped_ = 0;
    std::map<std::uint64_t, std::uint64_t> held_;  // start -> end of the ranges the image holds
    std::atomic<std::uint64_t> cached_{0};         // bytes the block cache added
    mutable std::mutex mutex_;
};

}  // namespace ckpt::remote
