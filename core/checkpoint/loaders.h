// Loaders that live outside open.cpp, each filling a Checkpoint's arena, root and storage table
// from the mapped bytes (open.cpp picks one by the file's structure; index.cpp builds the tree).
#pragma once

#include "checkpoint/checkpoint.h"

namespace ckpt::archive {
class ZipReader;
struct ZipRecord;
}  // namespace ckpt::archive
#include "util/budget.h"

namespace ckpt::detail {

// Shared by the loaders: the unpickler's storage references as the storage table; a zip record
// (of a zip at `base` in the file) as a storage's bytes; and the check that every storage holds
// the bytes its declaration needs (torch reads exactly numel x element size).
Expected<void> adoptStorages(Checkpoint& c);
void placeRecord(StorageEntry& s, const archive::ZipRecord& rec, std::uint64_t base);
Expected<void> checkStorageBytes(Checkpoint& c);

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
