#include "document.h"

#include "remote/open_remote.h"
#include "sharded/formats.h"
#include "sharded/set_check.h"
#include "sharded/set_view.h"
#include "util/progress.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>

namespace ckpt::ui {
namespace {

std::string lowerAscii(std::string s)
{
    for (auto& c : s) {
        if (c >= 'A' && c <= 'Z') {
            c = static_cast<char>(c - 'A' + 'a');
        }
    }
    return s;
}

}  // namespace

std::shared_ptr<Document> makeDocument(CheckpointPtr checkpoint, std::stop_token stop)
{
    auto doc = std::make_shared<Document>();
    const auto& ck = *checkpoint;
    doc->lowerPaths.reserve(ck.nodes.size());
    for (std::uint32_t i = 0; i < ck.nodes.size(); ++i) {
        doc->lowerPaths.push_back(lowerAscii(ck.pathOf(NodeIndex{i})));
    }
    doc->storageTensors.resize(ck.storages.size());
    for (std::uint32_t i = 0; i < ck.tensors.size(); ++i) {
        const TensorIndex t{i};
        if (ck.storages.contains(ck.tensors[t].storage)) {
            doc->storageTensors[ck.tensors[t].storage.value()].push_back(t);
        }
    }
    (void)stop;  // indexing is linear and short; a cancelled open is caught after reading
    doc->checkpoint = std::move(checkpoint);
    return doc;
}

Expected<DocumentPtr> loadDocument(const std::string& path, std::stop_token stop)
{
    const auto t0 = std::chrono::steady_clock::now();
    auto opened = openCheckpoint(path);
    if (!opened) {
        return opened.error();
    }
    if (stop.stop_requested()) {
        return makeError(ErrorCode::Cancelled, "opening cancelled");
    }
    auto doc = makeDocument(std::move(*opened), stop);
    doc->openSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return DocumentPtr(std::move(doc));
}

namespace {

// A set's document from what one read of it gave: its view, or (a set that cannot be read whole)
// its listing's view, whose every read is refused with `notWhole`.
Expected<std::shared_ptr<Document>> setDocument(sharded::SetLocation loc, sharded::SetListing listing,
                                                CheckpointPtr view, const std::optional<Error>& notWhole,
                                                std::stop_token stop)
{
    auto part = std::make_shared<SetPart>();
    part->location = std::move(loc);
    part->listing = std::move(listing);
    if (!view) {
        part->notWhole = notWhole ? notWhole->message : "the set cannot be read whole";
        auto listed =
            sharded::listingView(part->listing, notWhole.value_or(makeError(ErrorCode::Unsupported, part->notWhole)));
        if (!listed) {
            return listed.error();
        }
        view = std::move(*listed);
    }
    for (const auto& row : part->listing.rows) {
        // A second name of stored bytes (a tie restored from config.json or the index, a ZeRO
        // shared param) is in no file under its own name: said so, with where its bytes are.
        std::string where = row.storedIn;
        if (!row.tiedTo.empty()) {
            where = "none under this name: tied to " + row.tiedTo +
                    (row.storedIn.starts_with("shares ") ? std::string() : ", whose bytes " + row.storedIn + " holds");
        }
        part->storedIn.emplace(row.key, std::move(where));
    }
    auto doc = makeDocument(std::move(view), std::move(stop));
    doc->set = std::move(part);
    return doc;
}

// A server without range requests, said for the window, which offers the whole download beside it
// (the command line's message names its --download flag instead).
Error noRangesForWindow(Error e, std::uint64_t wholeBytes)
{
    if (!e.message.starts_with(remote::kNoRangesMessage)) {
        return e;
    }
    e.message = std::string(remote::kNoRangesMessage) + ": it sends the whole file for every request, so only a " +
                "download of all of it (" + (wholeBytes > 0 ? humanBytes(wholeBytes) : "its size not given") +
                ") can read it";
    return e;
}

double secondsSince(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Expected<DocumentPtr> loadSetDocument(const sharded::SetLocation& loc, std::stop_token stop,
                                      const OpenProgress& progress)
{
    const auto t0 = std::chrono::steady_clock::now();
    sharded::OpenControl control;
    control.stop = stop;
    if (progress) {
        control.progress = [&](std::size_t index, std::size_t total, const std::string& path) {
            const std::string name = std::filesystem::path(path).filename().string();
            progress(total > 0 ? static_cast<double>(index) / static_cast<double>(total) : -1.0,
                     total > 0
                         ? "reading file " + std::to_string(index + 1) + " of " + std::to_string(total) + ": " + name
                         : "reading " + name);
        };
    }
    auto read = sharded::readSet(loc, {.groupStorages = true}, control);
    if (!read) {
        return read.error();
    }
    // A stop that came after readSet's own look at it.
    if (stop.stop_requested()) {
        return sharded::openCancelled(loc.dir);
    }
    auto doc = setDocument(loc, std::move(read->listing), std::move(read->view), read->notWhole, stop);
    if (!doc) {
        return doc.error();
    }
    (*doc)->openSeconds = secondsSince(t0);
    return DocumentPtr(std::move(*doc));
}

Expected<DocumentPtr> loadRemoteDocument(const std::string& input, std::stop_token stop, const OpenProgress& progress,
                                         bool whole)
{
    const auto t0 = std::chrono::steady_clock::now();
    remote::RemoteOptions options;
    options.http.stop = stop;
    options.download = whole;
    auto stats = std::make_shared<remote::TransferStats>();
    if (progress) {
        stats->progress = progress::throttled([progress](std::uint64_t bytes, const progress::Meter& meter) {
            progress(-1.0, meter.text("read over HTTP", {bytes, 0, {}}));
        });
    }
    options.stats = stats;
    auto opened = remote::openRemote(input, {}, options);
    // `progress` is the open's (the caller's worker holds what it calls only while this runs); the
    // counters go on counting the document's later reads, without it. No transfer runs now.
    stats->progress = nullptr;
    if (!opened) {
        return noRangesForWindow(opened.error(), stats->wholeFileBytes.load());
    }
    Expected<std::shared_ptr<Document>> doc = makeError(ErrorCode::Internal, "not opened");
    if (opened->set) {
        // A set over HTTP (Hugging Face, DCP): a set's document, its files named as the set does.
        const auto& set = *opened->set;
        const std::optional<Error> notWhole =
            opened->checkpoint ? std::nullopt : std::optional<Error>(opened->checkpoint.error());
        doc = setDocument({set.kind, set.dir, set.index, ""}, set,
                          opened->checkpoint ? *opened->checkpoint : CheckpointPtr(), notWhole, stop);
    } else if (opened->checkpoint) {
        doc = makeDocument(*opened->checkpoint, stop);
    } else {
        return opened->checkpoint.error();
    }
    if (!doc) {
        return doc.error();
    }
    auto part = std::make_shared<RemotePart>();
    part->input = input;
    // Aliases of the run's counters, which go on counting as the document's bytes are read.
    part->requests = std::shared_ptr<const std::atomic<std::uint64_t>>(stats, &stats->requests);
    part->bytesRead = std::shared_ptr<const std::atomic<std::uint64_t>>(stats, &stats->bytesRead);
    (*doc)->remote = std::move(part);
    (*doc)->openSeconds = secondsSince(t0);
    return DocumentPtr(std::move(*doc));
}

FindingsPtr diagnoseDocument(const Document& doc, std::stop_token stop)
{
    const auto t0 = std::chrono::steady_clock::now();
    auto out = std::make_shared<Findings>();
    // A set: its own findings, and the single-file rules when it reads whole (an incomplete set's
    // listing has no bytes, so the rules would only repeat that).
    auto found = !doc.set ? diagnose::check(*doc.checkpoint, {}, stop)
                 : doc.set->notWhole.empty()
                     ? sharded::checkSet(doc.set->listing.findings, *doc.checkpoint, {}, stop)
                     : Expected<std::vector<diagnose::Finding>>(sharded::setFindings(doc.set->listing.findings));
    if (found) {
        out->list = std::move(*found);
    } else {
        out->error = found.error().describe();
    }
    out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

}  // namespace ckpt::ui
