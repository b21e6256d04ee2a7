#include "document.h"

#include "remote/open_remote.h"
#include "sharded/formats.h"
#include "sharded/set_check.h"
#include "sharded/set_view.h"

#include <chrono>

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

Expected<DocumentPtr> loadSetDocument(const sharded::SetLocation& loc, std::stop_token stop)
{
    const auto t0 = std::chrono::steady_clock::now();
    auto read = sharded::readSet(loc);
    if (!read) {
        return read.error();
    }
    if (stop.stop_requested()) {
        return makeError(ErrorCode::Cancelled, "opening cancelled");
    }
    auto part = std::make_shared<SetPart>();
    part->location = loc;
    part->listing = std::move(read->listing);
    CheckpointPtr checkpoint = std::move(read->view);
    if (!checkpoint) {
        part->notWhole = read->notWhole ? read->notWhole->message : "the set cannot be read whole";
        auto listed = sharded::listingView(part->listing,
                                           read->notWhole.value_or(makeError(ErrorCode::Unsupported, part->notWhole)));
        if (!listed) {
            return listed.error();
        }
        checkpoint = std::move(*listed);
    }
    for (const auto& row : part->listing.rows) {
        part->storedIn.emplace(row.key, row.storedIn);
    }
    auto doc = makeDocument(std::move(checkpoint), stop);
    doc->set = std::move(part);
    doc->openSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return DocumentPtr(std::move(doc));
}

Expected<DocumentPtr> loadRemoteDocument(const std::string& input, std::stop_token stop)
{
    const auto t0 = std::chrono::steady_clock::now();
    remote::RemoteOptions options;
    options.http.stop = stop;
    auto stats = std::make_shared<remote::TransferStats>();
    options.stats = stats;
    auto opened = remote::openRemoteInput(input, {}, options);
    if (!opened) {
        return opened.error();
    }
    auto doc = makeDocument(std::move(*opened), stop);
    auto part = std::make_shared<RemotePart>();
    part->input = input;
    // Aliases of the run's counters, which go on counting as the document's bytes are read.
    part->requests = std::shared_ptr<const std::atomic<std::uint64_t>>(stats, &stats->requests);
    part->bytesRead = std::shared_ptr<const std::atomic<std::uint64_t>>(stats, &stats->bytesRead);
    doc->remote = std::move(part);
    doc->openSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return DocumentPtr(std::move(doc));
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
