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
#include "source/folder.h"
#include "util/bytes.h"
#include "util/error.h"
#include "util/file_identity.h"

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
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

// The data files of a set (DCP's .distcp files), read through the set's folder (source/folder.h):
// local ones mapped when read, a few kept open, each reopened under its identity check; remote ones
// (HTTP, S3) hold no descriptor and stay open, their own ETag and size checked by the source. Copies
// share one cache.
class MemberFiles {
public:
    MemberFiles() : state_(std::make_shared<State>()) {}
    explicit MemberFiles(source::FolderPtr folder) : MemberFiles() { state_->folder = std::move(folder); }

    // Adds the member `name` of the folder, opening it once to learn whether it can be read and
    // what it is (a local one is closed again unless the cache keeps it). Corrupt, with nothing
    // added, when `name` breaks the folder's member rule (`entry` says who named it).
    Expected<void> add(const std::string& name, const std::string& entry);
    [[nodiscard]] std::size_t size() const { return state_->members.size(); }
    // Read when added; otherwise error() says why ("" for a present member).
    [[nodiscard]] bool present(std::size_t i) const { return state_->members[i].present; }
    [[nodiscard]] const std::string& error(std::size_t i) const { return state_->members[i].error; }
    [[nodiscard]] std::uint64_t bytes(std::size_t i) const { return state_->members[i].size; }
    // Whether the members are local files, mapped when read (their pages can be released).
    [[nodiscard]] bool local() const { return !state_->folder || state_->folder->local(); }
    [[nodiscard]] const source::FolderPtr& folder() const { return state_->folder; }
    // Present member `i` as a byte source, opened again when the cache dropped a local one (Io
    // error when the file changed since it was added). Hold it only while reading from it.
    Expected<source::SourcePtr> source(std::size_t i) const;
    // Every present member still the file that was added, and no open mapping faulted.
    [[nodiscard]] Expected<void> checkUnchanged() const;

private:
    struct Member {
        std::string name;
        std::string path;  // as shown
        bool present = false;
        std::string error;
        std::uint64_t size = 0;
        std::optional<FileIdentity> identity;  // a local file's
        source::SourcePtr kept;                // a remote member, open for the set's life
    };
    struct State {
        source::FolderPtr folder;
        std::vector<Member> members;
        MemberLru<source::ByteSource> open{kOpenMembers};
    };
    std::shared_ptr<State> state_;
};

// The identity of the file a checkpoint was read from: its mapping's, or (read through a
// compression wrapper, with no mapping kept) the file's as it is now.
Expected<FileIdentity> identityOfCheckpoint(const Checkpoint& c, const std::string& path);

// Member `name` of `folder` read as a checkpoint (a ZeRO or FSDP rank file): a local one as every
// member is opened (the member rule, then openMember: mapped, under the set's OpenControl), a
// remote one read by range from its source (readSource). `stops`: the folder refused it (the member
// rule, nothing read) or could not ask for it (a remote error other than "not there"): the set's read
// ends with that error. `missing`: the folder has no such file, which a set reports as a finding.
struct FolderMemberRead {
    Expected<CheckpointPtr> checkpoint = CheckpointPtr();
    bool stops = false;
    bool missing = false;
};
FolderMemberRead readFolderMember(const source::Folder& folder, const std::string& name, const std::string& entry,
                                  std::size_t index, std::size_t total);

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
    // `remote`: read from a remote folder, holding no descriptor: kept for the set's life, its
    // source's own size and ETag checks standing for the identity check.
    void add(const std::string& path, const CheckpointPtr& first, bool remote = false);
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
        CheckpointPtr kept;  // a remote member
    };
    struct State {
        std::vector<Member> members;
        MemberLru<Checkpoint> open{kKeepOpen};
    };
    std::shared_ptr<State> state_;
};

}  // namespace ckpt::sharded
