#include "checkpoint/source_storages.h"

#include "archive/zip.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace ckpt {

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
        const std::lock_guard lock(mutex_);
        entries_[storage.value()].assumed = Assumed::None;
        return true;
    }
    if (!wrong) {
        return r.error();
    }
    const Bytes hb(h.data(), h.size());
    if (e.assumed == Assumed::LegacyCount) {
        return makeError(ErrorCode::Corrupt, "the storage record at byte " + std::to_string(e.header) + " holds " +
                                                 std::to_string(loadLE(hb, 0, 8)) + " elements, not the " +
                                                 std::to_string(e.count) +
                                                 " its pickle declares: the stream is not laid out as "
                                                 "torch.save writes it, or the file changed");
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

}  // namespace ckpt
