// The storages of a checkpoint read from a byte source that is not mapped (a file over HTTP): each
// read streams its range from the source. Where the reader assumed a record's header rather than
// reading it (a zip local header in torch's layout, a legacy record's element count as its pickle
// declares it), the header comes with the bytes, in the same read, and is checked first: a zip
// header of another length moves the bytes (read again from there), a legacy count of another
// size is refused. What is assumed and how it is checked is the formats' knowledge, kept here with
// the readers that assume it, not in the transport.
#pragma once

#include "checkpoint/checkpoint.h"
#include "source/byte_source.h"

#include <atomic>
#include <mutex>
#include <vector>

namespace ckpt {

class SourceStorages final : public StorageSource {
public:
    enum class Assumed : std::uint8_t {
        None,
        ZipHeader,    // a torch-shaped local header: the bytes at the 64-byte boundary after it
        LegacyCount,  // a legacy record's element count, as the pickle declares it
    };
    struct Entry {
        std::uint64_t dataOffset = 0;
        std::uint64_t header = 0;  // where the record's header starts
        Assumed assumed = Assumed::None;
        std::uint64_t count = 0;  // LegacyCount: the declared element count
    };
    SourceStorages(source::SourcePtr input, std::vector<Entry> entries);

    Expected<void> stream(StorageIndex storage, std::uint64_t offset, std::uint64_t length,
                          const std::function<bool(Bytes)>& sink, std::size_t chunk) const override;
    // The source is asked again (one request over HTTP) only once storage bytes were read.
    [[nodiscard]] Expected<void> checkUnchanged() const override;

private:
    [[nodiscard]] Entry entryOf(StorageIndex s) const;
    // Reads the storage's record header with its bytes; whether the bytes went to `sink` too.
    Expected<bool> checkHeader(StorageIndex storage, const Entry& e, std::uint64_t offset, std::uint64_t length,
                               const std::function<bool(Bytes)>& sink, std::size_t chunk) const;
    // A legacy record lies where the pickles say only if every record before it is as long as its
    // pickle declares: a count assumed further along than the one read moves every record after
    // it, and a forged one could put what the next check expects at the wrong place. So every
    // assumed count before `offset` (the record's own) is read (close ones in one request) and
    // compared before a byte from there is given out: a remote read shows the bytes a local read
    // does, or is refused. Reads in file order (convert) find each count seen with its own record.
    Expected<void> checkCountsBefore(std::uint64_t offset) const;
    void markSeen(std::uint64_t header) const;

    struct AssumedCount {
        std::uint64_t offset = 0;
        std::uint64_t count = 0;
        bool seen = false;  // compared with the file's own
    };

    source::SourcePtr input_;
    mutable std::vector<Entry> entries_;
    mutable std::mutex mutex_;
    mutable std::atomic<bool> read_{false};
    mutable std::vector<AssumedCount> counts_;  // a legacy stream's, by offset
    mutable std::size_t firstUnseen_ = 0;
    mutable std::mutex countsMutex_;
};

}  // namespace ckpt
