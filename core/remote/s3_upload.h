// An S3 object written as a multipart upload (CreateMultipartUpload, UploadPart, then
// CompleteMultipartUpload, or AbortMultipartUpload), as a ByteSink that takes the writer's bytes in
// order (util/byte_sink.h): nothing is visible at the key until the upload completes, and an upload
// that does not complete is aborted, so no parts are left to pay for.
//
// Memory is bounded: the part being filled and at most `partsInFlight` parts queued or being sent,
// (partsInFlight + 1) x the part size in all. The part size is the AWS CLI's (s3transfer's
// ChunksizeAdjuster): 8 MiB, doubled until the planned size fits in 10,000 parts, at most 5 GiB;
// every part but the last is that size (S3's minimum is 5 MiB). Each part is sent by a worker with
// its own connection, signed with its body's SHA-256, and retried as a read is (429/5xx, 503
// SlowDown, with backoff).
#pragma once

#include "remote/http_client.h"
#include "remote/s3.h"
#include "remote/s3_xml.h"
#include "util/byte_sink.h"
#include "util/bytes.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace ckpt::remote::s3 {

inline constexpr std::uint64_t kMinPartSize = std::uint64_t{5} << 20;
inline constexpr std::uint64_t kDefaultPartSize = std::uint64_t{8} << 20;
inline constexpr std::uint64_t kMaxPartSize = std::uint64_t{5} << 30;
inline constexpr int kMaxParts = 10000;

// The part size for an output of about `plannedBytes` (0: unknown, the default size).
[[nodiscard]] std::uint64_t partSizeFor(std::uint64_t plannedBytes);

struct UploadOptions {
    HttpOptions http;  // its stop cancels the parts being sent
    std::shared_ptr<TransferStats> stats;
    unsigned partsInFlight = 4;
};

class Upload final : public ByteSink {
public:
    // CreateMultipartUpload for `name`; its workers wait for parts.
    static Expected<std::unique_ptr<Upload>> create(const Settings& settings, const ObjectName& name,
                                                    UploadOptions options);
    Upload(const Upload&) = delete;
    Upload& operator=(const Upload&) = delete;
    Upload(Upload&&) = delete;
    Upload& operator=(Upload&&) = delete;
    // Aborts the upload unless it completed or was aborted.
    ~Upload() override;

    // Picks the part size; after the first byte it changes nothing.
    void expectSize(std::uint64_t bytes) override;
    // Fills the current part and hands each full one to a worker, waiting while `partsInFlight` are
    // out. A part that failed is this call's error (and every later one's).
    Expected<void> append(Bytes data) override;
    // Sends the last part, waits for every part, then CompleteMultipartUpload; unless `replace`, with
    // If-None-Match: * so an object that appeared at the key since it was checked is not replaced.
    // A reply that is an <Error> (S3 answers 200 first) is a failure. On failure the upload is aborted.
    Expected<void> complete(bool replace);
    // `e` after abort(), saying whether the upload was aborted ("nothing is at the key") or not.
    [[nodiscard]] Error abandon(Error e);
    // AbortMultipartUpload (once; a stopped run's too: it has a connection of its own). Its error
    // when the server did not confirm it.
    Expected<void> abort();

    [[nodiscard]] std::uint64_t bytes() const { return appended_; }
    [[nodiscard]] std::uint64_t partSize() const { return partSize_; }
    [[nodiscard]] int parts() const { return nextPart_ - 1; }
    [[nodiscard]] const std::string& url() const { return url_; }

private:
    struct Part {
        int number = 0;
        std::vector<std::byte> bytes;
    };
    Upload(Credentials credentials, std::string url, std::string uploadId, UploadOptions options);
    Expected<void> submit();        // the current part to the queue, once fewer than partsInFlight are out
    void work(HttpClient& client);  // a worker's loop
    Expected<std::string> send(HttpClient& client, const Part& part);  // UploadPart: its ETag
    void stopWorkers();  // lets the workers end once the queue is empty, and joins them
    [[nodiscard]] std::string uploadQuery() const;

    Credentials credentials_;
    UploadOptions options_;
    std::string url_;
    std::string uploadId_;
    std::uint64_t partSize_ = kDefaultPartSize;
    std::uint64_t appended_ = 0;
    int nextPart_ = 1;
    std::vector<std::byte> current_;
    bool finished_ = false;  // completed or aborted

    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<Part> queue_;
    unsigned busy_ = 0;
    bool closing_ = false;
    std::optional<Error> failed_;
    std::vector<UploadedPart> done_;
    std::vector<std::jthread> workers_;
};

// Whether an object is at `name` (HEAD: 200 yes, 404 no; anything else is its error).
[[nodiscard]] Expected<bool> objectExists(const Settings& settings, const ObjectName& name, const HttpOptions& http,
                                          const std::shared_ptr<TransferStats>& stats);

}  // namespace ckpt::remote::s3
