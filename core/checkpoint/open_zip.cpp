// The torch.save zip archive (docs/format.md §2): data.pkl and one stored record per storage, read
// from a mapped file or from ranges of a source that is not (file_formats.h's torch-zip entry).
#include "archive/inflate.h"
#include "archive/zip.h"
#include "checkpoint/loaders.h"
#include "checkpoint/source_storages.h"

#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {
namespace {

void noteSalvage(Checkpoint& c, const archive::ZipReader& zip)
{
    const auto& s = zip.salvage();
    if (!s) {
        return;
    }
    c.truncation.salvaged = true;
    c.truncation.records = zip.records().size();
    c.truncation.inDirectory = s->inCentralDirectory;
    if (s->inCentralDirectory) {
        c.truncation.endsIn = "in the central directory, after every record";
    } else if (s->cutAt == s->fileSize) {
        c.truncation.endsIn = "after its last whole record, before the central directory";
    } else {
        const std::string name = s->cutRecord.empty() ? std::string("a record") : "record '" + s->cutRecord + "'";
        c.truncation.endsIn = "inside " + name + ", which starts at byte " + std::to_string(s->cutAt);
    }
    c.warnings.push_back("the zip archive is truncated (no central directory; it ends " + c.truncation.endsIn +
                         "): read from its " + std::to_string(c.truncation.records) +
                         " whole local records; torch.load refuses it");
}

// A torch zip's records read through `zipReader` (over the mapping, or ranges of a source).
Expected<void> loadZipFrom(Checkpoint& c, const archive::ZipReader& zipReader, MemoryBudget& budget)
{
    const archive::ZipReader* zip = &zipReader;
    c.format = Format::TorchZip;
    c.archiveFolder = zip->folder();
    noteSalvage(c, *zip);
    if (detail::isExportArchive(*zip)) {
        return detail::loadExportArchive(c, *zip, budget);
    }
    if (zip->flat()) {
        return makeError(ErrorCode::Corrupt, "file in archive is not in a subdirectory: " + zip->records().front().name,
                         zip->flatFirstAt());
    }
    if (zip->find("constants.pkl") != nullptr) {
        // data.pkl holds the module tree as __torch__ objects with the same storage ids as torch.save;
        // the class sources say which attributes are parameters and buffers (state_dict.h).
        c.torchScript = true;
        detail::readScriptClasses(*zip, c);
    }
    const archive::ZipRecord* pkl = zip->find("data.pkl");
    if (pkl == nullptr) {
        if (zip->find(".data/extern_modules") != nullptr) {
            return makeError(ErrorCode::Unsupported, "is a torch.package archive, not a torch.save checkpoint");
        }
        if (zip->find("model.json") != nullptr) {
            return detail::loadFirstScriptLayout(c, *zip);
        }
        if (c.truncation.salvaged) {
            return makeError(ErrorCode::Truncated,
                             "zip archive is truncated and its data.pkl is not whole: the file ends " +
                                 c.truncation.endsIn + " (torch: \"" + std::string(archive::kTruncatedTorchError) +
                                 "\")");
        }
        return makeError(ErrorCode::Corrupt, "the zip archive has no data.pkl record (folder '" + zip->folder() +
                                                 "'): it is not a torch.save checkpoint or it is damaged");
    }
    if (!c.truncation.salvaged && zip->find("version") == nullptr && zip->find(".data/version") == nullptr) {
        c.warnings.emplace_back("the archive has no 'version' record; torch.load will refuse it");
    }
    if (const auto* bo = zip->find("byteorder")) {
        std::vector<std::byte> scratch;
        if (auto d = zip->data(*bo, scratch)) {
            c.byteorder = std::string(asText(*d));
            if (c.byteorder != "little" && c.byteorder != "big") {
                c.warnings.push_back("unknown byteorder record '" + c.byteorder + "'");
            }
        }
    }
    // The budget follows the pickle's size in the file: a deflated data.pkl that inflates past it
    // (50 million NONEs in 97 KB) is refused before it is inflated.
    budget.pickleBytes = pkl->compressedSize;
    if (pkl->method != 0) {
        if (pkl->size > budget.limit()) {
            return budget.exceeded();
        }
        c.arena.charge(pkl->size);
    }
    std::vector<std::byte> scratch;
    auto data = zip->data(*pkl, scratch);
    if (!data) {
        return data.error();
    }
    // The central directory and local headers were read through the mapping (40k records: 7 MB of
    // pages); the pickle's pages are let go again once it is read, before the storage and tensor
    // tables are built. Together they moved the 40k-key read's peak from 64 to 59 MB.
    if (c.file) {
        dropResidentPages(*c.file);
    }
    if (auto r = unpickleInto(c, *data, false, budget); !r) {
        r.error().message = "data.pkl: " + r.error().message;
        if (r.error().offset) {
            r.error().message += " (pickle byte " + std::to_string(*r.error().offset) + ")";
            r.error().offset.reset();
        }
        return r;
    }
    const std::size_t dataStorages = c.arena.storages.size();
    if (c.torchScript) {
        detail::readScriptConstants(*zip, c, budget);
    }
    if (c.file) {
        dropResidentPages(*c.file);
    }
    if (auto r = adoptStorages(c); !r) {
        return r;
    }
    for (std::size_t i = 0; i < c.storages.size(); ++i) {
        auto& s = c.storages[StorageIndex{static_cast<std::uint32_t>(i)}];
        const std::string recName = i < dataStorages ? "data/" + s.key : s.key.str();  // constants/<key>
        const archive::ZipRecord* rec = zip->find(recName);
        if (rec == nullptr && c.truncation.salvaged) {
            continue;  // cut off with the rest of the file: present stays false
        }
        if (rec == nullptr) {
            return makeError(ErrorCode::Corrupt, "storage record " + recName +
                                                     " is missing from the archive (torch.load fails with \"failed "
                                                     "locating file " +
                                                     recName + "\")");
        }
        detail::placeRecord(s, *rec, 0);
        if (s.method != 0 && s.method != 8) {
            c.warnings.push_back("storage record " + rec->name + " is compressed with " +
                                 archive::methodName(s.method) + ", which torch.load cannot read");
        }
    }
    return checkStorageBytes(c);
}

}  // namespace

Expected<void> loadZip(Checkpoint& c, MemoryBudget& budget)
{
    auto zip = archive::ZipReader::parse(c.bytes, c.file ? c.file->fd() : -1);
    if (!zip) {
        return zip.error();
    }
    return loadZipFrom(c, *zip, budget);
}

// A torch zip from ranges: the end records and the central directory, then every record that is
// no storage (its pickle, byteorder, version, TorchScript's code) fetched together; storages are
// read when asked for, their local headers assumed in torch's layout. An export archive (whose
// records hold zips of their own) and deflated storages are read whole instead.
Expected<RangedRead> loadZipRanged(std::shared_ptr<Checkpoint>& checkpoint, MemoryBudget& budget,
                                   std::uint64_t /*wholeLimit*/)
{
    Checkpoint& c = *checkpoint;
    auto parsed = archive::ZipReader::parse(c.input);
    if (!parsed) {
        switch (parsed.error().code) {
        case ErrorCode::NotCheckpoint:
            return RangedRead::NotThisFormat;  // no end record in the tail
        case ErrorCode::Truncated:
            return RangedRead::ReadWhole;  // salvaged from its local headers, which needs them all
        default:
            return parsed.error();
        }
    }
    archive::ZipReader& zip = *parsed;
    if (detail::isExportArchive(zip)) {
        return RangedRead::ReadWhole;
    }
    std::vector<const archive::ZipRecord*> wanted;
    for (const auto& r : zip.records()) {
        const auto slash = r.name.find('/');
        const std::string_view rel =
            slash == std::string::npos ? std::string_view(r.name) : std::string_view(r.name).substr(slash + 1);
        const bool storage = rel.starts_with("data/") || rel.starts_with("constants/");
        if (!storage) {
            wanted.push_back(&r);
        } else if (r.method != 0) {
            return RangedRead::ReadWhole;
        }
    }
    if (auto ok = c.input->prefetch(archive::ZipReader::recordRanges(wanted)); !ok) {
        return ok.error();
    }
    // What the fetches brought along (a small file comes whole) is read, not assumed.
    zip.readHeldHeaders();
    if (auto ok = loadZipFrom(c, zip, budget); !ok) {
        return ok.error();
    }
    std::vector<SourceStorages::Entry> entries(c.storages.size());
    for (std::size_t i = 0; i < c.storages.size(); ++i) {
        const auto& s = c.storages[StorageIndex{static_cast<std::uint32_t>(i)}];
        const archive::ZipRecord* rec = s.record.empty() ? nullptr : zip.findExact(s.record);
        if (rec != nullptr && rec->dataOffsetAssumed) {
            entries[i].header = s.localHeader;
            entries[i].assumed = SourceStorages::Assumed::ZipHeader;
        }
    }
    readThroughSource(c, std::move(entries));
    return RangedRead::Read;
}

}  // namespace ckpt::detail
