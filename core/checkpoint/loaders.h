// The format readers, each filling a Checkpoint's arena, root and storage table, one file per
// format (open_zip.cpp, open_legacy.cpp, open_safetensors.cpp, open_tar.cpp, ...), chosen through
// the registry (file_formats.h) by open.cpp; index.cpp then builds the tree. A reader reads a
// mapped or in-memory file from `c.bytes`; where the format can be read from ranges of a source
// that is not mapped (c.input), its ranged reader does that.
#pragma once

#include "checkpoint/checkpoint.h"
#include "checkpoint/file_formats.h"
#include "checkpoint/source_storages.h"
#include "util/budget.h"

#include <memory>
#include <string_view>
#include <vector>

namespace ckpt::archive {
class ZipReader;
struct ZipRecord;
}  // namespace ckpt::archive
namespace ckpt::pickle {
struct UnpickleResult;
}  // namespace ckpt::pickle

namespace ckpt::detail {

// Shared by the loaders: the unpickler's storage references as the storage table; a zip record
// (of a zip at `base` in the file) as a storage's bytes; and the check that every storage holds
// the bytes its declaration needs (torch reads exactly numel x element size).
Expected<void> adoptStorages(Checkpoint& c);
void placeRecord(StorageEntry& s, const archive::ZipRecord& rec, std::uint64_t base);
Expected<void> checkStorageBytes(Checkpoint& c);
// The mapping's pages let go once a pickle is read (they stay in the page cache and fault back in
// when storage bytes are read): the index built next is then a read's memory peak.
void dropResidentPages(const MappedFile& file);
// A pickle's undecodable strings counted into `c.undecodable` (`pickleStart`: where the pickle
// starts in the file; `of`: " of data.pkl", or nothing for a legacy stream).
void noteUndecodable(Checkpoint& c, const pickle::UnpickleResult& r, std::uint64_t pickleStart, std::string_view of);
// data.pkl (or another single pickle) unpickled into `c`'s arena as its root.
Expected<void> unpickleInto(Checkpoint& c, Bytes pkl, bool legacy, const MemoryBudget& budget);

// ---- Reading from ranges of a source that is not mapped (c.input; source/byte_source.h) ----

// What a file's head is read as first, and what a legacy stream's pickles are read from first.
inline constexpr std::uint64_t kHeadBytes = std::uint64_t{64} << 10;

// `c`'s storages read through its source (SourceStorages): assembled, each from its own range,
// `entries` saying which headers the reader assumed (checked when the bytes are read).
void readThroughSource(Checkpoint& c, std::vector<SourceStorages::Entry> entries);

// The formats' readers (file_formats.cpp names them in the registry).
Expected<void> loadZip(Checkpoint& c, MemoryBudget& budget);
Expected<RangedRead> loadZipRanged(std::shared_ptr<Checkpoint>& c, MemoryBudget& budget, std::uint64_t wholeLimit);
bool startsLikeSafetensors(Bytes head, std::uint64_t size);
// The header (its length and the whole JSON: 8 + n bytes) of the safetensors file that starts at
// `start` of `src` and runs to its end, nullopt when the bytes there start none: what a ranged read
// of a safetensors file and a DCP data file's trailing safetensors file read first. `firstBytes` is
// the first read's length: the header often lies within it.
Expected<std::optional<source::Held>> safetensorsHeaderAt(const source::ByteSource& src, std::uint64_t start,
                                                          std::uint64_t firstBytes);
Expected<void> loadSafetensors(Checkpoint& c, MemoryBudget& budget);
// A `save_pretrained` file (model.safetensors with config.json beside it, opened by its path) lacks
// the names its model ties (util/tied_pairs.h): adds them to the root dict as second names of the
// tensor each is tied to, as model.state_dict() has them, and records the decision in `c.ties`.
void restoreModelTies(Checkpoint& c);
Expected<RangedRead> loadSafetensorsRanged(std::shared_ptr<Checkpoint>& c, MemoryBudget& budget,
                                           std::uint64_t wholeLimit);
bool startsLikeLegacyStream(Bytes data);
Expected<void> loadLegacy(Checkpoint& c, MemoryBudget& budget);
Expected<RangedRead> loadLegacyRanged(std::shared_ptr<Checkpoint>& first, MemoryBudget& budget, std::uint64_t limit);
bool startsLikeTorchTar(Bytes head);

// A torch.export archive (`.pt2`, docs/format.md §14): a zip with an `archive_format` record saying
// pt2 or exported programs under `models/` and no data.pkl, or the 2.1-2.5 zip whose records
// (serialized_exported_program.json, ...) sit in no folder.
bool isExportArchive(const archive::ZipReader& zip);
// Its weights as the root (the state dict, keyed by the names the export records), its constants,
// graph signature and version records as Checkpoint::rootExtras.
Expected<void> loadExportArchive(Checkpoint& c, const archive::ZipReader& zip, MemoryBudget& budget);

// The tar format of PyTorch < 0.1.10 (docs/format.md §3.3), read as torch/serialization.py's
// `legacy_load` reads it.
Expected<void> loadTorchTar(Checkpoint& c, MemoryBudget& budget);

// A TorchScript archive of PyTorch 1.0's first layout (model.json, tensors/N; docs/format.md §11.1):
// its tensor table read as the modules' state dict (the root), model.json's producer fields as the
// `[model.json]` entry of `c.rootExtras`, and a warning naming the layout and who wrote it.
Expected<void> loadFirstScriptLayout(Checkpoint& c, const archive::ZipReader& zip);

// A TorchScript archive's class declarations (`code/**.py`, script_classes.h) into
// `c.scriptClasses`; unreadable sources become a warning.
void readScriptClasses(const archive::ZipReader& zip, Checkpoint& c);
// A TorchScript archive's constants.pkl (the code's tensor constants, xnnpack prepacked weights)
// into the arena as a `constants.pkl` entry of `c.rootExtras`, its storages keyed `constants/<key>` after data.pkl's.
// A constants.pkl that cannot be read is a warning: data.pkl's state dict does not need it.
void readScriptConstants(const archive::ZipReader& zip, Checkpoint& c, const MemoryBudget& budget);

}  // namespace ckpt::detail
