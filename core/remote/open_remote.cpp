#include "remote/open_remote.h"

#include "archive/safetensors.h"
#include "archive/zip.h"
#include "remote/location.h"
#include "remote/remote_file.h"
#include "remote/reply_parse.h"
#include "sharded/set_view.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <map>
#include <mutex>
#include <sys/statvfs.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

namespace ckpt::remote {
namespace {

constexpr std::uint64_t kFirstBytes = std::uint64_t{64} << 10;  // the first request: head or tail
constexpr std::uint64_t kMergeGap = std::uint64_t{256} << 10;   // ranges closer than this share a request
constexpr std::uint64_t kLocalSize = 30;
constexpr std::uint64_t kHeaderExtraFetched = 4096;
constexpr std::uint32_t kLocalSig = 0x04034b50;
constexpr std::uint64_t kAlignment = 64;
constexpr std::uint64_t kOverflow32 = 0xFFFFFFFFU;
constexpr std::size_t kApiReplyLimit = std::size_t{16} << 20;

// Where torch's writer (and ckptscope's, zip.h) puts a record's payload: after a local header
// whose extra field ("FB" padding, ZIP64 sizes where they overflow) ends on a 64-byte boundary.
std::uint64_t torchDataOffset(const archive::ZipRecord& r)
{
    std::uint64_t start = r.localHeaderOffset + kLocalSize + r.name.size() + 4;
    if (r.size >= kOverflow32 || r.localHeaderOffset >= kOverflow32) {
        start += 4;
        start += r.size >= kOverflow32 ? 16 : 0;
        start += r.localHeaderOffset >= kOverflow32 ? 8 : 0;
    }
    return (start + kAlignment - 1) / kAlignment * kAlignment;
}

std::string relativeName(const std::string& name)
{
    const auto slash = name.find('/');
    return slash == std::string::npos ? name : name.substr(slash + 1);
}

// A stored record under data/: a storage, whose bytes are fetched only when read.
bool storageRecord(const archive::ZipRecord& r)
{
    return relativeName(r.name).starts_with("data/") && r.method == 0;
}

// A storage's bytes, fetched when read.
class RemoteStorages final : public StorageSource {
public:
    // What the image holds in place of a record header that was not fetched, checked when the
    // storage's bytes are read (with them, in the same request).
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
    // `stood`: a legacy stream's record counts stood in the image (offset -> count), in order.
    RemoteStorages(std::shared_ptr<RemoteFile> file, std::vector<Entry> entries,
                   const std::map<std::uint64_t, std::uint64_t>& stood)
        : file_(std::move(file)), entries_(std::move(entries))
    {
        for (const auto& [offset, count] : stood) {
            counts_.push_back({offset, count, false});
        }
    }

    Expected<void> stream(StorageIndex storage, std::uint64_t offset, std::uint64_t length,
                          const std::function<bool(Bytes)>& sink, std::size_t chunk) const override
    {
        if (storage.value() >= entries_.size()) {
            return makeError(ErrorCode::Internal, "no remote storage " + std::to_string(storage.value()));
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
        return file_->read(e.dataOffset + offset, length, sink, chunk);
    }

    [[nodiscard]] Expected<void> checkUnchanged() const override
    {
        // Every reply is checked against the first one's size and ETag as it comes; once storage
        // bytes were read, one more request makes sure the file did not change after the last.
        if (!read_) {
            return {};
        }
        read_ = false;
        return file_->checkUnchanged();
    }

private:
    [[nodiscard]] Entry entryOf(StorageIndex s) const
    {
        const std::lock_guard lock(mutex_);
        return entries_[s.value()];
    }

    // Whether the first bytes of a record header are what was assumed.
    static bool asAssumed(const Entry& e, Bytes h)
    {
        if (e.assumed == Assumed::LegacyCount) {
            return loadLE(h, 0, 8) == e.count;
        }
        return loadLE(h, 0, 4) == kLocalSig &&
               kLocalSize + loadLE(h, 26, 2) + loadLE(h, 28, 2) == e.dataOffset - e.header;
    }

    // Reads the storage's record header, with its bytes in the same request when they follow at
    // the assumed offset. Returns whether the bytes went to `sink` too; corrects a zip entry whose
    // header puts them elsewhere (another writer's zip), refuses a legacy record of another size.
    Expected<bool> checkHeader(StorageIndex storage, const Entry& e, std::uint64_t offset, std::uint64_t length,
                               const std::function<bool(Bytes)>& sink, std::size_t chunk) const
    {
        const std::uint64_t headerLength = e.dataOffset - e.header;
        const std::uint64_t checked = e.assumed == Assumed::LegacyCount ? 8 : kLocalSize;
        std::array<std::byte, kLocalSize> h{};
        std::uint64_t seen = 0;
        bool wrong = false;
        auto together = [&](Bytes b) {
            if (seen < checked) {
                const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(checked - seen, b.size()));
                std::memcpy(h.data() + seen, b.data(), n);
                if (seen + n == checked) {
                    wrong = !asAssumed(e, Bytes(h.data(), static_cast<std::size_t>(checked)));
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
        // Small pieces, so that a header that is not as assumed stops the request after its first
        // piece rather than after the whole storage.
        constexpr std::size_t kFirstPieces = std::size_t{64} << 10;
        auto r = file_->read(e.header, headerLength + offset + length, together, std::min(chunk, kFirstPieces));
        if (r) {
            markChecked(storage);
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
        if (loadLE(hb, 0, 4) != kLocalSig) {
            return makeError(ErrorCode::Corrupt,
                             "the local header of storage record at byte " + std::to_string(e.header) + " is missing");
        }
        {
            const std::lock_guard lock(mutex_);
            auto& entry = entries_[storage.value()];
            entry.dataOffset = e.header + kLocalSize + loadLE(hb, 26, 2) + loadLE(hb, 28, 2);
            entry.assumed = Assumed::None;
        }
        return false;
    }

    void markChecked(StorageIndex storage) const
    {
        std::uint64_t header = 0;
        {
            const std::lock_guard lock(mutex_);
            auto& entry = entries_[storage.value()];
            if (entry.assumed == Assumed::LegacyCount) {
                header = entry.header;
            }
            entry.assumed = Assumed::None;
        }
        if (header != 0) {
            const std::lock_guard lock(countsMutex_);
            const auto it = std::lower_bound(counts_.begin(), counts_.end(), header,
                                             [](const StoodCount& c, std::uint64_t at) { return c.offset < at; });
            if (it != counts_.end() && it->offset == header) {
                it->seen = true;
            }
        }
    }

    static Error countMismatch(std::uint64_t header, std::uint64_t real, std::uint64_t declared)
    {
        return makeError(ErrorCode::Corrupt, "the storage record at byte " + std::to_string(header) + " holds " +
                                                 std::to_string(real) + " elements, not the " +
                                                 std::to_string(declared) +
                                                 " its pickle declares: the stream is not laid out as torch.save "
                                                 "writes it, or the file changed");
    }

    // A legacy record lies where the pickles say only if every record before it is as long as its
    // pickle declares: a count stood in the image further along than the one read moves every
    // record after it, and a forged one could put what the next check expects at the wrong place.
    // So every stood count before `offset` (the record's own) is fetched (close ones in one request) and compared
    // before a byte from there is given out: a remote read shows the bytes a local read does, or
    // is refused. Reads in file order (convert) find each count seen with its own record.
    Expected<void> checkCountsBefore(std::uint64_t offset) const
    {
        constexpr std::uint64_t kCountGap = std::uint64_t{16} << 10;  // counts closer share a request
        const std::lock_guard lock(countsMutex_);
        std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
        std::size_t end = firstUnseen_;
        for (; end < counts_.size() && counts_[end].offset < offset; ++end) {
            if (!counts_[end].seen) {
                ranges.emplace_back(counts_[end].offset, 8);
            }
        }
        if (ranges.empty()) {
            return {};
        }
        if (auto ok = file_->fetch(ranges, kCountGap); !ok) {
            return ok;
        }
        for (std::size_t i = firstUnseen_; i < end; ++i) {
            auto& c = counts_[i];
            if (const std::uint64_t real = loadLE(file_->image(), static_cast<std::size_t>(c.offset), 8);
                !c.seen && real != c.count) {
                return countMismatch(c.offset, real, c.count);
            }
            c.seen = true;
        }
        while (firstUnseen_ < counts_.size() && counts_[firstUnseen_].seen) {
            ++firstUnseen_;
        }
        return {};
    }

    struct StoodCount {
        std::uint64_t offset = 0;
        std::uint64_t count = 0;
        bool seen = false;  // compared with the file's own
    };

    std::shared_ptr<RemoteFile> file_;
    mutable std::vector<Entry> entries_;
    mutable std::mutex mutex_;
    mutable std::atomic<bool> read_{false};
    mutable std::vector<StoodCount> counts_;  // by offset
    mutable std::size_t firstUnseen_ = 0;
    mutable std::mutex countsMutex_;
};

Error named(Error e, const std::string& input, const Redactor& redactor)
{
    e.message = redactor.apply(e.message);
    e.path = redactor.apply(input);
    return e;
}

// The file a whole repository opens as (reply_parse.h), from the Hub API's listing of it.
Expected<std::string> repositoryFile(HttpClient& client, const Location& loc)
{
    std::string rev = loc.revision;
    for (std::size_t at = 0; (at = rev.find('/', at)) != std::string::npos;) {
        rev.replace(at, 1, "%2F");
    }
    auto text = client.getText(loc.endpoint + "/api/models/" + loc.repo + "/revision/" + rev, kApiReplyLimit);
    if (!text) {
        return text.error();
    }
    return repositoryFileOf(*text, loc.repo);
}

// A member a set's index names (a shard, config.json): a plain file name beside the index, as on
// disk (memberOfFolder), requested as that one file; Corrupt otherwise, and nothing is requested.
Expected<std::string> memberUrl(const std::string& base, const std::string& name)
{
    if (!isPlainFileName(name)) {
        return makeError(ErrorCode::Corrupt, "the set names '" + name +
                                                 "', which is not a file name beside its index: a set reads only "
                                                 "its own files, so it was not requested");
    }
    return base + encodedName(name);
}

// Fetches what the zip reader reads and stands a torch-shaped local header in the image for each
// storage record whose own header was not fetched.
Expected<void> prepareZip(RemoteFile& file)
{
    auto dir = archive::ZipReader::directory(file.image());
    if (!dir) {
        return dir.error();
    }
    if (auto ok = file.fetch({{dir->offset, dir->size}}, 0); !ok) {
        return ok;
    }
    // First the records' names and places, each payload assumed to start right after its header's
    // name (no payload starts earlier in a valid zip, so no bound the reader checks can fail here).
    const auto earliest = [&](const archive::ZipRecord& r) -> std::optional<std::uint64_t> {
        if (file.holds(r.localHeaderOffset, kLocalSize)) {
            return std::nullopt;
        }
        return r.localHeaderOffset + kLocalSize + r.name.size();
    };
    auto zip = archive::ZipReader::parse(file.image(), -1, earliest);
    if (!zip) {
        return zip.error();
    }
    // Where torch's writer would put a payload (after a header padded to 64 bytes) is assumed for a
    // header not fetched, and checked when the payload is read. A payload assumed to run into the
    // central directory is another writer's (a Python zipfile copy with ZIP64 extras: its last
    // payload ended 44 bytes inside the directory), which the reader refuses: that header is fetched.
    {
        std::vector<std::pair<std::uint64_t, std::uint64_t>> headers;
        for (const auto& r : zip->records()) {
            if (!file.holds(r.localHeaderOffset, kLocalSize) && torchDataOffset(r) + r.compressedSize > dir->offset) {
                // The fixed header, its name and 4 KiB of extra field (ZIP64's is 20 bytes), up to
                // the directory.
                const std::uint64_t end = std::min<std::uint64_t>(dir->offset, r.localHeaderOffset + kLocalSize +
                                                                                   r.name.size() + kHeaderExtraFetched);
                headers.emplace_back(r.localHeaderOffset,
                                     std::max(end, r.localHeaderOffset + kLocalSize) - r.localHeaderOffset);
            }
        }
        if (auto ok = file.fetch(headers, kMergeGap); !ok) {
            return ok;
        }
    }
    const auto assumed = [&](const archive::ZipRecord& r) -> std::optional<std::uint64_t> {
        if (file.holds(r.localHeaderOffset, kLocalSize)) {
            return std::nullopt;
        }
        return torchDataOffset(r);
    };
    zip = archive::ZipReader::parse(file.image(), -1, assumed);
    if (!zip) {
        return zip.error();
    }
    std::vector<std::pair<std::uint64_t, std::uint64_t>> wanted;
    for (const auto& r : zip->records()) {
        if (!storageRecord(r)) {
            // The header, its name and extra (at most 64 KiB each), and the payload.
            const std::uint64_t slack = r.dataOffset - r.localHeaderOffset + kAlignment;
            wanted.emplace_back(r.localHeaderOffset, slack + r.compressedSize);
        }
    }
    if (auto ok = file.fetch(wanted, kMergeGap); !ok) {
        return ok;
    }
    // A torch-shaped local header where none was fetched: the zip reader takes the payload's
    // offset from it as it would from the file's own (checked when the bytes are read).
    auto again = archive::ZipReader::parse(file.image(), -1, assumed);
    if (!again) {
        return again.error();
    }
    // The fetched headers give the payloads' real offsets: a header longer than torch writes (a
    // zip from another writer) moves its payload past what was fetched, which is fetched now.
    wanted.clear();
    for (const auto& r : again->records()) {
        if (!storageRecord(r)) {
            wanted.emplace_back(r.dataOffset, r.compressedSize);
        }
    }
    if (auto ok = file.fetch(wanted, kMergeGap); !ok) {
        return ok;
    }
    for (const auto& r : again->records()) {
        const std::uint64_t lh = r.localHeaderOffset;
        if (file.holds(lh, kLocalSize)) {
            continue;
        }
        const std::uint64_t extra = r.dataOffset - lh - kLocalSize - r.name.size();
        std::array<std::byte, kLocalSize> h{};
        storeLE(h, 0, kLocalSig, 4);
        storeLE(h, 8, r.method, 2);
        storeLE(h, 14, r.crc32, 4);
        storeLE(h, 18, std::min(r.compressedSize, kOverflow32), 4);
        storeLE(h, 22, std::min(r.size, kOverflow32), 4);
        storeLE(h, 26, r.name.size(), 2);
        storeLE(h, 28, extra, 2);
        file.assume(lh, Bytes(h.data(), h.size()));
    }
    return {};
}

Expected<void> prepareSafetensors(RemoteFile& file)
{
    if (!file.holds(0, 8)) {
        if (auto ok = file.fetch({{0, kFirstBytes}}, 0); !ok) {
            return ok;
        }
    }
    const std::uint64_t n = loadLE(file.image(), 0, 8);
    constexpr std::uint64_t kLongestHeader = std::uint64_t{100} << 20;  // the safetensors crate's own limit
    if (n > kLongestHeader || n > file.size() - 8) {
        return makeError(ErrorCode::Corrupt, "the safetensors header length (" + std::to_string(n) +
                                                 ") is beyond the file or the format's 100 MB limit");
    }
    return file.fetch({{0, 8 + n}}, 0);
}

// A legacy stream's pickles are fetched (the first bytes, four times as many each time the pickles
// run past them), and each storage record's element count is stood in the image where the pickle
// declares it, so that the reader walks the records without fetching them. Returns the counts it
// stood by offset, each checked when that storage's bytes are read; none when the file is to be
// read whole: no legacy stream, pickles the reader refuses (it says why, on the whole file), a
// truncated one, or records the pickle does not declare.
using StoodCounts = std::map<std::uint64_t, std::uint64_t>;
Expected<std::optional<StoodCounts>> prepareLegacy(RemoteFile& file, std::uint64_t limit)
{
    const std::uint64_t size = file.size();
    std::uint64_t n = std::min(size, kFirstBytes);
    Expected<std::optional<LegacyLayout>> layout = std::optional<LegacyLayout>();
    for (;;) {
        if (auto ok = file.fetch({{0, n}}, 0); !ok) {
            return ok.error();
        }
        layout = legacyLayout(file.image().first(static_cast<std::size_t>(n)));
        if (layout || layout.error().code != ErrorCode::Truncated || n == size) {
            break;
        }
        if (n >= limit) {
            return makeError(ErrorCode::Unsupported, "its pickles run past the first " + humanBytes(limit) +
                                                         ", more than ckptscope reads over HTTP; download it first");
        }
        n = std::min({size, n * 4, limit});
    }
    if (!layout || !*layout) {
        return std::optional<StoodCounts>();
    }
    constexpr int kUndeclaredFetched = 16;  // each is a request of 8 bytes
    int undeclared = 0;
    StoodCounts stood;
    std::uint64_t pos = (*layout)->storagesStart;
    for (const auto& r : (*layout)->records) {
        if (pos > size || size - pos < 8) {
            break;  // the reader says the stream is truncated
        }
        std::uint64_t count = 0;
        if (r.count && !file.holds(pos, 8)) {
            count = *r.count;
            std::array<std::byte, 8> b{};
            storeLE(b, 0, count, b.size());
            file.assume(pos, Bytes(b.data(), b.size()));
            stood.emplace(pos, count);
        } else {
            if (!file.holds(pos, 8) && ++undeclared > kUndeclaredFetched) {
                return std::optional<StoodCounts>();
            }
            if (auto ok = file.fetch({{pos, 8}}, 0); !ok) {
                return ok.error();
            }
            count = loadLE(file.image(), static_cast<std::size_t>(pos), 8);
        }
        if (count > (size - pos - 8) / r.elementBytes) {
            break;
        }
        pos += 8 + count * r.elementBytes;
    }
    return std::optional(std::move(stood));
}

constexpr std::uint64_t kKeptFree = std::uint64_t{1} << 30;

// What a download may write into the filesystem of `fd`: its free space less a tenth of it, at most
// kKeptFree.
std::uint64_t roomFor(int fd)
{
    struct statvfs fs {};
    if (::fstatvfs(fd, &fs) != 0) {
        return UINT64_MAX;  // the writes themselves say when it is full
    }
    const std::uint64_t avail = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
    return avail - std::min(kKeptFree, avail / 10);
}

// The whole file at `url` downloaded into an unlinked temporary file, then read as a local file
// is (mapped; its storages copied from it): --download, for servers without range requests.
Expected<CheckpointPtr> downloadFile(HttpClient& client, const std::string& url, const std::string& shown,
                                     const RemoteOptions& options)
{
    const char* tmp = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): read before any thread starts
    const std::string dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg, hicpp-vararg): open(2)
    const int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        return makeError(ErrorCode::Io,
                         "cannot make a temporary file in " + dir + " for --download: " + systemErrorText(errno));
    }
    // A body without end (or larger than the disk) stops while the temporary file's filesystem
    // still has room for others: it is often /tmp, shared by every job on the node.
    const std::uint64_t room = roomFor(fd);
    const std::uint64_t limit = std::min(options.downloadLimit, room);
    std::optional<Error> writeError;
    auto got = client.getWhole(url, limit, [&](Bytes b) {
        while (!b.empty()) {
            const ssize_t n = ::write(fd, b.data(), b.size());
            if (n <= 0) {
                writeError =
                    makeError(ErrorCode::Io, "cannot write the download to " + dir + ": " + systemErrorText(errno));
                return false;
            }
            b = b.subspan(static_cast<std::size_t>(n));
        }
        return true;
    });
    if (!got || writeError) {
        ::close(fd);
        if (!writeError && got.error().code == ErrorCode::Limit && limit == room) {
            return makeError(ErrorCode::Limit, "--download stopped: the file is larger than the " + humanBytes(room) +
                                                   " " + dir + " has room for (a tenth of its free space, up to " +
                                                   humanBytes(kKeptFree) + ", is left free)");
        }
        return writeError ? *writeError : got.error();
    }
    // The magic link opens the unlinked file again, for the mapping that outlives this descriptor.
    auto c = openCheckpoint("/proc/self/fd/" + std::to_string(fd));
    ::close(fd);
    if (!c) {
        return c.error();
    }
    auto owned = std::const_pointer_cast<Checkpoint>(*c);  // built for this call alone
    owned->path = shown;
    return CheckpointPtr(std::move(owned));
}

bool notFound(const Error& e)
{
    return e.message.starts_with("HTTP 404");
}

// A sharded set's files beside its index: `base` is the index's URL up to its last '/'. Shards
// are opened once each (their metadata stays in their images, their storages are read from
// there), several at a time when prefetched: a set of 20 shards then waits for about three round
// trips rather than twenty.
class RemoteSetFiles final : public sharded::SetFiles {
public:
    using NewClient = std::function<std::shared_ptr<HttpClient>()>;
    RemoteSetFiles(std::shared_ptr<HttpClient> client, NewClient newClient, std::string base, std::string shownBase,
                   RemoteOptions options)
        : client_(std::move(client)), newClient_(std::move(newClient)), base_(std::move(base)),
          shownBase_(std::move(shownBase)), options_(std::move(options))
    {
    }

    [[nodiscard]] Expected<std::optional<std::string>> readText(const std::string& name,
                                                                std::uint64_t maxBytes) const override
    {
        const std::lock_guard lock(mutex_);
        if (auto it = texts_.find(name); it != texts_.end()) {
            return it->second;
        }
        auto url = memberUrl(base_, name);
        auto text =
            url ? client_->getText(*url, static_cast<std::size_t>(maxBytes)) : Expected<std::string>(url.error());
        Expected<std::optional<std::string>> result = std::optional<std::string>();
        if (text) {
            result = std::optional<std::string>(std::move(*text));
        } else if (!notFound(text.error())) {
            result = named(text.error(), pathOf(name), client_->redactor());
        }
        texts_.emplace(name, result);
        return result;
    }

    [[nodiscard]] Expected<std::optional<CheckpointPtr>> open(const std::string& name) const override
    {
        {
            const std::lock_guard lock(mutex_);
            if (auto it = opened_.find(name); it != opened_.end()) {
                return it->second;
            }
        }
        auto result = openOne(client_, name);
        const std::lock_guard lock(mutex_);
        return opened_.emplace(name, std::move(result)).first->second;
    }

    [[nodiscard]] std::string pathOf(const std::string& name) const override { return shownBase_ + name; }

    // Opens `names` ahead of open(), kParallel at a time, each worker with its own connection.
    void prefetch(const std::vector<std::string>& names) const
    {
        constexpr std::size_t kParallel = 8;
        std::atomic<std::size_t> next{0};
        auto work = [&]() {
            const auto client = newClient_();
            for (std::size_t k = next++; k < names.size(); k = next++) {
                auto result = openOne(client, names[k]);
                const std::lock_guard lock(mutex_);
                opened_.emplace(names[k], std::move(result));
            }
        };
        std::vector<std::thread> workers;
        for (std::size_t i = 0; i < std::min(kParallel, names.size()); ++i) {
            workers.emplace_back(work);
        }
        for (auto& w : workers) {
            w.join();
        }
    }

private:
    [[nodiscard]] Expected<std::optional<CheckpointPtr>> openOne(const std::shared_ptr<HttpClient>& client,
                                                                 const std::string& name) const
    {
        auto url = memberUrl(base_, name);
        if (!url) {
            return named(url.error(), pathOf(name), client->redactor());
        }
        auto c = openRemoteFile(client, *url, pathOf(name), options_);
        if (c) {
            return std::optional<CheckpointPtr>(*c);
        }
        if (notFound(c.error())) {
            return std::optional<CheckpointPtr>();
        }
        return c.error();
    }

    std::shared_ptr<HttpClient> client_;
    NewClient newClient_;
    std::string base_;
    std::string shownBase_;
    RemoteOptions options_;
    mutable std::mutex mutex_;
    mutable std::map<std::string, Expected<std::optional<std::string>>> texts_;
    mutable std::map<std::string, Expected<std::optional<CheckpointPtr>>> opened_;
};

std::string parentOf(const std::string& path)
{
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

}  // namespace

Expected<CheckpointPtr> openRemoteFile(const std::shared_ptr<HttpClient>& client, const std::string& url,
                                       const std::string& shown, const RemoteOptions& options)
{
    const Redactor& redactor = client->redactor();
    const bool safetensorsName = fileNameOf(url).ends_with(".safetensors");
    auto opened =
        RemoteFile::open(client, url, safetensorsName ? RemoteFile::First::Head : RemoteFile::First::Tail, kFirstBytes);
    if (!opened && options.download && opened.error().message.starts_with(kNoRangesMessage)) {
        auto whole = downloadFile(*client, url, shown, options);
        if (!whole) {
            return named(whole.error(), shown, redactor);
        }
        return whole;
    }
    if (!opened) {
        return named(opened.error(), shown, redactor);
    }
    std::shared_ptr<RemoteFile> file = *opened;
    const std::uint64_t size = file->size();
    bool assemble = false;
    StoodCounts stood;
    auto prepared = [&]() -> Expected<void> {
        if (file->holds(0, size)) {
            return {};
        }
        if (archive::ZipReader::directory(file->image())) {
            assemble = true;
            return prepareZip(*file);
        }
        if (!file->holds(0, std::min<std::uint64_t>(size, kFirstBytes))) {
            if (auto ok = file->fetch({{0, kFirstBytes}}, 0); !ok) {
                return ok;
            }
        }
        if (archive::looksLikeSafetensors(file->image())) {
            assemble = true;
            return prepareSafetensors(*file);
        }
        auto legacy = prepareLegacy(*file, options.wholeFileLimit);
        if (!legacy) {
            return legacy.error();
        }
        if (*legacy) {
            assemble = true;
            stood = std::move(**legacy);
            return {};
        }
        // Tars and gzip wrappers are read as a whole, and a stream the reader refuses, for its
        // message: the whole file.
        if (size > options.wholeFileLimit) {
            return makeError(ErrorCode::Unsupported,
                             "is " + humanBytes(size) +
                                 " in a format that is read whole (not a torch zip, safetensors or legacy stream), "
                                 "more than ckptscope reads over HTTP (" +
                                 humanBytes(options.wholeFileLimit) + "); download it first");
        }
        return file->fetch({{0, size}}, 0);
    }();
    if (!prepared) {
        return named(prepared.error(), shown, redactor);
    }
    auto read = readCheckpoint(file->image(), redactor.apply(shown));
    if (!read) {
        return named(read.error(), shown, redactor);
    }
    auto c = std::const_pointer_cast<Checkpoint>(*read);  // built for this call alone
    std::vector<RemoteStorages::Entry> entries(c->storages.size());
    for (std::size_t i = 0; i < c->storages.size(); ++i) {
        auto& s = c->storages[StorageIndex{static_cast<std::uint32_t>(i)}];
        auto& e = entries[i];
        e.dataOffset = s.fileOffset;
        if (c->format == Format::TorchZip && !s.record.empty() && !file->holds(s.localHeader, kLocalSize)) {
            e.header = s.localHeader;
            e.assumed = RemoteStorages::Assumed::ZipHeader;
        }
        if (const auto it = stood.find(s.fileOffset - 8); c->format == Format::TorchLegacy && it != stood.end()) {
            e.header = it->first;
            e.assumed = RemoteStorages::Assumed::LegacyCount;
            e.count = it->second;
        }
        if (assemble && s.present && !s.compressed) {
            s.assembled = true;
        }
    }
    // The source keeps the image (which `bytes` views) alive, and reads the storages.
    c->source = std::make_shared<RemoteStorages>(file, std::move(entries), stood);
    return CheckpointPtr(std::move(c));
}

Expected<RemoteInput> openRemote(const std::string& input, const std::vector<std::string>& extraHeaders,
                                 const RemoteOptions& options)
{
    const std::string endpoint = hubEndpoint();
    auto loc = parseLocation(input, endpoint);
    if (!loc) {
        return loc.error();
    }
    Credentials creds;
    creds.hubOrigin = originOf(endpoint);
    creds.hubToken = findHubToken();
    if (creds.hubToken) {
        creds.redactor.add(*creds.hubToken);
    }
    for (const auto& line : extraHeaders) {
        auto h = parseHeader(line);
        if (!h) {
            return h.error();
        }
        creds.redactor.add(h->value);
        // "Bearer TOKEN": the token alone is the secret too, wherever it would show.
        if (const auto sp = h->value.rfind(' '); sp != std::string::npos) {
            creds.redactor.add(h->value.substr(sp + 1));
        }
        creds.headers.push_back(std::move(*h));
    }
    creds.headerOrigins.push_back(originOf(loc->scheme == Scheme::Http ? loc->url : endpoint));
    const Redactor redactor = creds.redactor;
    auto newClient = [creds, options]() { return std::make_shared<HttpClient>(creds, options.http, options.stats); };
    auto client = newClient();

    std::string shown = input;
    if (loc->scheme == Scheme::HubRepo) {
        auto name = repositoryFile(*client, *loc);
        if (!name) {
            return named(name.error(), input, redactor);
        }
        loc->path = *name;
        loc->url = resolveUrl(loc->endpoint, loc->repo, loc->revision, encodedName(*name));
        shown = input + "/" + *name;
    }
    RemoteInput out;
    if (fileNameOf(loc->url).ends_with(".index.json")) {
        // A sharded set: the shards lie beside the index.
        const std::string base = loc->scheme == Scheme::Http
                                     ? parentOf(loc->url.substr(0, loc->url.find_first_of("?#")))
                                     : parentOf(resolveUrl(loc->endpoint, loc->repo, loc->revision, loc->path));
        auto files =
            std::make_shared<RemoteSetFiles>(client, newClient, base, redactor.apply(parentOf(shown)), options);
        constexpr std::uint64_t kIndexLimit = std::uint64_t{64} << 20;  // as core/sharded reads an index
        if (auto text = files->readText(fileNameOf(loc->url), kIndexLimit); text && *text) {
            files->prefetch(shardNamesOf(**text));
        }
        auto set = sharded::openSet(files, fileNameOf(loc->url), redactor.apply(input));
        if (!set) {
            return named(set.error(), input, redactor);
        }
        auto view = sharded::viewOf(*set);
        out.checkpoint =
            view ? Expected<CheckpointPtr>(*view) : Expected<CheckpointPtr>(named(view.error(), input, redactor));
        out.set = std::move(*set);
        return out;
    }
    auto c = openRemoteFile(client, loc->url, shown, options);
    if (!c) {
        return c.error();
    }
    out.checkpoint = *c;
    return out;
}

Expected<CheckpointPtr> openRemoteInput(const std::string& input, const std::vector<std::string>& extraHeaders,
                                        const RemoteOptions& options)
{
    auto r = openRemote(input, extraHeaders, options);
    if (!r) {
        return r.error();
    }
    return r->checkpoint;
}

}  // namespace ckpt::remote
