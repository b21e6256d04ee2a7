#include "remote/remote_file.h"

#include <algorithm>
#include <cstring>
#include <sys/mman.h>

namespace ckpt::remote {

Expected<std::shared_ptr<RemoteFile>> RemoteFile::open(std::shared_ptr<HttpClient> client, std::string url, First first,
                                                       std::uint64_t firstBytes)
{
    std::shared_ptr<RemoteFile> f(new RemoteFile());  // NOLINT(cppcoreguidelines-owning-memory): private constructor
    f->client_ = std::move(client);
    f->url_ = std::move(url);
    // The first reply is kept aside until the size is known and the image can be mapped.
    std::vector<std::byte> firstBody;
    const ByteRange range = first == First::Tail ? ByteRange{ByteRange::Kind::Suffix, 0, firstBytes}
                                                 : ByteRange{ByteRange::Kind::Span, 0, firstBytes};
    auto at = f->client_->getRange(f->url_, range, f->identityOpt_, [&](Bytes b) {
        firstBody.insert(firstBody.end(), b.begin(), b.end());
        return true;
    });
    if (!at) {
        // A head range of a file shorter than it asks past the end: 416 from most servers, which
        // a suffix range never gets. Retried as a suffix of the same length.
        if (first == First::Head && at.error().message.find("HTTP 416") != std::string::npos) {
            return open(f->client_, f->url_, First::Tail, firstBytes);
        }
        return at.error();
    }
    f->identity_ = *f->identityOpt_;
    f->mapped_ = static_cast<std::size_t>(std::max<std::uint64_t>(f->identity_.size, 1));
    void* p = ::mmap(nullptr, f->mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        Error e = makeError(ErrorCode::OutOfMemory, "cannot reserve " + humanBytes(f->identity_.size) +
                                                        " of address space for the remote file's image");
        e.path = f->client_->redactor().apply(f->url_);
        return e;
    }
    f->image_ = static_cast<std::byte*>(p);
    std::memcpy(f->image_ + *at, firstBody.data(),
                firstBody.size());  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
    f->markHeld(*at, *at + firstBody.size());
    return f;
}

RemoteFile::~RemoteFile()
{
    if (image_ != nullptr) {
        ::munmap(image_, mapped_);
    }
}

Bytes RemoteFile::image() const
{
    return {image_, static_cast<std::size_t>(identity_.size)};
}

bool RemoteFile::holds(std::uint64_t offset, std::uint64_t length) const
{
    const std::lock_guard lock(mutex_);
    if (length == 0) {
        return true;
    }
    auto it = held_.upper_bound(offset);
    if (it == held_.begin()) {
        return false;
    }
    --it;
    return it->first <= offset && it->second >= offset + length;
}

void RemoteFile::assume(std::uint64_t offset, Bytes bytes)
{
    if (offset > size() || bytes.size() > size() - offset || holds(offset, bytes.size())) {
        return;
    }
    const std::lock_guard lock(mutex_);
    std::memcpy(image_ + offset, bytes.data(),
                bytes.size());  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
}

void RemoteFile::markHeld(std::uint64_t offset, std::uint64_t end)
{
    if (end <= offset) {
        return;
    }
    auto it = held_.upper_bound(offset);
    if (it != held_.begin() && std::prev(it)->second >= offset) {
        --it;
        offset = std::min(offset, it->first);
    }
    while (it != held_.end() && it->first <= end) {
        end = std::max(end, it->second);
        offset = std::min(offset, it->first);
        it = held_.erase(it);
    }
    held_[offset] = end;
}

Expected<void> RemoteFile::fetchSpan(std::uint64_t offset, std::uint64_t length)
{
    std::uint64_t pos = offset;
    auto at = client_->getRange(url_, ByteRange{ByteRange::Kind::Span, offset, length}, identityOpt_, [&](Bytes b) {
        std::memcpy(image_ + pos, b.data(), b.size());  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
        pos += b.size();
        return true;
    });
    if (!at) {
        return at.error();
    }
    markHeld(offset, offset + length);
    return {};
}

Expected<void> RemoteFile::fetch(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges,
                                 std::uint64_t mergeGap)
{
    const std::lock_guard lock(mutex_);
    // What is missing of each range, clipped to the file, in order.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> missing;  // start, end
    for (const auto& [off, len] : ranges) {
        std::uint64_t start = std::min(off, size());
        const std::uint64_t end = std::min(size(), off + std::min(len, size()));
        auto it = held_.upper_bound(start);
        if (it != held_.begin()) {
            --it;
        }
        for (; start < end && it != held_.end() && it->first < end; ++it) {
            if (it->second <= start) {
                continue;
            }
            if (it->first > start) {
                missing.emplace_back(start, it->first);
            }
            start = std::max(start, it->second);
        }
        if (start < end) {
            missing.emplace_back(start, end);
        }
    }
    std::sort(missing.begin(), missing.end());
    std::vector<std::pair<std::uint64_t, std::uint64_t>> merged;
    for (const auto& m : missing) {
        if (!merged.empty() && m.first <= merged.back().second + mergeGap) {
            merged.back().second = std::max(merged.back().second, m.second);
        } else {
            merged.push_back(m);
        }
    }
    for (const auto& [start, end] : merged) {
        if (auto ok = fetchSpan(start, end - start); !ok) {
            return ok;
        }
    }
    return {};
}

Expected<void> RemoteFile::read(std::uint64_t offset, std::uint64_t length, const std::function<bool(Bytes)>& sink,
                                std::size_t chunk)
{
    chunk = std::max<std::size_t>(chunk, 1);
    auto fromImage = [&]() -> Expected<void> {
        for (std::uint64_t at = offset; at < offset + length;) {
            const std::uint64_t n = std::min<std::uint64_t>(chunk, offset + length - at);
            if (!sink(image().subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(n)))) {
                return makeError(ErrorCode::Cancelled, "cancelled");
            }
            at += n;
        }
        return {};
    };
    if (holds(offset, length)) {
        return fromImage();
    }
    if (length < kBlock && cached_ < kCacheLimit) {
        // A small read fetches the whole aligned blocks around it, which the next small reads
        // (the neighbouring storages) then find here.
        const std::uint64_t start = offset / kBlock * kBlock;
        const std::uint64_t end = std::min(size(), (offset + length + kBlock - 1) / kBlock * kBlock);
        if (auto ok = fetch({{start, end - start}}, 0); !ok) {
            return ok;
        }
        cached_ += end - start;
        return fromImage();
    }
    // Streamed: the server's pieces gathered into chunks, so memory is one chunk whatever the size.
    const std::lock_guard lock(mutex_);
    std::vector<std::byte> buffer;
    buffer.reserve(std::min<std::size_t>(chunk, static_cast<std::size_t>(std::min<std::uint64_t>(length, 4U << 20))));
    bool cancelled = false;
    auto at = client_->getRange(url_, ByteRange{ByteRange::Kind::Span, offset, length}, identityOpt_, [&](Bytes b) {
        while (!b.empty()) {
            const std::size_t room = chunk - buffer.size();
            const std::size_t n = std::min(room, b.size());
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

Expected<void> RemoteFile::checkUnchanged()
{
    const std::lock_guard lock(mutex_);
    if (size() == 0) {
        return {};
    }
    auto at = client_->getRange(url_, ByteRange{ByteRange::Kind::Span, size() - 1, 1}, identityOpt_,
                                [](Bytes /*b*/) { return true; });
    if (!at) {
        return at.error();
    }
    return {};
}

}  // namespace ckpt::remote
