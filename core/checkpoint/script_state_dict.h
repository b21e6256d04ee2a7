// The state dict `torch.jit.load(f).state_dict()` returns for a TorchScript archive, as rows of the
// checkpoint's tensor index: what `inspect` shows beside the raw data.pkl tree, and what the
// corpus check and tests hold against torch (state_dict.h computes it).
#pragma once

#include "checkpoint/checkpoint.h"
#include "checkpoint/state_dict.h"

namespace ckpt {

struct ScriptStateEntry {
    std::string key;     // `conv1.weight`
    TensorIndex tensor;  // its row in Checkpoint::tensors (path, dtype, shape, storage)
};

struct ScriptStateDict {
    std::vector<ScriptStateEntry> entries;
    std::vector<StateDictSkip> skipped;  // what torch.jit's state_dict() leaves out although it holds tensors
};

// Errors: Unsupported when `c` is no TorchScript archive or its root module's class is not among
// its sources, and moduleStateDict's. Errors carry the checkpoint's path.
Expected<ScriptStateDict> scriptStateDict(const Checkpoint& c);

}  // namespace ckpt
