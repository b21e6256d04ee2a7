// Loaders that live outside open.cpp, each filling a Checkpoint's arena, root and storage table
// from the mapped bytes (open.cpp picks one by the file's structure; index.cpp builds the tree).
#pragma once

#include "checkpoint/checkpoint.h"

namespace ckpt::archive {
class ZipReader;
}
#include "util/budget.h"

namespace ckpt::detail {

// The tar format of PyTorch < 0.1.10 (docs/format.md §3.3), read as torch/serialization.py's
// `legacy_load` reads it.
Expected<void> loadTorchTar(Checkpoint& c, MemoryBudget& budget);

// A TorchScript archive's class declarations (`code/**.py`, script_classes.h) into
// `c.scriptClasses`; unreadable sources become a warning.
void readScriptClasses(const archive::ZipReader& zip, Checkpoint& c);
// A TorchScript archive's constants.pkl (the code's tensor constants, xnnpack prepacked weights)
// into the arena as `c.scriptConstants`, its storages keyed `constants/<key>` after data.pkl's.
// A constants.pkl that cannot be read is a warning: data.pkl's state dict does not need it.
void readScriptConstants(const archive::ZipReader& zip, Checkpoint& c, const MemoryBudget& budget);

}  // namespace ckpt::detail
