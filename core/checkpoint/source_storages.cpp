#include "checkpoint/source_storages.h"

#include "archive/zip.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace ckpt {

namespace {

Error countMismatch(std::uint64_t header, std::uint64_t real, std::uint64_t declared)
{
    return makeError(ErrorCode::Corrupt, "the storage record at byte " + std::to_string(header) + " holds " +
                                             std::to_string(real) + " elements, not the " + std::to_string(declared) +
                                             " its pickle declares: the stream is not laid out as torch.save writes "
                                             "it, or the file changed");
}

}  // namespace

SourceStorages::SourceStorages(source::SourcePtr input, std::vector<Entry> entries)
    : input_(std::move(input)), entries_(std::move(entries))
{
    for (const auto& e : entries_) {
        if (e.assumed == Assumed::LegacyCount) {
            counts_.push_back({e.header, e.count, false});
        }
    }
    std::sort(counts_.begin(), counts_.end(),
              [](const AssumedCount& a, const AssumedCount& b) { return a.offset < b.offset; });
}

SourceStorages::Entry SourceStorages::entryOf(StorageIndex s) const
{
    const std::lock_guard lock(mutex_);
    return entries_[s.value()];
}

Expected<void> SourceStorages::stream(StorageIndex storage, std::uint64_t offset, std::uint64_t length,
                                      const std::function<bool(Bytes)>& sink, std::size_t chunk) const
{
    if (storage.value() >= entries_.size()) {
        return makeError(ErrorCode::Internal, "no storage " + std::to_string(storage.value()) + " in the source");
    }
    Entry e = entryOf(storage);
    read_ = true;
    // A legacy record's own count is 8 bytes before its data, checked with them below.
    if (auto before = checkCountsBefore(e.dataOffset - std::min<std::uint64_t>(e.dataOffset, 8)); !before) {
        return before;
    }
    if (e.assumed != Assumed::None) {
        auto checked = checkHeader(storage, e, offset, length, sink, chunk);
        if (!checked) {
            return checked.error();
        }
        if (*checked) {
            return {};  // the bytes went to `sink` with the header
        }
        e = entryOf(storage);
    }
    return input_->stream(e.dataOffset + offset, length, sink, chunk);
}

Expected<void> SourceStorages::checkUnchanged() const
{
    // Every reply is checked against the first one's size and ETag as it comes; once storage
    // bytes were read, one more request makes sure the file did not change after the last.
    if (!read_.exchange(false)) {
        return {};
    }
    return input_->checkUnchanged();
}

Expected<bool> SourceStorages::checkHeader(StorageIndex storage, const Entry& e, std::uint64_t offset,
                                           std::uint64_t length, const std::function<bool(Bytes)>& sink,
                                           std::size_t chunk) const
{
    const std::uint64_t headerLength = e.dataOffset - e.header;
    const std::uint64_t checked = e.assumed == Assumed::LegacyCount ? 8 : archive::kLocalHeaderSize;
    std::array<std::byte, archive::kLocalHeaderSize> h{};
    std::uint64_t seen = 0;
    bool wrong = false;
    archive::ZipRecord record;  // what payloadOffset needs of the record: where its header is
    record.name = "storage " + std::to_string(storage.value());
    record.localHeaderOffset = e.header;
    auto asAssumed = [&](Bytes got) {
        if (e.assumed == Assumed::LegacyCount) {
            return loadLE(got, 0, 8) == e.count;
        }
        const auto at = archive::payloadOffset(record, got);
        return at && *at == e.dataOffset;
    };
    auto together = [&](Bytes b) {
        if (seen < checked) {
            const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(checked - seen, b.size()));
            std::memcpy(h.data() + seen, b.data(), n);
            if (seen + n == checked) {
                wrong = !asAssumed(Bytes(h.data(), static_cast<std::size_t>(checked)));
                if (wrong) {
                    return false;
                }
            }
        }
        const std::uint64_t skip = headerLength + offset;
        const std::uint64_t before = seen;
        seen += b.size();
        if (seen <= skip) {
            return true;
        }
        const std::uint64_t from = before < skip ? skip - before : 0;
        return sink(b.subspan(static_cast<std::size_t>(from)));
    };
    // Small pieces, so that a header that is not as assumed stops the read after its first piece
    // rather than after the whole storage.
    constexpr std::size_t kFirstPieces = std::size_t{64} << 10;
    auto r = input_->stream(e.header, headerLength + offset + length, together, std::min(chunk, kFirstPieces));
    if (r) {
        {
            const std::lock_guard lock(mutex_);
            entries_[storage.value()].assumed = Assumed::None;
        }
        if (e.assumed == Assumed::LegacyCount) {
            markSeen(e.header);
        }
        return true;
    }
    if (!wrong) {
        return r.error();
    }
    const Bytes hb(h.data(), h.size());
    if (e.assumed == Assumed::LegacyCount) {
        return countMismatch(e.header, loadLE(hb, 0, 8), e.count);
    }
    // Not where a torch writer puts it: the header says where the bytes start.
    auto real = archive::payloadOffset(record, hb);
    if (!real) {
        return makeError(ErrorCode::Corrupt,
                         "the local header of storage record at byte " + std::to_string(e.header) + " is missing");
    }
    const std::lock_guard lock(mutex_);
    auto& entry = entries_[storage.value()];
    entry.dataOffset = *real;
    entry.assumed = Assumed::None;
    return false;
}

void SourceStorages::markSeen(std::uint64_t header) const
{
    const std::lock_guard lock(countsMutex_);
    const auto it = std::lower_bound(counts_.begin(), counts_.end(), header,
                                     [](const AssumedCount& c, std::uint64_t at) { return c.offset < at; });
    if (it != counts_.end() && it->offset == header) {
        it->seen = true;
    }
}

Expected<void> SourceStorages::checkCountsBefore(std::uint64_t offset) const
{
    constexpr std::uint64_t kCountGap = std::uint64_t{16} << 10;  // counts closer share a request
    const std::lock_guard lock(countsMutex_);
    std::vector<source::Range> ranges;
    std::size_t end = firstUnseen_;
    for (; end < counts_.size() && counts_[end].offset < offset; ++end) {
        if (!counts_[end].seen) {
            ranges.push_back({counts_[end].offset, 8});
        }
    }
    if (ranges.empty()) {
        return {};
    }
    // Fetched together where close (a remote source); each then read from what was fetched.
    for (const auto& r : source::mergedRanges(ranges, kCountGap, input_->size())) {
        if (auto ok = input_->prefetch(std::span(&r, 1)); !ok) {
            return ok;
        }
    }
    for (std::size_t i = firstUnseen_; i < end; ++i) {
        auto& c = counts_[i];
        if (c.seen) {
            continue;
        }
        auto got = input_->read(c.offset, 8);
        if (!got) {
            return got.error();
        }
        if (const std::uint64_t real = loadLE(got->bytes, 0, 8); real != c.count) {
            return countMismatch(c.offset, real, c.count);
        }
        c.seen = true;
    }
    while (firstUnseen_ < counts_.size() && counts_[firstUnseen_].seen) {
        ++firstUnseen_;
    }
    return {};
}

}  // namespace ckpt
