// The one path from a remote input (an http(s) URL, hf://ORG/REPO[@REV]/PATH, hf://ORG/REPO[@REV],
// s3://BUCKET/KEY, s3://BUCKET/PREFIX/) to a Checkpoint, for every command: only the bytes that
// answer the question are fetched. An s3:// object is a URL of its store whose requests are signed
// (s3.h); a prefix is listed (ListObjectsV2) and opens as its Hugging Face set or its one
// checkpoint file.
//
// A file is an HttpSource (http_source.h) read by readSource (checkpoint.h), as any byte source
// is: the readers ask for the ranges they need (a torch zip's end records, directory and
// non-storage records; a safetensors header; a legacy stream's pickles) and read storages only when
// something reads them (--values, diff by value, convert), small ones through the source's block
// cache, large ones streamed. Other formats (tar, gzip-wrapped) are read whole, up to
// RemoteOptions::wholeFileLimit. A sharded set: its index, then each shard as a file.
#pragma once

#include "checkpoint/checkpoint.h"
#include "remote/http_client.h"
#include "sharded/listing.h"
#include "util/byte_sink.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::remote {

struct RemoteOptions {
    HttpOptions http = HttpOptions::fromEnvironment();
    std::shared_ptr<TransferStats> stats;  // counted into when given
    std::uint64_t wholeFileLimit = std::uint64_t{4} << 30;
    // --download: a server without range requests is read by downloading the whole file into an
    // unlinked temporary file (in $TMPDIR, gone when the process is), at most `downloadLimit`.
    bool download = false;
    std::uint64_t downloadLimit = std::uint64_t{1} << 40;
    // --no-sign-request: s3:// requests go unsigned (a public bucket), as the AWS CLI's option.
    bool noSignRequest = false;
};

// What a remote input opened as: one file, or a set: a Hugging Face sharded set (a repository whose
// weights are sharded, or a `*.index.json` named), whose index is fetched, then each shard's header
// or directory; or a DCP folder (its URL ending in '/', its .metadata, a repository or s3:// prefix
// holding one), read through its folder (remote_folder.h). `checkpoint` is then the set opened as
// one (sharded/set_view.h) and `set` its listing, as a local set's.
struct RemoteInput {
    // A set that reads but cannot be opened as one checkpoint (a tensor no consolidation writes)
    // holds the reason here, as sharded::viewOf gives it.
    Expected<CheckpointPtr> checkpoint = CheckpointPtr();
    std::optional<sharded::SetListing> set;
    // An incomplete set's view as far as its files were read (sharded::ReadSet::partial), which
    // `check` reads as a local set's: null where there is none.
    CheckpointPtr partial;
};

// Opens `input` (see location.h); `extraHeaders` are --header lines ("Name: value"), sent to the
// input's own host only. Errors are one line naming the input, credentials redacted.
Expected<RemoteInput> openRemote(const std::string& input, const std::vector<std::string>& extraHeaders,
                                 const RemoteOptions& options);
// One file at `url` through `client` (shown as `shown`): what openRemote does for a file once it
// has its client. Also the fuzzer's way in, with a client that serves bytes from memory.
Expected<CheckpointPtr> openRemoteFile(const std::shared_ptr<HttpClient>& client, const std::string& url,
                                       const std::string& shown, const RemoteOptions& options);
// Where a whole download goes: $TMPDIR, else /tmp.
std::string downloadDirectory();
// What downloadRemote() left in its folder: the path to open, and the bytes downloaded.
struct Downloaded {
    std::string path;
    bool set = false;  // a set's members, `path` its index or folder
    std::uint64_t bytes = 0;
};
// What `input` names downloaded whole into the folder `dir` (empty, made by the caller), for what
// reads local files only (testload's engines): a file (a folder's or repository's one file), or a
// set's members (a Hugging Face index and its shards, a DCP folder's .metadata and data files, an
// FSDP folder's rank files) under their own names, a member the set names but the folder lacks
// left out for the local read to report. `fileOnly`: the file the input names, never its set. Each
// file at most RemoteOptions::downloadLimit bytes, and together no more than leaves a tenth of
// `dir`'s filesystem free (up to 1 GiB), as --download.
Expected<Downloaded> downloadRemote(const std::string& input, const std::vector<std::string>& extraHeaders,
                                    const RemoteOptions& options, const std::string& dir, bool fileOnly);
// openRemote()'s checkpoint.
Expected<CheckpointPtr> openRemoteInput(const std::string& input, const std::vector<std::string>& extraHeaders,
                                        const RemoteOptions& options);

}  // namespace ckpt::remote
