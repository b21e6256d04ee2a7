#include "remote/http_source.h"

#include <algorithm>

namespace ckpt::remote {

Expected<std::shared_ptr<HttpSource>> HttpSource::open(std::shared_ptr<HttpClient> client, std::string url, First first,
                                                       std::uint64_t firstBytes,
                                                       std::shared_ptr<const Connections> connections)
{
    std::shared_ptr<HttpSource> f(new HttpSource());  // private constructor
    f->client_ = std::move(client);
    f->connections_ = std::move(connections);
    f->url_ = std::move(url);
    auto body = std::make_shared<std::vector<std::byte>>();
    const ByteRange range = first == First::Tail ? ByteRange{ByteRange::Kind::Suffix, 0, firstBytes}
                                                 : ByteRange{ByteRange::Kind::Span, 0, firstBytes};
    auto at = f->client_->getRange(f->url_, range, f->identityOpt_, [&](Bytes b) {
        body->insert(body->end(), b.begin(), b.end());
        return true;
    });
    if (!at) {
        // A head range of a file shorter than it asks past the end: 416 from most servers, which
        // a suffix range never gets. Retried as a suffix of the same length.
        if (first == First::Head && at.error().message.find("HTTP 416") != std::string::npos) {
            return open(f->client_, f->url_, First::Tail, firstBytes, f->connections_);
        }
        return at.error();
    }
    f->identity_ = *f->identityOpt_;
    if (!body->empty()) {
        f->held_.emplace(*at, std::move(body));
    }
    return f;
}

std::optional<source::Held> HttpSource::heldLocked(std::uint64_t offset, std::uint64_t length) const
{
    // The span starting last at or before `offset` may not reach far enough while an earlier,
    // longer one does: every span starting at or before it is a candidate, the latest first.
    for (auto it = held_.upper_bound(offset); it != held_.begin();) {
        --it;
        const auto& bytes = *it->second;
        if (it->first + bytes.size() >= offset + length) {
            const auto from = static_cast<std::size_t>(offset - it->first);
            return source::Held{Bytes(bytes).subspan(from, static_cast<std::size_t>(length)), it->second};
        }
    }
    return std::nullopt;
}

Expected<source::Held> HttpSource::fetchLocked(std::uint64_t offset, std::uint64_t length) const
{
    auto body = std::make_shared<std::vector<std::byte>>();
    body->reserve(static_cast<std::size_t>(length));
    auto at = client_->getRange(url_, ByteRange{ByteRange::Kind::Span, offset, length}, identityOpt_, [&](Bytes b) {
        body->insert(body->end(), b.begin(), b.end());
        return true;
    });
    if (!at) {
        return at.error();
    }
    source::Held held{Bytes(*body), body};
    held_[offset] = std::move(body);
    return held;
}

Expected<source::Held> HttpSource::read(std::uint64_t offset, std::uint64_t length) const
{
    if (offset > size() || length > size() - offset) {
        return pastEnd(offset, length);
    }
    const std::lock_guard lock(mutex_);
    if (auto held = heldLocked(offset, length)) {
        return *held;
    }
    return fetchLocked(offset, length);
}

bool HttpSource::holds(source::Range range) const
{
    const std::lock_guard lock(mutex_);
    return range.offset <= size() && range.length <= size() - range.offset &&
           heldLocked(range.offset, range.length).has_value();
}

std::vector<source::Range> HttpSource::missing(std::span<const source::Range> ranges) const
{
    const std::lock_guard lock(mutex_);
    std::vector<source::Range> out;
    for (const auto& r : ranges) {
        if (!heldLocked(std::min(r.offset, size()), std::min(r.length, size() - std::min(r.offset, size())))) {
            out.push_back(r);
        }
    }
    return source::mergedRanges(std::move(out), kMergeGap, size());
}

Expected<void> HttpSource::fetchOn(HttpClient& client, source::Range range) const
{
    auto identity = [&] {
        const std::lock_guard lock(mutex_);
        return identityOpt_;
    }();
    auto body = std::make_shared<std::vector<std::byte>>();
    body->reserve(static_cast<std::size_t>(range.length));
    auto at =
        client.getRange(url_, ByteRange{ByteRange::Kind::Span, range.offset, range.length}, identity, [&](Bytes b) {
            body->insert(body->end(), b.begin(), b.end());
            return true;
        });
    if (!at) {
        return at.error();
    }
    const std::lock_guard lock(mutex_);
    held_[range.offset] = std::move(body);
    return {};
}

Expected<void> HttpSource::prefetchAll(const Connections& connections, std::span<const Wanted> wanted)
{
    std::vector<std::pair<const HttpSource*, source::Range>> requests;
    for (const auto& w : wanted) {
        for (const auto& r : w.source->missing(w.ranges)) {
            requests.emplace_back(w.source, r);
        }
    }
    std::mutex mutex;
    std::optional<Error> failed;
    connections.run(requests.size(), [&](std::size_t k, const std::shared_ptr<HttpClient>& client) {
        if (auto got = requests[k].first->fetchOn(*client, requests[k].second); !got) {
            const std::lock_guard lock(mutex);
            failed = failed ? failed : got.error();
        }
    });
    if (failed) {
        return *failed;
    }
    return {};
}

Expected<void> HttpSource::prefetch(std::span<const source::Range> ranges) const
{
    if (connections_) {
        const Wanted one{this, {ranges.begin(), ranges.end()}};
        return prefetchAll(*connections_, std::span(&one, 1));
    }
    for (const auto& r : missing(ranges)) {
        if (auto got = fetchOn(*client_, r); !got) {
            return got.error();
        }
    }
    return {};
}

Expected<void> HttpSource::stream(std::uint64_t offset, std::uint64_t length, const source::Sink& sink,
                                  std::size_t chunk) const
{
    if (offset > size() || length > size() - offset) {
        return pastEnd(offset, length);
    }
    chunk = std::max<std::size_t>(chunk, 1);
    std::unique_lock lock(mutex_);
    auto held = heldLocked(offset, length);
    if (!held && length < kBlock && cached_ < kCacheLimit) {
        // A small read fetches the whole aligned blocks around it, which the next small reads
        // (the neighbouring storages) then find here.
        const std::uint64_t start = offset / kBlock * kBlock;
        const std::uint64_t end = std::min(size(), (offset + length + kBlock - 1) / kBlock * kBlock);
        auto block = fetchLocked(start, end - start);
        if (!block) {
            return block.error();
        }
        cached_ += end - start;
        held = heldLocked(offset, length);
    }
    if (held) {
        lock.unlock();
        for (std::uint64_t at = 0; at < length; at += chunk) {
            const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, length - at));
            if (!sink(held->bytes.subspan(static_cast<std::size_t>(at), n))) {
                return makeError(ErrorCode::Cancelled, "cancelled");
            }
        }
        return {};
    }
    // Streamed: the server's pieces gathered into chunks, so memory is one chunk whatever the size.
    std::vector<std::byte> buffer;
    buffer.reserve(std::min<std::size_t>(chunk, static_cast<std::size_t>(std::min<std::uint64_t>(length, 4U << 20))));
    bool cancelled = false;
    auto at = client_->getRange(url_, ByteRange{ByteRange::Kind::Span, offset, length}, identityOpt_, [&](Bytes b) {
        while (!b.empty()) {
            const std::size_t n = std::min(chunk - buffer.size(), b.size());
            buffer.insert(buffer.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
            b = b.subspan(n);
            if (buffer.size() == chunk) {
                if (!sink(Bytes(buffer.data(), buffer.size()))) {
                    cancelled = true;
                    return false;
                }
                buffer.clear();
            }
        }
        return true;
    });
    if (!at) {
        return at.error();
    }
    if (!buffer.empty() && !sink(Bytes(buffer.data(), buffer.size()))) {
        cancelled = true;
    }
    if (cancelled) {
        return makeError(ErrorCode::Cancelled, "cancelled");
    }
    return {};
}

Expected<void> HttpSource::checkUnchanged() const
{
    if (size() == 0) {
        return {};
    }
    const std::lock_guard lock(mutex_);
    auto at = client_->getRange(url_, ByteRange{ByteRange::Kind::Span, size() - 1, 1}, identityOpt_,
                                [](Bytes /*b*/) { return true; });
    if (!at) {
        return at.error();
    }
    return {};
}

}  // namespace ckpt::remote
