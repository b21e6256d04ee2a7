// `check --against REF`: the model's side of a load_state_dict(strict=True), compared with the
// checkpoint's state dict, reported in torch's own words (docs/format.md §13 items 4/5), with the
// prefix edit that makes the key sets match when one exists.
#pragma once

#include "diagnose/diagnose.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::diagnose {

struct StateKey {
    std::string key;
    std::vector<std::int64_t> shape;
    bool hasShape = false;  // false for non-tensor values and shape-less reference lines
};

// One state dict: its keys in order (the checkpoint's order, or the model's for a reference).
struct KeySet {
    std::string dictPath;   // key path of the dict in its file ("" = root)
    std::string modelName;  // the model's class when the file says (whole-model pickles)
    std::vector<StateKey> keys;
    // The state dict's `_metadata` versions (module prefix -> version), which load_state_dict
    // hands to each module: BatchNorm fills a missing `num_batches_tracked` when its version is < 2.
    std::map<std::string, std::int64_t> metadataVersions;
};

enum class ReferenceKind : std::uint8_t { Checkpoint, InspectJson, Text };

struct Reference {
    std::string path;
    ReferenceKind kind = ReferenceKind::Text;
    KeySet keys;
};

// REF is a checkpoint, a JSON from `ckptscope inspect --json` (or any JSON with tensor objects
// carrying "path"/"key" and "shape", or an object mapping keys to shapes), or text lines
// `key shape` (`fc.weight 4,3`, `fc.weight [4, 3]`, `fc.weight torch.Size([4, 3])`).
Expected<Reference> loadReference(const std::string& path);
// A checkpoint opened already (a remote one, core/remote) as the reference, named `path`.
Expected<Reference> referenceOf(const Checkpoint& ckpt, const std::string& path);

// The state dict of a checkpoint: `select` when given, else the root when it is state-dict-like,
// else `state_dict`, `model`, `model_state_dict` or `net` under the root, else a pickled module's
// parameters and persistent buffers (dotted names, as model.state_dict() gives them).
Expected<KeySet> stateDictKeys(const Checkpoint& ckpt, const std::optional<std::string>& select);

// torch.Size([4, 3])
[[nodiscard]] std::string torchSizeText(const std::vector<std::int64_t>& shape);

Expected<void> compareAgainst(const Checkpoint& ckpt, const Reference& ref, const std::optional<std::string>& select,
                              std::vector<Finding>& out);

}  // namespace ckpt::diagnose
