#include "source/byte_source.h"

#include <algorithm>

namespace ckpt::source {

Error ByteSource::pastEnd(std::uint64_t offset, std::uint64_t length) const
{
    return makeError(ErrorCode::Truncated, "bytes " + std::to_string(offset) + " to " +
                                               std::to_string(offset + length) + " lie past the end of the file (" +
                                               std::to_string(size()) + " bytes)");
}

Expected<void> ByteSource::stream(std::uint64_t offset, std::uint64_t length, const Sink& sink, std::size_t chunk) const
{
    chunk = std::max<std::size_t>(chunk, 1);
    for (std::uint64_t at = offset; at < offset + length;) {
        const std::uint64_t n = std::min<std::uint64_t>(chunk, offset + length - at);
        auto piece = read(at, n);
        if (!piece) {
            return piece.error();
        }
        if (!sink(piece->bytes)) {
            return makeError(ErrorCode::Cancelled, "cancelled");
        }
        at += n;
    }
    return {};
}

namespace {

Expected<Held> viewOf(Bytes all, std::uint64_t offset, std::uint64_t length, const std::shared_ptr<const void>& owner)
{
    if (offset > all.size() || length > all.size() - offset) {
        return makeError(ErrorCode::Truncated, "");  // the caller's pastEnd says what
    }
    return Held{all.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(length)), owner};
}

}  // namespace

Expected<Held> MemorySource::read(std::uint64_t offset, std::uint64_t length) const
{
    auto held = viewOf(bytes_, offset, length, owner_);
    if (!held) {
        return pastEnd(offset, length);
    }
    return held;
}

Expected<std::shared_ptr<const MappedSource>> MappedSource::open(const std::string& path)
{
    auto file = MappedFile::open(path);
    if (!file) {
        return file.error();
    }
    return std::make_shared<const MappedSource>(std::move(*file));
}

Expected<Held> MappedSource::read(std::uint64_t offset, std::uint64_t length) const
{
    auto held = viewOf(file_->bytes(), offset, length, nullptr);
    if (!held) {
        return pastEnd(offset, length);
    }
    return held;
}

std::vector<Range> mergedRanges(std::vector<Range> ranges, std::uint64_t gap, std::uint64_t size)
{
    std::vector<Range> out;
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.offset < b.offset; });
    for (const auto& r : ranges) {
        const std::uint64_t start = std::min(r.offset, size);
        const std::uint64_t end = start + std::min(r.length, size - start);
        if (end == start) {
            continue;
        }
        if (!out.empty() && start <= out.back().offset + out.back().length + gap) {
            const std::uint64_t last = std::max(out.back().offset + out.back().length, end);
            out.back().length = last - out.back().offset;
        } else {
            out.push_back({start, end - start});
        }
    }
    return out;
}

}  // namespace ckpt::source
