#include "remote/http_client.h"

#include "remote/location.h"
#include "remote/reply_parse.h"
#include "remote/s3_xml.h"
#include "remote/sigv4.h"
#include "util/bytes.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <curl/curl.h>
#include <set>
#include <thread>
#include <vector>

namespace ckpt::remote {
namespace {

constexpr long kStatusOk = 200;
constexpr long kStatusPartial = 206;
constexpr long kStatusUnauthorized = 401;
constexpr long kStatusForbidden = 403;
constexpr long kStatusTooMany = 429;
constexpr long kStatusServerError = 500;
constexpr std::size_t kErrorBodyCap = 4096;  // what is kept of an error reply's body for its message
constexpr long kLowSpeedBytes = 1024;

struct CurlGlobal {
    CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
    CurlGlobal(const CurlGlobal&) = delete;
    CurlGlobal& operator=(const CurlGlobal&) = delete;
    CurlGlobal(CurlGlobal&&) = delete;
    CurlGlobal& operator=(CurlGlobal&&) = delete;
    ~CurlGlobal() { curl_global_cleanup(); }
};

std::string lowered(std::string s)
{
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

long envLong(const char* name, long fallback)
{
    const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read before any thread starts
    if (v == nullptr) {
        return fallback;
    }
    long out = 0;
    const std::string_view s(v);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size() && out >= 0 ? out : fallback;
}

// Text a server sent (a header's value), as a message holds it: a header may be 100 KiB, a
// message is one short line.
std::string clipped(std::string_view text)
{
    constexpr std::size_t kShown = 200;
    return text.size() <= kShown ? std::string(text) : std::string(text.substr(0, kShown)) + "...";
}

std::string rangeText(const ByteRange& r)
{
    if (r.kind == ByteRange::Kind::Suffix) {
        return "the last " + std::to_string(r.length) + " bytes";
    }
    return "bytes " + std::to_string(r.offset) + "-" + std::to_string(r.offset + r.length - 1);
}

bool retryableStatus(long status)
{
    return status == kStatusTooMany || (status >= kStatusServerError && status != 501 && status != 505);
}

bool retryableCurl(CURLcode c)
{
    return c == CURLE_COULDNT_CONNECT || c == CURLE_GOT_NOTHING || c == CURLE_SEND_ERROR || c == CURLE_RECV_ERROR ||
           c == CURLE_HTTP2 || c == CURLE_HTTP2_STREAM;
}

// Sleeps `wait`, or less when a stop is requested; whether it slept the whole time.
bool sleepUnlessStopped(std::chrono::milliseconds wait, const std::stop_token& stop)
{
    constexpr auto kStep = std::chrono::milliseconds(50);
    const auto until = std::chrono::steady_clock::now() + wait;
    while (!stop.stop_requested()) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= until) {
            return true;
        }
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(kStep, until - now));
    }
    return false;
}

}  // namespace

HttpOptions HttpOptions::fromEnvironment()
{
    HttpOptions o;
    o.lowSpeedTimeS = envLong("CKPTSCOPE_HTTP_TIMEOUT", o.lowSpeedTimeS);
    o.connectTimeoutS = std::min(o.connectTimeoutS, envLong("CKPTSCOPE_HTTP_TIMEOUT", o.connectTimeoutS));
    o.retries = static_cast<int>(envLong("CKPTSCOPE_HTTP_RETRIES", o.retries));
    // As the curl tool reads them (libcurl itself reads neither).
    for (const char* name : {"CURL_CA_BUNDLE", "SSL_CERT_FILE"}) {
        const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read before any thread starts
        if (v != nullptr && *v != '\0') {
            o.caBundle = v;
            break;
        }
    }
    return o;
}

// One HTTP exchange's state, shared with curl's callbacks.
struct HttpClient::Exchange {
    // Request side.
    const HttpRequest* request = nullptr;  // send(): its method, headers and body; a GET otherwise
    const std::function<bool(Bytes)>* sink = nullptr;
    const std::function<void(std::uint64_t)>* progress = nullptr;
    const std::stop_token* stop = nullptr;
    std::uint64_t received = 0;  // the run's bytes before this exchange, then with its own
    long successStatus = kStatusPartial;
    // Checks the reply's status and headers before its first body byte; sets bodyLimit.
    std::function<std::optional<Error>(Exchange&)> onHeaders;
    std::uint64_t bodyLimit = UINT64_MAX;
    // Reply side.
    long status = 0;
    std::map<std::string, std::string> headers;  // lowercased names, of the last reply
    std::string errorBody;
    std::uint64_t delivered = 0;
    bool headersChecked = false;
    std::optional<Error> abort;  // why a callback stopped the transfer

    void reset()
    {
        status = 0;
        headers.clear();
        errorBody.clear();
        delivered = 0;
        headersChecked = false;
        abort.reset();
    }
    [[nodiscard]] std::string header(const std::string& name) const
    {
        auto it = headers.find(name);
        return it == headers.end() ? std::string() : it->second;
    }
    [[nodiscard]] bool redirect() const { return status >= 300 && status < 400 && status != 304; }
};

namespace {

// An exchange whose body goes to `sink` and counts on from the run's bytes so far (its progress
// line's total), answered by `successStatus` (206 for a range, 200 for a whole file).
HttpClient::Exchange exchangeInto(const TransferStats& stats, const std::function<bool(Bytes)>& sink,
                                  long successStatus)
{
    HttpClient::Exchange x;
    x.sink = &sink;
    x.progress = &stats.progress;
    x.received = stats.bytesRead.load(std::memory_order_relaxed);
    x.successStatus = successStatus;
    return x;
}

}  // namespace

namespace {

std::size_t onHeader(char* data, std::size_t size, std::size_t n, void* user)
{
    auto& x = *static_cast<HttpClient::Exchange*>(user);  // NOLINT: curl's void* contract
    const std::string_view line(data, size * n);
    if (line.starts_with("HTTP/")) {  // a new reply (after 100 Continue, or a proxy's CONNECT)
        x.headers.clear();
        const auto sp = line.find(' ');
        x.status =
            sp == std::string_view::npos ? 0 : static_cast<long>(parseNumber(line.substr(sp + 1, 3)).value_or(0));
        return size * n;
    }
    const auto colon = line.find(':');
    if (colon != std::string_view::npos) {
        std::string value(line.substr(colon + 1));
        while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back())) != 0) {
            value.pop_back();
        }
        value.erase(0, value.find_first_not_of(" \t"));
        x.headers[lowered(std::string(line.substr(0, colon)))] = value;
    }
    return size * n;
}

std::size_t onBody(char* data, std::size_t size, std::size_t n, void* user)
{
    auto& x = *static_cast<HttpClient::Exchange*>(user);  // NOLINT: curl's void* contract
    const std::size_t len = size * n;
    if (x.redirect()) {
        return x.errorBody.size() < kErrorBodyCap ? len : 0;  // a redirect's body is never read far
    }
    if (x.status != x.successStatus) {
        if (x.status == kStatusOk && x.successStatus == kStatusPartial && !x.headersChecked && x.onHeaders) {
            x.headersChecked = true;
            x.abort = x.onHeaders(x);
            // onHeaders takes the whole file a range asked for all of by making 200 the success.
            if (x.abort || x.successStatus != kStatusOk) {
                return 0;
            }
            return onBody(data, size, n, user);
        }
        if (x.errorBody.size() >= kErrorBodyCap) {
            return 0;  // enough of an error page; an endless one ends here
        }
        x.errorBody.append(data, std::min(len, kErrorBodyCap - x.errorBody.size()));
        return len;
    }
    if (!x.headersChecked) {
        x.headersChecked = true;
        if (x.onHeaders) {
            x.abort = x.onHeaders(x);
            if (x.abort) {
                return 0;
            }
        }
    }
    if (len > x.bodyLimit - x.delivered) {
        x.abort = makeError(ErrorCode::Corrupt,
                            "the server sent more bytes than the " + std::to_string(x.bodyLimit) + " asked for");
        return 0;
    }
    x.delivered += len;
    if (x.progress != nullptr && *x.progress) {
        x.received += len;
        (*x.progress)(x.received);
    }
    // curl's char buffer as bytes
    if (x.sink != nullptr && !(*x.sink)(Bytes(reinterpret_cast<const std::byte*>(data), len))) {
        x.abort = makeError(ErrorCode::Cancelled, "cancelled");
        return 0;
    }
    return len;
}

// curl's progress callback, several times a second even while nothing arrives: a stop request
// aborts the transfer.
int onProgress(void* user, curl_off_t /*dltotal*/, curl_off_t /*dlnow*/, curl_off_t /*ultotal*/, curl_off_t /*ulnow*/)
{
    auto& x = *static_cast<HttpClient::Exchange*>(user);  // NOLINT: curl's void* contract
    if (x.stop != nullptr && x.stop->stop_requested()) {
        x.abort = makeError(ErrorCode::Cancelled, "cancelled");
        return 1;
    }
    return 0;
}

}  // namespace

HttpClient::HttpClient(Credentials credentials, HttpOptions options, std::shared_ptr<TransferStats> stats)
    : credentials_(std::move(credentials)), options_(std::move(options)), stats_(std::move(stats))
{
    static const CurlGlobal global;
    if (!stats_) {
        stats_ = std::make_shared<TransferStats>();
    }
    curl_ = curl_easy_init();
}

std::shared_ptr<HttpClient> HttpClient::another() const
{
    auto c = std::make_shared<HttpClient>(credentials_, options_, stats_);
    c->redirects_ = redirects_;
    return c;
}

HttpClient::~HttpClient()
{
    if (curl_ != nullptr) {
        curl_easy_cleanup(static_cast<CURL*>(curl_));
    }
}

Error HttpClient::fail(ErrorCode code, const std::string& url, const std::string& message) const
{
    Error e = makeError(code, redactor().apply(message));
    e.path = redactor().apply(url);
    return e;
}

// One request to one URL (no redirect followed), retried on 429/5xx and failed connections while
// no body byte has been handed on.
Expected<void> HttpClient::perform(const std::string& url, const std::optional<ByteRange>& range, Exchange& x)
{
    auto* c = static_cast<CURL*>(curl_);
    if (c == nullptr) {
        return fail(ErrorCode::Internal, url, "libcurl could not be initialised");
    }
    long backoff = options_.backoffMs;
    x.stop = &options_.stop;
    for (int attempt = 0;; ++attempt) {
        if (options_.stop.stop_requested()) {
            return fail(ErrorCode::Cancelled, url, "cancelled");
        }
        x.reset();
        curl_easy_reset(c);
        std::array<char, CURL_ERROR_SIZE> errbuf{};
        curl_slist* headers = nullptr;
        if (range) {
            const std::string value = range->kind == ByteRange::Kind::Suffix
                                          ? "Range: bytes=-" + std::to_string(range->length)
                                          : "Range: bytes=" + std::to_string(range->offset) + "-" +
                                                std::to_string(range->offset + range->length - 1);
            headers = curl_slist_append(headers, value.c_str());
            // A compressed reply's bytes are not the file's: ranges are of the file itself.
            headers = curl_slist_append(headers, "Accept-Encoding: identity");
        }
        for (const auto& h : credentials_.headersFor(originOf(url))) {
            headers = curl_slist_append(headers, h.c_str());
        }
        const HttpRequest* req = x.request;
        if (req != nullptr) {
            for (const auto& h : req->headers) {
                headers = curl_slist_append(headers, h.c_str());
            }
            // No 100-continue round trip before a part's body.
            headers = curl_slist_append(headers, "Expect:");
            // Bytes, never the form curl would name a POST body (a server may read it as one).
            const bool typed = std::any_of(req->headers.begin(), req->headers.end(), [](const std::string& h) {
                return lowered(h.substr(0, h.find(':'))) == "content-type";
            });
            if (!typed) {
                headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
            }
        }
        // Signed at each try: a signature carries its time, and S3 refuses one 15 minutes old.
        if (credentials_.signer && credentials_.signer->signs(originOf(url))) {
            const std::string method = req != nullptr ? req->method : std::string(kMethodGet);
            const std::string hash = req != nullptr ? req->payloadHash : std::string(sigv4::kEmptyPayloadHash);
            for (const auto& h : credentials_.signer->headersFor(method, url, hash)) {
                headers = curl_slist_append(headers, h.c_str());
            }
        }
        curl_easy_setopt(c, CURLOPT_URL, url.c_str());
        if (req == nullptr) {
            curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
        } else if (req->method == kMethodHead) {
            curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        } else {
            curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method.c_str());
            if (req->method != kMethodDelete || !req->body.empty()) {
                // The body from memory, as it is (curl copies nothing and adds no encoding).
                const char* body = req->body.empty() ? "" : reinterpret_cast<const char*>(req->body.data());
                curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
                curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req->body.size()));
            }
        }
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
        curl_easy_setopt(c, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
        if (!options_.caBundle.empty()) {
            curl_easy_setopt(c, CURLOPT_CAINFO, options_.caBundle.c_str());
        }
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, options_.connectTimeoutS);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, kLowSpeedBytes);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, options_.lowSpeedTimeS);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_USERAGENT, "ckptscope");
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf.data());
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, onHeader);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, onBody);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
        if (options_.stop.stop_possible()) {
            curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
            curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, onProgress);
            curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
        }
        stats_->requests.fetch_add(1, std::memory_order_relaxed);
        const CURLcode rc = curl_easy_perform(c);
        curl_slist_free_all(headers);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        x.status = status;
        if (x.status == x.successStatus && x.request == nullptr) {
            stats_->bytesRead.fetch_add(x.delivered, std::memory_order_relaxed);
        }
        if (x.redirect() && rc == CURLE_OK) {
            return {};
        }
        if (x.abort) {
            return fail(x.abort->code, url, x.abort->message);
        }
        const bool retry = x.delivered == 0 && attempt < options_.retries &&
                           ((rc == CURLE_OK && retryableStatus(x.status)) || retryableCurl(rc));
        if (retry) {
            // The server's Retry-After, where it gives one, else the backoff; a server that asks
            // for longer than a user would wait at a prompt gets its answer said instead.
            auto wait = std::chrono::milliseconds(backoff);
            if (const auto after = retryAfterSeconds(x.header("retry-after"))) {
                if (*after > options_.longestRetryAfterS) {
                    return fail(ErrorCode::Io, url,
                                "HTTP " + std::to_string(x.status) + ": the server asks to be asked again in " +
                                    std::to_string(*after) + " s (Retry-After), longer than ckptscope waits (" +
                                    std::to_string(options_.longestRetryAfterS) + " s)");
                }
                wait = std::max(wait, std::chrono::milliseconds(*after * 1000));
            }
            if (!sleepUnlessStopped(wait, options_.stop)) {
                return fail(ErrorCode::Cancelled, url, "cancelled");
            }
            backoff *= 2;
            continue;
        }
        if (rc == CURLE_OPERATION_TIMEDOUT) {
            return fail(ErrorCode::Io, url,
                        x.delivered == 0 && x.status == 0
                            ? "the server did not answer within " + std::to_string(options_.lowSpeedTimeS) + " s"
                            : "the transfer stalled (under 1 KiB/s for " + std::to_string(options_.lowSpeedTimeS) +
                                  " s, after " + std::to_string(x.delivered) + " bytes)");
        }
        if (rc == CURLE_PARTIAL_FILE) {
            return fail(ErrorCode::Truncated, url,
                        "the reply was cut off after " + std::to_string(x.delivered) + " of its bytes (truncated)");
        }
        if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && x.errorBody.size() >= kErrorBodyCap)) {
            std::string what = errbuf[0] != '\0' ? std::string(errbuf.data()) : curl_easy_strerror(rc);
            const bool tls = rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_PEER_FAILED_VERIFICATION ||
                             rc == CURLE_SSL_CERTPROBLEM || rc == CURLE_SSL_CACERT_BADFILE;
            return fail(ErrorCode::Io, url, (tls ? "TLS error: " : "cannot fetch: ") + what);
        }
        return {};
    }
}

// One request, following redirects one hop at a time.
Expected<void> HttpClient::fetch(const std::string& url, const std::optional<ByteRange>& range, Exchange& x)
{
    std::string hop = url;
    std::set<std::string> seen{hop};
    for (int hops = 0;; ++hops) {
        if (auto done = perform(hop, range, x); !done) {
            return done;
        }
        if (!x.redirect()) {
            break;
        }
        char* next = nullptr;
        curl_easy_getinfo(static_cast<CURL*>(curl_), CURLINFO_REDIRECT_URL, &next);
        if (next == nullptr || *next == '\0') {
            if (!x.header("x-amz-bucket-region").empty()) {
                return statusError(url, x);
            }
            return fail(ErrorCode::Io, url,
                        "HTTP " + std::to_string(x.status) + " redirect without a Location to follow");
        }
        const std::string target(next);
        if (!isRemote(target) || target.starts_with("hf://") || target.starts_with("s3://")) {
            return fail(ErrorCode::Io, url, "redirected to something that is no http(s) URL");
        }
        if (!seen.insert(target).second) {
            return fail(ErrorCode::Io, url, "redirect loop: " + target + " was visited already");
        }
        if (hops + 1 >= options_.maxRedirects) {
            return fail(ErrorCode::Io, url, "more than " + std::to_string(options_.maxRedirects) + " redirects");
        }
        hop = target;
    }
    if (hop != url) {
        const std::lock_guard learnt(redirects_->mutex);
        redirects_->to[url] = hop;
    }
    if (x.status == x.successStatus) {
        return {};
    }
    return statusError(url, x);
}

Error HttpClient::statusError(const std::string& url, const Exchange& x) const
{
    if (x.redirect()) {
        // S3's answer to a request for a bucket in another region: a 301 naming the region.
        if (const std::string region = x.header("x-amz-bucket-region"); !region.empty()) {
            return fail(ErrorCode::Io, url,
                        "HTTP " + std::to_string(x.status) + ": the bucket is in region " + clipped(region) +
                            " (x-amz-bucket-region): set AWS_REGION=" + clipped(region));
        }
    }
    std::string reason = clipped(x.header("x-error-message"));
    const bool signedOrigin = credentials_.signer && credentials_.signer->signs(originOf(url));
    bool credentialsRefused = false;  // an S3 error that is about the credentials, whatever its status
    if (const auto s3 = reason.empty() ? s3::parseErrorReply(x.errorBody) : std::nullopt) {
        credentialsRefused = s3->code == "ExpiredToken" || s3->code == "InvalidToken" ||
                             s3->code == "TokenRefreshRequired" || s3->code == "AuthorizationHeaderMalformed" ||
                             s3->code == "InvalidAccessKeyId";
        // An S3 error document: its code says what is wrong (ExpiredToken, SignatureDoesNotMatch).
        reason = clipped(s3->code + (s3->message.empty() ? "" : ": " + s3->message));
        if (!s3->region.empty()) {
            reason +=
                " (the bucket is in region " + clipped(s3->region) + ": set AWS_REGION=" + clipped(s3->region) + ")";
        }
    } else if (reason.empty()) {
        reason = x.errorBody.substr(0, x.errorBody.find('\n'));
        if (reason.size() > 200 || reason.find('<') != std::string::npos) {
            reason.clear();
        }
    }
    std::string message = "HTTP " + std::to_string(x.status);
    if (!reason.empty()) {
        message += ": " + reason;
    }
    ErrorCode code = ErrorCode::Io;
    if (x.status == kStatusUnauthorized || x.status == kStatusForbidden || (signedOrigin && credentialsRefused)) {
        if (signedOrigin) {
            message += " " + credentials_.signer->refusedNote();
        } else if (originOf(url) == credentials_.hubOrigin) {
            message += credentials_.hubToken
                           ? " (the token in HF_TOKEN or the login file was sent and refused: a gated "
                             "repository needs its access granted on the Hub first)"
                           : " (a gated or private repository: log in with `huggingface-cli login`, "
                             "or set HF_TOKEN)";
        } else {
            message += " (pass credentials with --header 'Authorization: Bearer TOKEN')";
        }
    } else if (x.status == 404) {
        code = ErrorCode::Io;
        message += " (not found)";
    } else if (x.status == 416) {
        message += " (range not satisfiable: the file is empty or shorter than the server said)";
    }
    return fail(code, url, message);
}

Expected<std::uint64_t> HttpClient::getRange(const std::string& url, const ByteRange& range,
                                             std::optional<FileIdentity>& identity,
                                             const std::function<bool(Bytes)>& sink)
{
    const std::lock_guard lock(mutex_);
    Exchange x = exchangeInto(*stats_, sink, kStatusPartial);
    std::optional<RangeReply> got;
    x.onHeaders = [&](Exchange& e) -> std::optional<Error> {
        if (e.status == kStatusOk) {
            const auto length = parseNumber(e.header("content-length"));
            stats_->wholeFileBytes.store(length.value_or(0), std::memory_order_relaxed);
            // A file no longer than the range asked for all of (the first request's 64 KiB): the
            // whole file is the answer the range would have been, and it is arriving. Kept.
            const bool all = range.kind == ByteRange::Kind::Suffix || range.offset == 0;
            if (length && *length > 0 && *length <= range.length && all && !identity) {
                got = RangeReply{0, *length};
                identity = FileIdentity{*length, e.header("etag")};
                e.bodyLimit = *length;
                e.successStatus = kStatusOk;
                return std::nullopt;
            }
            return makeError(ErrorCode::Unsupported,
                             std::string(kNoRangesMessage) + " (it answered " + rangeText(range) +
                                 " with the whole file" + (length ? ", " + humanBytes(*length) : std::string()) +
                                 "); ckptscope reads remote files only from servers that do, or whole with "
                                 "--download");
        }
        auto checked = checkRangeReply(range, e.status, e.header("content-range"), e.header("etag"), identity);
        if (!checked) {
            return checked.error();
        }
        got = *checked;
        e.bodyLimit = checked->length;
        return std::nullopt;
    };
    const std::string target = [&] {
        const std::lock_guard learnt(redirects_->mutex);
        const auto it = redirects_->to.find(url);
        return it != redirects_->to.end() ? it->second : url;
    }();
    if (auto done = fetch(target, range, x); !done) {
        return done.error();
    }
    if (!x.headersChecked) {  // an empty 206 body: the headers are checked all the same
        x.headersChecked = true;
        if (auto bad = x.onHeaders(x)) {
            return fail(bad->code, url, bad->message);
        }
    }
    if (x.delivered != x.bodyLimit) {
        return fail(ErrorCode::Truncated, url,
                    "the reply to " + rangeText(range) + " ended after " + std::to_string(x.delivered) + " of its " +
                        std::to_string(x.bodyLimit) + " bytes (truncated)");
    }
    return got ? got->first : 0;
}

Expected<HttpReply> HttpClient::send(const HttpRequest& request)
{
    const std::lock_guard lock(mutex_);
    HttpRequest req = request;
    if (req.payloadHash.empty()) {
        req.payloadHash =
            sigv4::sha256Hex(std::string_view(reinterpret_cast<const char*>(req.body.data()), req.body.size()));
    }
    HttpReply reply;
    const std::function<bool(Bytes)> sink = [&](Bytes b) {
        reply.body.append(reinterpret_cast<const char*>(b.data()), b.size());
        return true;
    };
    Exchange x;
    x.request = &req;
    x.sink = &sink;
    // The first status accepted is the one whose body is read as the answer; the others' bodies are
    // kept as an error's are (a HEAD has none).
    x.successStatus = req.accept.empty() ? kStatusOk : req.accept.front();
    x.bodyLimit = req.replyLimit;
    auto done = perform(req.url, std::nullopt, x);
    if (!done && x.abort && x.abort->message.starts_with("the server sent more")) {
        return fail(ErrorCode::Limit, req.url, "the reply is larger than " + std::to_string(req.replyLimit) + " bytes");
    }
    if (!done) {
        return done.error();
    }
    if (std::find(req.accept.begin(), req.accept.end(), x.status) == req.accept.end()) {
        return statusError(req.url, x);
    }
    reply.status = x.status;
    reply.headers = x.headers;
    if (x.status != x.successStatus) {
        reply.body = x.errorBody;
    }
    return reply;
}

Expected<RangeReply> checkRangeReply(const ByteRange& asked, long status, const std::string& contentRange,
                                     const std::string& etag, std::optional<FileIdentity>& identity)
{
    if (status == kStatusOk) {
        return makeError(ErrorCode::Unsupported, std::string(kNoRangesMessage) + " (it answered " + rangeText(asked) +
                                                     " with the whole file); ckptscope reads remote files only from "
                                                     "servers that do, or whole with --download");
    }
    const auto got = parseContentRange(contentRange);
    if (status != kStatusPartial || !got) {
        return makeError(ErrorCode::Corrupt,
                         "the server's Content-Range '" + clipped(contentRange) + "' is not a byte range");
    }
    // A span past the end is answered up to the end (the first request knows no size yet).
    const std::uint64_t want =
        asked.kind == ByteRange::Kind::Suffix
            ? std::min(asked.length, got->total)
            : std::min(asked.length, got->total > asked.offset ? got->total - asked.offset : asked.length);
    const std::uint64_t first = asked.kind == ByteRange::Kind::Suffix ? got->total - want : asked.offset;
    if (got->first != first || got->last - got->first + 1 != want) {
        return makeError(ErrorCode::Corrupt, "the server answered " + rangeText(asked) + " with bytes " +
                                                 std::to_string(got->first) + "-" + std::to_string(got->last) +
                                                 " (a wrong Content-Range)");
    }
    if (identity && (got->total != identity->size || etag != identity->etag)) {
        return makeError(ErrorCode::Io, "the file changed on the server while it was read (it was " +
                                            std::to_string(identity->size) + " bytes, ETag " + clipped(identity->etag) +
                                            "; now " + std::to_string(got->total) + " bytes, ETag " + clipped(etag) +
                                            ")");
    }
    if (!identity) {
        identity = FileIdentity{got->total, etag};
    }
    return RangeReply{got->first, want};
}

Expected<std::string> HttpClient::getText(const std::string& url, std::size_t maxBytes)
{
    const std::lock_guard lock(mutex_);
    std::string body;
    const std::function<bool(Bytes)> sink = [&](Bytes b) {
        body.append(reinterpret_cast<const char*>(b.data()), b.size());
        return true;
    };
    Exchange x;
    x.sink = &sink;
    x.successStatus = kStatusOk;
    if (auto done = fetchAtMost(url, x, maxBytes); !done) {
        return done.error();
    }
    return body;
}

Expected<void> HttpClient::fetchAtMost(const std::string& url, Exchange& x, std::uint64_t maxBytes)
{
    x.bodyLimit = maxBytes;
    auto done = fetch(url, std::nullopt, x);
    // A body past the caller's bound (not past a length the server declared, which onHeaders set).
    if (!done && x.abort && x.abort->message.starts_with("the server sent more") && x.bodyLimit == maxBytes) {
        return fail(ErrorCode::Limit, url, "the reply is larger than " + std::to_string(maxBytes) + " bytes");
    }
    return done;
}

Expected<std::uint64_t> HttpClient::getWhole(const std::string& url, std::uint64_t maxBytes,
                                             const std::function<bool(Bytes)>& sink)
{
    const std::lock_guard lock(mutex_);
    Exchange x = exchangeInto(*stats_, sink, kStatusOk);
    x.onHeaders = [&](Exchange& e) -> std::optional<Error> {
        if (const auto length = parseNumber(e.header("content-length"))) {
            if (*length > maxBytes) {
                return makeError(ErrorCode::Limit, "the file is " + std::to_string(*length) + " bytes, more than the " +
                                                       std::to_string(maxBytes) + " a download may take");
            }
            e.bodyLimit = *length;
        }
        return std::nullopt;
    };
    if (auto done = fetchAtMost(url, x, maxBytes); !done) {
        return done.error();
    }
    if (const auto length = parseNumber(x.header("content-length")); length && x.delivered != *length) {
        return fail(ErrorCode::Truncated, url,
                    "the download ended after " + std::to_string(x.delivered) + " of its " + std::to_string(*length) +
                        " bytes (truncated)");
    }
    return x.delivered;
}

}  // namespace ckpt::remote
