// A set's member files, opened when their bytes are needed instead of all up front (issue 29).
//
// A set can hold more files than a process may have open: `ulimit -n` is 1024 by default, and a
// DCP save of 5,000 ranks or a Hugging Face set of 10,000 shards has more members than that.
// Opening each one for as long as the set lives failed with EMFILE, and held every member's
// mapping (and, for a shard, its parsed checkpoint) in memory at once. Here a member is opened
// once to learn what it is, then again whenever it is read; a few recently used ones stay open (a
// small LRU), the rest are closed. Reopening compares the file's identity (inode, size,
// modification time) with the first open, so a member replaced or rewritten in between is an
// error, as a file that shrinks under its mapping already is (MappedFile::checkUnchanged).
#pragma once

#include "checkpoint/checkpoint.h"
#include "util/bytes.h"
#include "util/error.h"
#include "util/file_identity.h"

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ckpt::sharded {

// At most this many members of one set are kept open by the set itself: far below any descriptor
// limit, enough for the access patterns of reading a set (one file at a time, or the few a tensor's
// chunks share).
inline constexpr std::size_t kOpenMembers = 32;

// A recently-used list of at most `capacity` values by member number, least recently used dropped
// first. Values are shared pointers, so a caller still holding a dropped one keeps it alive.
// Thread-safe: the window may read one set from several threads.
template <typename T> class MemberLru {
public:
    explicit MemberLru(std::size_t capacity) : capacity_(capacity) {}

    // The cached value of member `i`, or `open()`'s, which is then cached.
    Expected<std::shared_ptr<const T>> get(std::size_t i,
                                           const std::function<Expected<std::shared_ptr<const T>>()>& open)
    {
        {
            const std::lock_guard lock(mutex_);
            for (std::size_t k = 0; k < entries_.size(); ++k) {
                if (entries_[k].first == i) {
                    auto hit = entries_[k];
                    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(k));
                    entries_.push_back(hit);
                    return hit.second;
                }
            }
        }
        auto opened = open();  // outside the lock: opening a member can take a while
        if (!opened) {
            return opened.error();
        }
        const std::lock_guard lock(mutex_);
        if (entries_.size() >= capacity_) {
            entries_.erase(entries_.begin());
        }
        entries_.emplace_back(i, *opened);
        return opened;
    }

    // Every value now cached, for checks on what is open.
    std::vector<std::shared_ptr<const T>> cached() const
    {
        const std::lock_guard lock(mutex_);
        std::vector<std::shared_ptr<const T>> out;
        for (const auto& e : entries_) {
            out.push_back(e.second);
        }
        return out;
    }

private:
    std::size_t capacity_;
    mutable std::mutex mutex_;
    std::vector<std::pair<std::size_t, std::shared_ptr<const T>>> entries_;  // least recent first
};

// An Io error naming `path` when `now` is not the file first opened as `first`; nothing otherwise.
Expected<void> checkSameFile(const std::string& path, const FileIdentity& first, const FileIdentity& now);
// The same against the file at `path` as it is now (stat): replaced, resized or rewritten since
// `first`, or gone, is an Io error.
Expected<void> checkStillSame(const std::string& path, const FileIdentity& first);

// The data files of a set (DCP's .distcp files), mapped when read. Copies share one cache.
class MemberFiles {
public:
    MemberFiles() : state_(std::make_shared<State>()) {}

    // Adds the member at `path` (already checked by memberOfFolder), mapping it once to learn whether
    // it can be read and what it is; it is closed again unless the cache keeps it.
    void add(const std::string& path);
    [[nodiscard]] std::size_t size() const { return state_->members.size(); }
    // Read when added; otherwise error() says why ("" for a present member).
    [[nodiscard]] bool present(std::size_t i) const { return state_->members[i].present; }
    [[nodiscard]] const std::string& error(std::size_t i) const { return state_->members[i].error; }
    [[nodiscard]] std::uint64_t bytes(std::size_t i) const { return state_->members[i].identity.size; }
    // The mapping of present member `i`, opened again when the cache dropped it (Io error when
    // the file changed since it was added). Hold it only while reading from it.
    Expected<std::shared_ptr<const MappedFile>> map(std::size_t i) const;
    // Every present member still the file that was added, and no open mapping faulted.
    [[nodiscard]] Expected<void> checkUnchanged() const;

private:
    struct Member {
        std::string path;
        bool present = false;
        std::string error;
        FileIdentity identity;
    };
    struct State {
        std::vector<Member> members;
        MemberLru<MappedFile> open{kOpenMembers};
    };
    std::shared_ptr<State> state_;
};

// The identity of the file a checkpoint was read from: its mapping's, or (read through a
// compression wrapper, with no mapping kept) the file's as it is now.
Expected<FileIdentity> identityOfCheckpoint(const Checkpoint& c, const std::string& path);

// The torch.save files of a set that are parsed to be read (DeepSpeed ZeRO's rank files), as
// MemberFiles holds mapped ones: each is read once when added, kept while the cache has room, and
// read again (its identity checked) when it is needed after that. A parsed rank file costs a few
// hundred KiB and a descriptor, so 3,000 ranks held at once took 1.5 GB and more descriptors than
// `ulimit -n` allows. Copies share one cache.
class MemberCheckpoints {
public:
    static constexpr std::size_t kKeepOpen = 64;
    MemberCheckpoints() : state_(std::make_shared<State>()) {}

    // Adds the member at `path` as read into `first`; null for a member missing or unreadable.
    void add(const std::string& path, const CheckpointPtr& first);
    [[nodiscard]] std::size_t size() const { return state_->members.size(); }
    [[nodiscard]] bool present(std::size_t i) const { return state_->members.at(i).present; }
    // Present member `i`, read again when the cache dropped it: an Io error when the file changed
    // since it was added. Hold it only while reading it.
    [[nodiscard]] Expected<CheckpointPtr> get(std::size_t i) const;
    // Every present member still the file that was added, and no open mapping faulted.
    [[nodiscard]] Expected<void> checkUnchanged() const;
    // A Usage error when the file `target` is one of the members (same inode): writing it would
    // replace what is being read.
    [[nodiscard]] Expected<void> checkNotMember(const std::string& target) const;

private:
    struct Member {
        std::string path;
        bool present = false;
        FileIdentity identity;
    };
    struct State {
        std::vector<Member> members;
        MemberLru<Checkpoint> open{kKeepOpen};
    };
    std::shared_ptr<State> state_;
};

}  // namespace ckpt::sharded
