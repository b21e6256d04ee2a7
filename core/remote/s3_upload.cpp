#include "remote/s3_upload.h"

#include "remote/sigv4.h"

#include <algorithm>
#include <utility>

namespace ckpt::remote::s3 {
namespace {

constexpr long kStatusOk = 200;
constexpr long kStatusNoContent = 204;
constexpr long kStatusNotFound = 404;
constexpr long kStatusPreconditionFailed = 412;

Error onUpload(Error e, const std::string& url, const std::string& what)
{
    e.message = what + ": " + e.message;
    e.path = url;
    if (e.code == ErrorCode::Io || e.code == ErrorCode::Corrupt || e.code == ErrorCode::Truncated) {
        e.code = ErrorCode::WriteFailed;  // a write that failed, whatever the transport said
    }
    return e;
}

}  // namespace

std::uint64_t partSizeFor(std::uint64_t plannedBytes)
{
    std::uint64_t size = kDefaultPartSize;
    while (size < kMaxPartSize && (plannedBytes + size - 1) / size > static_cast<std::uint64_t>(kMaxParts)) {
        size *= 2;
    }
    return std::clamp(size, kMinPartSize, kMaxPartSize);
}

Expected<std::unique_ptr<Upload>> Upload::create(const Settings& settings, const ObjectName& name,
                                                 UploadOptions options)
{
    const std::string url = objectUrl(settings, name);
    Credentials creds = credentialsFor(settings, name.bucket);
    HttpClient client(creds, options.http, options.stats);
    HttpRequest req;
    req.method = kMethodPost;
    req.url = url + "?uploads";
    auto reply = client.send(req);
    if (!reply) {
        return onUpload(reply.error(), url, "cannot start the upload (CreateMultipartUpload)");
    }
    auto id = parseInitiateReply(reply->body);
    if (!id) {
        return onUpload(id.error(), url, "cannot start the upload");
    }
    return std::unique_ptr<Upload>(new Upload(std::move(creds), url, std::move(*id), std::move(options)));
}

Upload::Upload(Credentials credentials, std::string url, std::string uploadId, UploadOptions options)
    : credentials_(std::move(credentials)), options_(std::move(options)), url_(std::move(url)),
      uploadId_(std::move(uploadId))
{
    options_.partsInFlight = std::max(1U, options_.partsInFlight);
    for (unsigned i = 0; i < options_.partsInFlight; ++i) {
        auto client = std::make_shared<HttpClient>(credentials_, options_.http, options_.stats);
        workers_.emplace_back([this, client] { work(*client); });
    }
}

Upload::~Upload()
{
    if (!finished_) {
        static_cast<void>(abort());
    }
    stopWorkers();
}

void Upload::stopWorkers()
{
    {
        const std::lock_guard lock(mutex_);
        closing_ = true;
    }
    changed_.notify_all();
    workers_.clear();  // joins
}

std::string Upload::uploadQuery() const
{
    return "uploadId=" + sigv4::uriEncode(uploadId_, false);
}

void Upload::expectSize(std::uint64_t bytes)
{
    if (appended_ == 0 && nextPart_ == 1) {
        partSize_ = partSizeFor(bytes);
    }
}

Expected<void> Upload::append(Bytes data)
{
    while (!data.empty()) {
        if (current_.capacity() < partSize_) {
            current_.reserve(static_cast<std::size_t>(partSize_));
        }
        const auto room = static_cast<std::size_t>(partSize_ - current_.size());
        const std::size_t n = std::min(room, data.size());
        current_.insert(current_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n));
        data = data.subspan(n);
        appended_ += n;
        if (current_.size() == partSize_) {
            if (auto ok = submit(); !ok) {
                return ok;
            }
        }
    }
    return {};
}

Expected<void> Upload::submit()
{
    if (nextPart_ > kMaxParts) {
        return makeError(ErrorCode::WriteFailed, "the output grew past " + std::to_string(kMaxParts) + " parts of " +
                                                     humanBytes(partSize_) + " (" + humanBytes(appended_) +
                                                     " so far), the most one S3 upload takes");
    }
    Part part{nextPart_++, std::move(current_)};
    current_ = {};
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return failed_ || queue_.size() + busy_ < options_.partsInFlight; });
    if (failed_) {
        return *failed_;
    }
    queue_.push_back(std::move(part));
    lock.unlock();
    changed_.notify_all();
    return {};
}

void Upload::work(HttpClient& client)
{
    for (;;) {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return closing_ || !queue_.empty(); });
        if (queue_.empty()) {
            return;
        }
        Part part = std::move(queue_.front());
        queue_.pop_front();
        ++busy_;
        const bool skip = failed_.has_value();
        lock.unlock();
        Expected<std::string> etag = skip ? Expected<std::string>(std::string()) : send(client, part);
        part.bytes = {};  // the memory goes back before the next part may be made
        lock.lock();
        --busy_;
        if (!skip && etag) {
            done_.push_back({part.number, std::move(*etag)});
        } else if (!skip && !failed_) {
            failed_ = etag.error();
        }
        lock.unlock();
        changed_.notify_all();
    }
}

Expected<std::string> Upload::send(HttpClient& client, const Part& part)
{
    HttpRequest req;
    req.method = kMethodPut;
    req.url = url_ + "?partNumber=" + std::to_string(part.number) + "&" + uploadQuery();
    req.body = Bytes(part.bytes.data(), part.bytes.size());
    auto reply = client.send(req);
    const std::string what = "part " + std::to_string(part.number) + " (UploadPart)";
    if (!reply) {
        return onUpload(reply.error(), url_, "cannot upload " + what);
    }
    const auto etag = reply->headers.find("etag");
    if (etag == reply->headers.end() || etag->second.empty()) {
        return onUpload(makeError(ErrorCode::Corrupt, "the server's reply has no ETag"), url_, "cannot upload " + what);
    }
    return etag->second;
}

Expected<void> Upload::complete(bool replace)
{
    auto fail = [&](Error e) -> Expected<void> { return abandon(std::move(e)); };
    if (finished_) {
        return makeError(ErrorCode::Internal, "the upload was already completed or aborted");
    }
    if (!current_.empty() || nextPart_ == 1) {  // the last part; an empty output is one empty part
        if (auto ok = submit(); !ok) {
            return fail(ok.error());
        }
    }
    {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return failed_ || (queue_.empty() && busy_ == 0); });
        if (failed_) {
            lock.unlock();
            return fail(*failed_);
        }
    }
    std::sort(done_.begin(), done_.end(),
              [](const UploadedPart& a, const UploadedPart& b) { return a.number < b.number; });
    const std::string body = completeBody(done_);
    HttpRequest req;
    req.method = kMethodPost;
    req.url = url_ + "?" + uploadQuery();
    req.body = asBytes(body);
    req.headers.emplace_back("Content-Type: application/xml");
    if (!replace) {
        req.headers.emplace_back("If-None-Match: *");
    }
    req.accept = {kStatusOk, kStatusPreconditionFailed};
    HttpClient client(credentials_, options_.http, options_.stats);
    auto reply = client.send(req);
    if (!reply) {
        return fail(onUpload(reply.error(), url_, "cannot complete the upload (CompleteMultipartUpload)"));
    }
    if (reply->status == kStatusPreconditionFailed) {
        return fail(onUpload(makeError(ErrorCode::Usage, "an object appeared at the key while it was written "
                                                         "(If-None-Match: * refused); nothing replaced it: add "
                                                         "--force to replace it"),
                             url_, "not completed"));
    }
    if (auto ok = parseCompleteReply(reply->body); !ok) {
        return fail(onUpload(ok.error(), url_, "the upload did not complete"));
    }
    finished_ = true;
    return {};
}

Error Upload::abandon(Error e)
{
    if (auto aborted = abort(); !aborted) {
        e.message += "; and " + aborted.error().message;
    } else {
        e.message += " (the upload was aborted: nothing is at the key)";
    }
    return e;
}

Expected<void> Upload::abort()
{
    if (finished_) {
        return {};
    }
    finished_ = true;
    {
        // Parts not yet sent are dropped; a part being sent is stopped by the caller's stop or ends.
        const std::lock_guard lock(mutex_);
        queue_.clear();
        if (!failed_) {
            failed_ = makeError(ErrorCode::Cancelled, "the upload was aborted");
        }
    }
    changed_.notify_all();
    stopWorkers();  // a part that lands after the abort would be kept (S3 says so): none is left running
    // A connection of its own, never stopped: the abort must be sent after a Ctrl-C too.
    HttpOptions http = options_.http;
    http.stop = {};
    HttpClient client(credentials_, http, options_.stats);
    HttpRequest req;
    req.method = kMethodDelete;
    req.url = url_ + "?" + uploadQuery();
    req.accept = {kStatusNoContent, kStatusOk, kStatusNotFound};
    auto reply = client.send(req);
    if (!reply) {
        return onUpload(reply.error(), url_,
                        "cannot abort the upload (AbortMultipartUpload); its parts are left "
                        "until a lifecycle rule removes them");
    }
    return {};
}

Expected<bool> objectExists(const Settings& settings, const ObjectName& name, const HttpOptions& http,
                            const std::shared_ptr<TransferStats>& stats)
{
    HttpClient client(credentialsFor(settings, name.bucket), http, stats);
    HttpRequest req;
    req.method = kMethodHead;
    req.url = objectUrl(settings, name);
    req.accept = {kStatusOk, kStatusNotFound};
    auto reply = client.send(req);
    if (!reply) {
        return reply.error();
    }
    return reply->status == kStatusOk;
}

}  // namespace ckpt::remote::s3
