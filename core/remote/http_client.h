// The HTTP side of reading a remote file: range GETs with libcurl (HTTP/2 where the server offers
// it, connections kept between requests), redirects followed one hop at a time (so credentials are
// scoped to each hop's host, and a loop is seen), timeouts (connect, and a stall: below 1 KiB/s for
// the low-speed time), retries with backoff (or the server's Retry-After) on 429/5xx and failed connections, and
// proxies from the environment as curl reads them.
//
// Every reply to a range request is checked before its bytes are trusted: 206 with a Content-Range
// that is exactly the range asked for, the total size and ETag the first reply gave, and no more
// and no fewer body bytes than the range; a server that ignores Range (200 and the whole body) is
// cut off at once. Errors are one line, with every credential redacted.
#pragma once

#include "remote/credentials.h"
#include "util/bytes.h"
#include "util/error.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::remote {

struct HttpOptions {
    long connectTimeoutS = 20;
    long lowSpeedTimeS = 30;               // a transfer under 1 KiB/s this long is a stall
    int retries = 3;                       // after the first try, on 429/5xx and failed connections
    long backoffMs = 250;                  // doubled at each retry, unless the server's Retry-After says longer
    std::int64_t longestRetryAfterS = 60;  // a longer Retry-After ends the request with the server's answer
    int maxRedirects = 10;
    std::string caBundle;  // CA certificates to trust instead of the system's ($CURL_CA_BUNDLE, $SSL_CERT_FILE)
    std::stop_token stop;  // a stop request ends the transfer in progress with Cancelled (the window's Cancel)
    // From the environment: CKPTSCOPE_HTTP_TIMEOUT (seconds, both timeouts), CKPTSCOPE_HTTP_RETRIES,
    // CURL_CA_BUNDLE or SSL_CERT_FILE.
    [[nodiscard]] static HttpOptions fromEnvironment();
};

// What a run sent and received: one request per HTTP exchange (a redirect hop is one), and the
// body bytes of the replies that carried the file's bytes.
struct TransferStats {
    std::atomic<std::uint64_t> requests{0};
    std::atomic<std::uint64_t> bytesRead{0};
    // The size a server that answered a range request with the whole file gave for it (its
    // Content-Length; 0 when it gave none): what a whole download would take (the window says so).
    std::atomic<std::uint64_t> wholeFileBytes{0};
    // Called as body bytes arrive, with the bytes received so far by this run: the command line's
    // progress line, the window's busy bar (both pace it with util/progress.h's throttled()).
    std::function<void(std::uint64_t)> progress;
};

// The start of the message a server that ignores Range gets (core/remote falls back on a whole
// download with --download).
inline constexpr std::string_view kNoRangesMessage = "the server does not support range requests";

struct ByteRange {
    enum class Kind : std::uint8_t { Span, Suffix };
    Kind kind = Kind::Span;
    std::uint64_t offset = 0;  // Span
    std::uint64_t length = 0;  // Span: bytes from offset; Suffix: the last `length` bytes
};

// What a file looked like in the first reply: its size (Content-Range total) and ETag.
struct FileIdentity {
    std::uint64_t size = 0;
    std::string etag;  // empty when the server sends none
};

// The body a reply to range request `asked` must carry, once its status (206) and its Content-Range
// and ETag headers are checked: the first byte it holds and how many bytes follow, no more and no
// fewer. Refused: the whole file for a range (200: kNoRangesMessage), a Content-Range that is no
// byte range or not the range asked for, and a size or ETag other than `identity`'s, which the
// first reply sets. Every reply a range GET gets goes through this (fuzzed alone: fuzz_remote).
struct RangeReply {
    std::uint64_t first = 0;
    std::uint64_t length = 0;
};
[[nodiscard]] Expected<RangeReply> checkRangeReply(const ByteRange& asked, long status, const std::string& contentRange,
                                                   const std::string& etag, std::optional<FileIdentity>& identity);

// A request whose body is in memory, for S3's writes (s3_upload.h): sent, signed and retried as a
// read is (429/5xx and failed connections, with backoff), following no redirect.
struct HttpRequest {
    std::string method;  // PUT, POST, DELETE, HEAD
    std::string url;
    std::vector<std::string> headers;               // "Name: value", besides the signature's
    Bytes body;                                     // held by the caller until send() returns
    std::string payloadHash;                        // the body's hex SHA-256 (for the signature); computed when empty
    std::vector<long> accept{200};                  // the statuses that are answers; any other is an error
    std::size_t replyLimit = std::size_t{1} << 20;  // the most of an answer's body that is kept
};

struct HttpReply {
    long status = 0;
    std::map<std::string, std::string> headers;  // lowercased names
    std::string body;
};

class HttpClient {
public:
    HttpClient(Credentials credentials, HttpOptions options, std::shared_ptr<TransferStats> stats);
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;
    HttpClient(HttpClient&&) = delete;
    HttpClient& operator=(HttpClient&&) = delete;
    virtual ~HttpClient();

    // GETs `range` of `url` and hands the body to `sink` in pieces, in order (`sink` returning false
    // stops with Cancelled). `identity`: unset on the first request of a file, which it then
    // receives; set, every reply must agree with it. Returns where the body starts in the file.
    // Virtual for the fuzzer's client that serves a file from memory (tests/fuzz/fuzz_remote.cpp).
    virtual Expected<std::uint64_t> getRange(const std::string& url, const ByteRange& range,
                                             std::optional<FileIdentity>& identity,
                                             const std::function<bool(Bytes)>& sink);
    // GETs a small document whole (the Hub API's JSON), at most `maxBytes`.
    Expected<std::string> getText(const std::string& url, std::size_t maxBytes);
    // GETs a whole file (no Range) to `sink`, at most `maxBytes`, and exactly its Content-Length
    // when the server gives one: the --download path for servers without ranges.
    Expected<std::uint64_t> getWhole(const std::string& url, std::uint64_t maxBytes,
                                     const std::function<bool(Bytes)>& sink);

    // Sends `request`; a reply whose status `accept` names is returned (its body up to replyLimit,
    // Limit past it), any other status is the one-line error a read gets (S3's error code, the
    // credentials' note on 401/403, the region of a 301).
    Expected<HttpReply> send(const HttpRequest& request);

    // Another connection with this one's credentials, options and statistics, sharing the redirects
    // it learns (a Hub file's CDN URL is asked once, whichever connection asks): for requests made
    // beside this one's (connections.h).
    [[nodiscard]] std::shared_ptr<HttpClient> another() const;

    [[nodiscard]] const Redactor& redactor() const { return credentials_.redactor; }
    [[nodiscard]] const std::shared_ptr<TransferStats>& stats() const { return stats_; }

    struct Exchange;  // one exchange's state, shared with curl's callbacks (http_client.cpp)

private:
    Expected<void> perform(const std::string& url, const std::optional<ByteRange>& range, Exchange& x);
    Expected<void> fetch(const std::string& url, const std::optional<ByteRange>& range, Exchange& x);
    // A whole GET; a body past `maxBytes` ends it, Limit.
    Expected<void> fetchAtMost(const std::string& url, Exchange& x, std::uint64_t maxBytes);
    [[nodiscard]] Error fail(ErrorCode code, const std::string& url, const std::string& message) const;
    // The error of a reply whose status is not the one asked for (fetch's, send's).
    [[nodiscard]] Error statusError(const std::string& url, const Exchange& x) const;

    Credentials credentials_;
    HttpOptions options_;
    std::shared_ptr<TransferStats> stats_;
    void* curl_ = nullptr;  // CURL*, reused so connections are kept
    std::mutex mutex_;      // one transfer at a time on the handle
    // Where a URL was last redirected to (the Hub's resolve URL to its CDN): later ranges of the same
    // file go there directly, on this connection or on another() of it.
    struct Redirects {
        std::mutex mutex;
        std::map<std::string, std::string> to;
    };
    std::shared_ptr<Redirects> redirects_ = std::make_shared<Redirects>();
};

}  // namespace ckpt::remote
