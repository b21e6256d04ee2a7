// One opened file as the window holds it: core's immutable checkpoint plus what the window derives
// from it once, off the GUI thread (lower-cased key paths for the filter). The findings come from a
// second job, so the tree is on screen before diagnose has run over 40k keys.
#pragma once

#include "checkpoint/checkpoint.h"
#include "diagnose/diagnose.h"
#include "sharded/listing.h"
#include "sharded/sharded.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <vector>

namespace ckpt::ui {

// What a document opened from a multi-file checkpoint (a sharded set, a ZeRO or DCP folder, FSDP
// rank files) has beside its checkpoint, which is the set read in place as one (sharded/set_view.h).
struct SetPart {
    sharded::SetLocation location;
    sharded::SetListing listing;  // its files and its own findings
    // Why the set cannot be read whole (a shard missing): the checkpoint then lists its tensors
    // only (sharded::listingView), every read of their bytes refused; "" when it reads whole.
    std::string notWhole;
    // The file(s) holding each key's bytes, as the format names them ("model-00001-of-00002...").
    std::unordered_map<std::string, std::string> storedIn;
};

// What a document opened from a URL (an http(s) URL, an hf:// location) has beside its checkpoint:
// where it came from and what reading it has cost so far (its bytes are fetched when read).
struct RemotePart {
    std::string input;  // as given; it never holds a token (those come from HF_TOKEN or headers)
    std::shared_ptr<const std::atomic<std::uint64_t>> requests;
    std::shared_ptr<const std::atomic<std::uint64_t>> bytesRead;
};

struct Document {
    CheckpointPtr checkpoint;
    // Per node: its key path, lower-cased (ASCII), for the case-insensitive filter.
    std::vector<std::string> lowerPaths;
    double openSeconds = 0;  // reading + indexing, for the status bar
    // For each storage, the tensors that view it (a tensor's "shares storage with").
    std::vector<std::vector<TensorIndex>> storageTensors;
    std::shared_ptr<const SetPart> set;        // null for a file
    std::shared_ptr<const RemotePart> remote;  // null for a local file or set
};

using DocumentPtr = std::shared_ptr<const Document>;

// What diagnose found in one document.
struct Findings {
    std::vector<diagnose::Finding> list;
    std::string error;  // diagnose failed (the file still opened)
    double seconds = 0;
};

using FindingsPtr = std::shared_ptr<const Findings>;

// What an open in progress says, from the worker: the fraction done (negative while unknown, as
// for a transfer) and a line for the status bar.
using OpenProgress = std::function<void(double fraction, const std::string& text)>;

// Reads and indexes `path`. Blocks: call it from a worker.
Expected<DocumentPtr> loadDocument(const std::string& path, std::stop_token stop = {});
// Reads the set at `loc` once (sharded::readSet) and indexes it as a document with its SetPart; an
// incomplete set opens from its listing. Blocks: call it from a worker.
// `progress` is told of each member file read.
Expected<DocumentPtr> loadSetDocument(const sharded::SetLocation& loc, std::stop_token stop = {},
                                      const OpenProgress& progress = {});
// Opens a remote input with HTTP range requests (remote/open_remote.h): only the bytes that describe
// it are fetched, the rest when something reads them. Blocks: call it from a worker; a stop request
// ends a transfer in progress; `progress` is told the bytes read, a few times a second at most.
// A server without range requests fails with remote::kNoRangesMessage and the whole file's size;
// `whole` then downloads all of it into an unlinked temporary file (convert's --download) and reads
// it from there.
Expected<DocumentPtr> loadRemoteDocument(const std::string& input, std::stop_token stop = {},
                                         const OpenProgress& progress = {}, bool whole = false);
// The same over an already-open checkpoint (tests build documents from memory).
std::shared_ptr<Document> makeDocument(CheckpointPtr checkpoint, std::stop_token stop = {});
// Runs diagnose over an indexed document. Blocks: call it from a worker.
FindingsPtr diagnoseDocument(const Document& doc, std::stop_token stop = {});

}  // namespace ckpt::ui
