#include "remote/open_remote.h"

#include "checkpoint/model_folder.h"
#include "remote/connections.h"
#include "remote/http_source.h"
#include "remote/location.h"
#include "remote/remote_folder.h"
#include "remote/reply_parse.h"
#include "remote/s3.h"
#include "remote/s3_xml.h"
#include "remote/sigv4.h"
#include "sharded/dcp.h"
#include "sharded/fsdp.h"
#include "sharded/listing.h"
#include "sharded/set_view.h"
#include "sharded/zero.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sys/statvfs.h>
#include <unistd.h>

namespace ckpt::remote {
namespace {

constexpr std::uint64_t kFirstBytes = std::uint64_t{64} << 10;  // the first request: head or tail
constexpr std::size_t kApiReplyLimit = std::size_t{16} << 20;

Error named(Error e, const std::string& input, const Redactor& redactor)
{
    e.message = redactor.apply(e.message);
    e.path = redactor.apply(input);
    return e;
}

// A whole repository's files (reply_parse.h), from the Hub API's listing of it.
Expected<std::vector<std::string>> repositoryFiles(HttpClient& client, const Location& loc)
{
    std::string rev = loc.revision;
    for (std::size_t at = 0; (at = rev.find('/', at)) != std::string::npos;) {
        rev.replace(at, 1, "%2F");
    }
    auto text = client.getText(loc.endpoint + "/api/models/" + loc.repo + "/revision/" + rev, kApiReplyLimit);
    if (!text) {
        return text.error();
    }
    return repositoryFilesOf(*text, loc.repo);
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

// The one whole download (--download's and testload's): the body at `url` appended to `into`, a
// file in `dir`, at most options.downloadLimit bytes. A body without end, or larger than the disk,
// stops while the file's filesystem still has room for others: it is often /tmp, shared by every
// job on the node.
Expected<std::uint64_t> downloadInto(HttpClient& client, const std::string& url, const RemoteOptions& options,
                                     FileSink& into, const std::string& dir)
{
    const std::uint64_t room = roomFor(into.fd());
    const std::uint64_t limit = std::min(options.downloadLimit, room);
    std::optional<Error> writeError;
    auto got = client.getWhole(url, limit, [&](Bytes b) {
        if (auto ok = into.append(b); !ok) {
            writeError = ok.error();
            writeError->message = "cannot write the download to " + dir + ": " + writeError->message;
            return false;
        }
        return true;
    });
    if (writeError) {
        return *writeError;
    }
    if (!got && got.error().code == ErrorCode::Limit && limit == room) {
        return makeError(ErrorCode::Limit, "the download stopped: the file is larger than the " + humanBytes(room) +
                                               " " + dir + " has room for (a tenth of its free space, up to " +
                                               humanBytes(kKeptFree) + ", is left free)");
    }
    return got;
}

// The whole file at `url` downloaded into an unlinked temporary file, then read as a local file
// is (mapped; its storages copied from it): --download, for servers without range requests.
Expected<CheckpointPtr> downloadFile(HttpClient& client, const std::string& url, const std::string& shown,
                                     const RemoteOptions& options)
{
    const std::string dir = downloadDirectory();
    const int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        return makeError(ErrorCode::Io,
                         "cannot make a temporary file in " + dir + " for --download: " + systemErrorText(errno));
    }
    FileSink sink(fd);
    if (auto got = downloadInto(client, url, options, sink, dir); !got) {
        ::close(fd);
        return got.error();
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
// there), several at a time when prefetched (connections.h): a set of 20 shards then waits for
// about three round trips rather than twenty.
class RemoteSetFiles final : public sharded::SetFiles {
public:
    RemoteSetFiles(const std::shared_ptr<HttpClient>& client, std::string base, std::string shownBase,
                   RemoteOptions options)
        : client_(client), connections_(client), base_(std::move(base)), shownBase_(std::move(shownBase)),
          options_(std::move(options))
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

    // Opens `names` ahead of open(), kParallelConnections at a time.
    void prefetch(const std::vector<std::string>& names) const
    {
        connections_.run(names.size(), [&](std::size_t k, const std::shared_ptr<HttpClient>& client) {
            auto result = openOne(client, names[k]);
            const std::lock_guard lock(mutex_);
            opened_.emplace(names[k], std::move(result));
        });
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
    Connections connections_;
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

// ListObjectsV2 of `prefix` with '/' as the delimiter, page after page, each page at most
// kListPageLimit bytes; a listing past kListPages pages, or one that hands back a token it gave
// before (a server that would list for ever), ends in one line.
Expected<PrefixListing> listPrefix(HttpClient& client, const std::string& bucketUrl, const std::string& prefix)
{
    constexpr std::size_t kListPageLimit = std::size_t{8} << 20;  // 1000 keys of 1 KiB, with room
    constexpr int kListPages = 100;                               // 100,000 entries in one folder
    PrefixListing out;
    std::string token;
    std::set<std::string> tokens;
    for (int page = 0;; ++page) {
        if (page == kListPages) {
            return makeError(ErrorCode::Limit, "the listing goes on past " + std::to_string(kListPages) + " pages (" +
                                                   std::to_string(out.files.size()) +
                                                   " files so far): name a file or a narrower prefix");
        }
        std::string url = bucketUrl + "?list-type=2&delimiter=%2F&prefix=" + sigv4::uriEncode(prefix, false);
        if (!token.empty()) {
            url += "&continuation-token=" + sigv4::uriEncode(token, false);
        }
        auto text = client.getText(url, kListPageLimit);
        if (!text) {
            return text.error();
        }
        auto parsed = s3::parseListPage(*text);
        if (!parsed) {
            return parsed.error();
        }
        for (auto& o : parsed->objects) {
            // Only what lies under the prefix, one level down, with a name a file may have.
            if (o.key.starts_with(prefix) && isPlainFileName(std::string_view(o.key).substr(prefix.size()))) {
                out.files.push_back(o.key.substr(prefix.size()));
            }
        }
        for (auto& p : parsed->commonPrefixes) {
            if (p.starts_with(prefix)) {
                out.folders.push_back(p.substr(prefix.size()));
            }
        }
        if (!parsed->truncated) {
            return out;
        }
        if (!tokens.insert(parsed->nextToken).second) {
            return makeError(ErrorCode::Corrupt, "the listing hands back a continuation token it gave before: it "
                                                 "would never end");
        }
        token = parsed->nextToken;
    }
}

}  // namespace

Expected<CheckpointPtr> openRemoteFile(const std::shared_ptr<HttpClient>& client, const std::string& url,
                                       const std::string& shown, const RemoteOptions& options)
{
    const Redactor& redactor = client->redactor();
    // The first request is where the readers start: a safetensors file's head, anything else's tail
    // (a zip's end records and usually its directory).
    const bool safetensorsName = fileNameOf(url).ends_with(".safetensors");
    auto opened =
        HttpSource::open(client, url, safetensorsName ? HttpSource::First::Head : HttpSource::First::Tail, kFirstBytes);
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
    auto read = readSource(*opened, redactor.apply(shown), options.wholeFileLimit);
    if (!read) {
        return named(read.error(), shown, redactor);
    }
    return read;
}

namespace {

// The plain file names of the sub-folder `name` of a set's folder, where the transport lists it (an
// s3:// prefix's ListObjectsV2, a Hub repository's files); nullopt where nothing lists it.
using ListSub = std::function<Expected<std::optional<std::vector<std::string>>>(const std::string& name)>;

// A set's listing, whether its format's listingOf can fail (ZeRO's) or not.
Expected<sharded::SetListing> listed(sharded::SetListing l)
{
    return l;
}
Expected<sharded::SetListing> listed(Expected<sharded::SetListing> l)
{
    return l;
}

// A set read over the network as a remote input: its view (or why there is none, named as the input)
// and its listing.
template <class Set, class View>
Expected<RemoteInput> setInput(const Set& set, const View& view, const std::string& input, const Redactor& redactor)
{
    auto listing = listed(sharded::listingOf(set));
    if (!listing) {
        return named(listing.error(), input, redactor);
    }
    RemoteInput out;
    out.checkpoint =
        view ? Expected<CheckpointPtr>(*view) : Expected<CheckpointPtr>(named(view.error(), input, redactor));
    out.set = std::move(*listing);
    return out;
}

// A DCP folder at `base` (shown as `shownBase`), read through its UrlFolder as a local one is
// through its LocalFolder: .metadata, then what its findings need of the data files.
Expected<RemoteInput> openDcpFolder(const std::shared_ptr<HttpClient>& client, const std::string& base,
                                    const std::string& shownBase, std::optional<std::vector<std::string>> listing,
                                    const std::string& input)
{
    const Redactor& redactor = client->redactor();
    auto folder = std::make_shared<const UrlFolder>(client, base, redactor.apply(shownBase), std::move(listing));
    const sharded::SetLocation loc{sharded::SetKind::Dcp, folder->shown(), folder->pathOf(std::string(kDcpMetadata)),
                                   "torch.distributed.checkpoint (DCP) directory"};
    auto set = sharded::dcp::open(folder, loc);
    if (!set) {
        return named(set.error(), input, redactor);
    }
    return setInput(*set, sharded::dcp::view(*set), input, redactor);
}

// The tag `latest` names, read from `folder` (at most zero::kMaxLatestBytes) and held to the local
// folder's rule (zero::isChildTag): a tag that leads out of the folder is refused before anything
// outside it is requested.
Expected<std::string> latestTag(const UrlFolder& folder)
{
    auto src = folder.open(std::string(kZeroLatest), "the DeepSpeed save folder");
    if (!src) {
        return src.error();
    }
    if ((*src)->size() > sharded::zero::kMaxLatestBytes) {
        Error e =
            makeError(ErrorCode::Limit, "is " + std::to_string((*src)->size()) + " bytes, not a tag name (at most " +
                                            std::to_string(sharded::zero::kMaxLatestBytes) + ")");
        e.path = folder.pathOf(std::string(kZeroLatest));
        return e;
    }
    auto held = (*src)->read(0, (*src)->size());
    if (!held) {
        return held.error();
    }
    const std::string tag =
        sharded::zero::tagIn(std::string_view(reinterpret_cast<const char*>(held->bytes.data()), held->bytes.size()));
    if (!sharded::zero::isChildTag(tag)) {
        return sharded::zero::notChildTag(tag, folder.shown(), folder.pathOf(std::string(kZeroLatest)));
    }
    return tag;
}

// A DeepSpeed ZeRO folder at `base` (shown as `shownBase`), read through UrlFolders as a local one is
// through LocalFolders: `entry` is what it was found by, `latest` (the save folder: the tag folder
// it names is read, listed by `listSub` where the transport lists) or the rank-0 model states (the
// tag folder itself).
Expected<RemoteInput> openZeroFolder(const std::shared_ptr<HttpClient>& client, const std::string& base,
                                     const std::string& shownBase, std::optional<std::vector<std::string>> listing,
                                     const std::string& entry, const ListSub& listSub, const std::string& input)
{
    const Redactor& redactor = client->redactor();
    const std::string shown = redactor.apply(shownBase);
    auto save = std::make_shared<const UrlFolder>(client, base, shown, std::move(listing));
    auto tag = save;
    if (entry == kZeroLatest) {
        auto name = latestTag(*save);
        if (!name) {
            return named(name.error(), input, redactor);
        }
        auto files = listSub ? listSub(*name) : Expected<std::optional<std::vector<std::string>>>(std::nullopt);
        if (!files) {
            return named(files.error(), input, redactor);
        }
        tag = std::make_shared<const UrlFolder>(client, base + encodedName(*name) + "/", shown + *name + "/",
                                                std::move(*files));
    }
    const sharded::SetLocation loc{sharded::SetKind::DeepSpeedZero, save->shown(), tag->shown(),
                                   "DeepSpeed ZeRO checkpoint"};
    auto set = sharded::zero::open(tag, loc);
    if (!set) {
        return named(set.error(), input, redactor);
    }
    // As the registry reads a local one (sharded::readSet): param groups as storages, and a set that
    // is not whole keeps its view as far as it reads, for check.
    auto view = sharded::viewOf(*set, true);
    auto whole = sharded::zero::checkConsolidatable(*set);
    auto out = setInput(*set, whole ? view : Expected<CheckpointPtr>(whole.error()), input, redactor);
    if (out && !whole && view) {
        out->partial = *view;
    }
    return out;
}

// `c`, the file `name` of a listed folder, with that folder's layout when it is the model of one
// (an accelerate, PEFT or Trainer folder: model_folder.h), as a local folder's model is opened.
CheckpointPtr withModelFolder(const CheckpointPtr& c, const std::string& name, const std::string& shownBase,
                              const std::optional<std::vector<std::string>>& listing)
{
    if (!listing) {
        return c;
    }
    auto folder =
        modelFolderOf(shownBase.ends_with('/') ? shownBase.substr(0, shownBase.size() - 1) : shownBase, *listing);
    if (!folder || folder->model() != name) {
        return c;
    }
    auto owned = std::const_pointer_cast<Checkpoint>(c);  // built for this call alone
    owned->folder = std::make_shared<const ModelFolder>(std::move(*folder));
    return owned;
}

// Which of kFolderEntryNames the folder at `base` holds, asked one by one (a byte each): a folder
// URL's DCP .metadata, model file, set index or adapter. An Io error naming them when none is there.
Expected<std::string> probeFolderEntry(const std::shared_ptr<HttpClient>& client, const std::string& base,
                                       const std::string& shownBase)
{
    const UrlFolder folder(client, base, shownBase, std::nullopt);
    std::string tried;
    for (const std::string_view name : kFolderEntryNames) {
        auto there = folder.exists(std::string(name));
        if (!there) {
            return there.error();
        }
        if (*there) {
            return std::string(name);
        }
        tried += (tried.empty() ? "" : ", ") + std::string(name);
    }
    return makeError(ErrorCode::Io, "a folder URL that holds none of " + tried +
                                        " (a server lists no folder over HTTP): name the checkpoint file");
}

// FSDP rank files of a listed folder (fsdp.h: `{stem}rank{R}{ext}`), read through its UrlFolder as
// a local folder's are: `first` names the stem.
Expected<RemoteInput> openFsdpFolder(const std::shared_ptr<HttpClient>& client, const std::string& base,
                                     const std::string& shownBase, std::optional<std::vector<std::string>> listing,
                                     const std::string& first, const std::string& input)
{
    const Redactor& redactor = client->redactor();
    auto folder = std::make_shared<const UrlFolder>(client, base, redactor.apply(shownBase), std::move(listing));
    const auto stem = sharded::fsdp::rankFileName(first);
    const sharded::SetLocation loc{sharded::SetKind::FsdpRanks, folder->shown(), folder->pathOf(first),
                                   "FSDP per-rank state dicts (" + (stem ? stem->first : first) + ")"};
    auto set = sharded::fsdp::open(folder, loc, false);
    if (!set) {
        return named(set.error(), input, redactor);
    }
    return setInput(*set, sharded::fsdp::view(*set), input, redactor);
}

// The first FSDP rank file of a listed folder whose checkpoint files are all rank files of one
// stem and none of kFolderEntryNames: what the folder opens as, an FSDP set.
std::optional<std::string> fsdpRankFileOf(const std::vector<std::string>& files)
{
    if (std::any_of(kFolderEntryNames.begin(), kFolderEntryNames.end(),
                    [&](std::string_view n) { return std::find(files.begin(), files.end(), n) != files.end(); })) {
        return std::nullopt;
    }
    std::optional<std::pair<std::string, std::string>> first;  // name, stem
    for (const auto& f : files) {
        if (const auto k = sharded::fsdp::rankFileName(f)) {
            if (!first) {
                first.emplace(f, k->first);
            } else if (k->first != first->second) {
                return std::nullopt;
            } else if (f < first->first) {
                first->first = f;
            }
        }
    }
    return first ? std::optional(first->first) : std::nullopt;
}

// Whether `name` opens a ZeRO set: `latest` names the save folder wherever it is named, as on disk;
// the model states the tag folder where they are what its folder was found by (`folderEntry`; a
// rank file named alone is that file).
bool opensZeroSet(const std::string& name, bool folderEntry)
{
    return name == kZeroLatest ||
           (folderEntry && std::find(kZeroModelStates.begin(), kZeroModelStates.end(), name) != kZeroModelStates.end());
}

// Whether `name` opens an FSDP set: a rank file of a listed folder whose checkpoint files are all
// rank files of one stem.
bool opensFsdpSet(const std::string& name, const std::optional<std::vector<std::string>>& listing)
{
    return listing && sharded::fsdp::rankFileName(name) && fsdpRankFileOf(*listing);
}

// A file, a Hugging Face set when `url` is its index (its shards beside it, at `base`), a DCP
// folder when it is its .metadata, or the first of those a folder URL (ending in '/') holds. `listing`: the folder's
// files, where the transport listed them (an s3:// prefix).
Expected<RemoteInput> openFileOrSet(const std::shared_ptr<HttpClient>& client, const std::string& url,
                                    const std::string& base, const std::string& input, const std::string& shown,
                                    const RemoteOptions& options,
                                    std::optional<std::vector<std::string>> listing = std::nullopt,
                                    bool folderEntry = false, const ListSub& listSub = nullptr)
{
    const Redactor& redactor = client->redactor();
    const std::string name = fileNameOf(url);
    if (opensZeroSet(name, folderEntry)) {
        return openZeroFolder(client, base, parentOf(shown), std::move(listing), name, listSub, input);
    }
    if (name.empty()) {
        // A folder URL, which nothing lists: the first of the files a folder opens as that it holds.
        auto entry = probeFolderEntry(client, base, parentOf(shown));
        if (!entry) {
            return named(entry.error(), input, redactor);
        }
        return openFileOrSet(client, base + encodedName(*entry), base, input, parentOf(shown) + *entry, options,
                             std::move(listing), true, listSub);
    }
    if (fileNameOf(url) == kDcpMetadata) {
        return openDcpFolder(client, base, parentOf(shown), std::move(listing), input);
    }
    if (opensFsdpSet(name, listing)) {
        return openFsdpFolder(client, base, parentOf(shown), std::move(listing), fileNameOf(url), input);
    }
    if (fileNameOf(url).ends_with(".index.json")) {
        // A sharded set: the shards lie beside the index.
        auto files = std::make_shared<RemoteSetFiles>(client, base, redactor.apply(parentOf(shown)), options);
        constexpr std::uint64_t kIndexLimit = std::uint64_t{64} << 20;  // as core/sharded reads an index
        if (auto text = files->readText(fileNameOf(url), kIndexLimit); text && *text) {
            files->prefetch(shardNamesOf(**text));
        }
        auto set = sharded::openSet(files, fileNameOf(url), redactor.apply(input));
        if (!set) {
            return named(set.error(), input, redactor);
        }
        return setInput(*set, sharded::viewOf(*set), input, redactor);
    }
    auto c = openRemoteFile(client, url, shown, options);
    if (!c) {
        return c.error();
    }
    RemoteInput out;
    out.checkpoint = withModelFolder(*c, fileNameOf(url), parentOf(shown), listing);
    return out;
}

// Where a remote input's file is and how to ask for it: a client (connections.h makes more from it),
// the file's URL, the folder its set's members would be in, and the name shown.
struct Resolved {
    std::shared_ptr<HttpClient> client;
    std::string url;
    std::string base;
    std::string shown;
    std::optional<std::vector<std::string>> listing;  // the folder's files, where the transport listed them
    bool folderEntry = false;                         // `url` is the file a folder or repository opens as
    ListSub listSub;                                  // its sub-folders' files, where the transport lists them
};

// s3://BUCKET/KEY (a file, or a set's index) and s3://BUCKET/PREFIX/ (a folder: a set, or its one
// checkpoint file), every request signed as the AWS CLI would sign it (s3.h).
Expected<Resolved> resolveS3(const std::string& input, const RemoteOptions& options)
{
    auto name = s3::parseName(input);
    if (!name) {
        return name.error();
    }
    auto settings = s3::findSettings(options.noSignRequest);
    if (!settings) {
        return named(settings.error(), input, Redactor());
    }
    const std::string bucketUrl = s3::bucketUrl(*settings, name->bucket);
    const Credentials creds = s3::credentialsFor(*settings, name->bucket);
    auto client = std::make_shared<HttpClient>(creds, options.http, options.stats);
    std::string key = name->key;
    std::string shown = input;
    std::optional<std::vector<std::string>> files;
    if (name->isPrefix()) {
        auto listing = listPrefix(*client, bucketUrl, key);
        auto rank = listing ? fsdpRankFileOf(listing->files) : std::nullopt;
        auto file = rank      ? Expected<std::string>(*rank)
                    : listing ? prefixFileOf(*listing, input)
                              : Expected<std::string>(listing.error());
        if (!file) {
            return named(file.error(), input, creds.redactor);
        }
        key += *file;
        shown += *file;
        files = std::move(listing->files);
    }
    const std::string url = s3::objectUrl(*settings, {name->bucket, key});
    ListSub listSub = [client, bucketUrl, prefix = name->key](const std::string& sub) {
        auto listed = listPrefix(*client, bucketUrl, prefix + sub + "/");
        return listed ? Expected<std::optional<std::vector<std::string>>>(std::move(listed->files))
                      : Expected<std::optional<std::vector<std::string>>>(listed.error());
    };
    return Resolved{client,
                    url,
                    parentOf(url),
                    shown,
                    std::move(files),
                    name->isPrefix(),
                    name->isPrefix() ? std::move(listSub) : nullptr};
}

// http(s):// and hf:// (a file, or a whole repository's one file), --header sent to the input's host.
Expected<Resolved> resolveHttp(const std::string& input, const std::vector<std::string>& extraHeaders,
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
    auto client = std::make_shared<HttpClient>(creds, options.http, options.stats);

    std::string shown = input;
    std::optional<std::vector<std::string>> listing;
    ListSub listSub;
    if (loc->scheme == Scheme::HubRepo) {
        auto files = repositoryFiles(*client, *loc);
        const auto rank = files ? fsdpRankFileOf(*files) : std::nullopt;
        auto name = rank    ? Expected<std::string>(*rank)
                    : files ? folderFileOf(*files, "the repository", "hf://" + loc->repo + "/FILE")
                            : Expected<std::string>(files.error());
        if (!name) {
            return named(name.error(), input, redactor);
        }
        // The files at its top: the folder the chosen file is read from, as an s3:// prefix's listing.
        listing.emplace();
        std::copy_if(files->begin(), files->end(), std::back_inserter(*listing),
                     [](const std::string& f) { return isPlainFileName(f); });
        loc->path = *name;
        loc->url = resolveUrl(loc->endpoint, loc->repo, loc->revision, encodedName(*name));
        shown = input + "/" + *name;
        // A sub-folder's files (a ZeRO tag folder's) are the repository's files under it.
        listSub = [all = *files](const std::string& sub) {
            std::vector<std::string> in;
            for (const auto& f : all) {
                if (f.starts_with(sub + "/") && isPlainFileName(std::string_view(f).substr(sub.size() + 1))) {
                    in.push_back(f.substr(sub.size() + 1));
                }
            }
            return Expected<std::optional<std::vector<std::string>>>(std::move(in));
        };
    }
    // hf://ORG/REPO/PATH/ is a folder of the repository (a DCP folder), as an http(s) URL ending in '/'.
    const bool hubFolder = loc->scheme == Scheme::HubFile && input.ends_with('/');
    if (hubFolder) {
        loc->url += '/';
    }
    const std::string base = loc->scheme == Scheme::Http ? parentOf(loc->url.substr(0, loc->url.find_first_of("?#")))
                             : hubFolder                 ? loc->url
                                         : parentOf(resolveUrl(loc->endpoint, loc->repo, loc->revision, loc->path));
    const bool repo = loc->scheme == Scheme::HubRepo;
    return Resolved{client, loc->url, base, shown, std::move(listing), repo, std::move(listSub)};
}

Expected<Resolved> resolve(const std::string& input, const std::vector<std::string>& extraHeaders,
                           const RemoteOptions& options)
{
    if (input.starts_with(s3::kScheme)) {
        if (!extraHeaders.empty()) {
            return makeError(ErrorCode::Usage, "--header is for http(s) and hf:// inputs: s3:// requests are signed "
                                               "with your AWS credentials");
        }
        return resolveS3(input, options);
    }
    return resolveHttp(input, extraHeaders, options);
}

}  // namespace

Expected<RemoteInput> openRemote(const std::string& input, const std::vector<std::string>& extraHeaders,
                                 const RemoteOptions& options)
{
    auto r = resolve(input, extraHeaders, options);
    if (!r) {
        return r.error();
    }
    return openFileOrSet(r->client, r->url, r->base, input, r->shown, options, std::move(r->listing), r->folderEntry,
                         r->listSub);
}

namespace {

// The file at `url` downloaded into `path`, a new file in `dir`. One that is not there (404) makes
// no file: `missingIsNone` (a set's member, which the local read of the set then reports missing,
// as for a folder on disk) gives nullopt, otherwise the 404 is the error.
Expected<std::optional<std::uint64_t>> downloadTo(HttpClient& client, const std::string& url, const std::string& path,
                                                  const RemoteOptions& options, const std::string& dir,
                                                  bool missingIsNone)
{
    const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        return makeError(ErrorCode::Io, "cannot make " + path + " for the download: " + systemErrorText(errno));
    }
    FileSink sink(fd);
    auto got = downloadInto(client, url, options, sink, dir);
    ::close(fd);
    if (!got) {
        ::unlink(path.c_str());
        if (missingIsNone && notFound(got.error())) {
            return std::optional<std::uint64_t>();
        }
        return got.error();
    }
    return std::optional<std::uint64_t>(*got);
}

// Whether the file a resolved input names is what a set is opened by: a DCP folder's .metadata, a
// Hugging Face index, or an FSDP rank file of a listed folder of them.
bool opensSet(const std::string& name, const std::optional<std::vector<std::string>>& listing)
{
    return name == kDcpMetadata || name.ends_with(".index.json") || opensFsdpSet(name, listing);
}

}  // namespace

std::string downloadDirectory()
{
    const char* tmp = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): read before any thread starts
    return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

Expected<Downloaded> downloadRemote(const std::string& input, const std::vector<std::string>& extraHeaders,
                                    const RemoteOptions& options, const std::string& dir, bool fileOnly)
{
    auto r = resolve(input, extraHeaders, options);
    if (!r) {
        return r.error();
    }
    const Redactor& redactor = r->client->redactor();
    std::string name = fileNameOf(r->shown);
    bool folderEntry = r->folderEntry;
    const bool probed = name.empty();
    if (probed) {
        // A folder URL, which nothing lists: the first of the files a folder opens as that it holds.
        auto entry = probeFolderEntry(r->client, r->base, parentOf(r->shown));
        if (!entry) {
            return named(entry.error(), input, redactor);
        }
        name = *entry;
        folderEntry = true;
    }
    if (!fileOnly && opensZeroSet(name, folderEntry)) {
        // Its members lie in the tag folder `latest` names, which a download would have to rebuild.
        return named(makeError(ErrorCode::Usage, "is a DeepSpeed ZeRO folder over the network, which is read where "
                                                 "it is (inspect, check, convert) but not downloaded: download "
                                                 "its folder to test-load it"),
                     input, redactor);
    }
    Downloaded out;
    if (fileOnly || !opensSet(name, r->listing)) {
        // Saved under its own name where that is a plain one (engines and messages show it).
        out.path = dir + "/" + (isPlainFileName(name) ? name : std::string("remote"));
        const std::string url = probed ? r->base + encodedName(name) : r->url;
        auto got = downloadTo(*r->client, url, out.path, options, dir, false);
        if (!got) {
            return named(got.error(), r->shown, redactor);
        }
        out.bytes = **got;
        return out;
    }
    // A set: opened where it is first, for the names of its members; then each is downloaded
    // beside the others, as the folder holds them.
    auto opened = openFileOrSet(r->client, r->base + encodedName(name), r->base, input, parentOf(r->shown) + name,
                                options, r->listing, folderEntry, r->listSub);
    if (!opened) {
        return opened.error();
    }
    if (!opened->set) {
        return named(makeError(ErrorCode::Internal, "opened as no set"), input, redactor);
    }
    const auto& listing = *opened->set;
    std::vector<std::string> members = listing.files;
    if (!listing.index.empty()) {
        members.push_back(fileNameOf(listing.index));
    }
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    for (const auto& m : members) {
        auto url = memberUrl(r->base, m);
        auto got = url ? downloadTo(*r->client, *url, dir + "/" + m, options, dir, true)
                       : Expected<std::optional<std::uint64_t>>(url.error());
        if (!got) {
            return named(got.error(), parentOf(r->shown) + m, redactor);
        }
        out.bytes += got->value_or(0);
    }
    out.set = true;
    out.path = name.ends_with(".index.json") ? dir + "/" + name : dir;
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
