// What a test-load puts on a device: the tensors at or under a key path, and the storages they
// view, each once (tied weights share one allocation, as torch.load makes them share), in the order
// the pickle first names them, which is the order torch.load allocates them in. Tensors with no
// strided storage (meta, sparse, nested, wrapper subclasses) have no bytes to place: they are
// listed as skipped. Both test-load engines (LibTorch, CUDA driver) start from this.
#pragma once

#include "checkpoint/checkpoint.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ckpt::device {

struct SelectedStorage {
    StorageIndex storage;
    std::uint64_t nbytes = 0;
    std::string location;  // as saved: where torch.load without map_location puts it
    std::vector<TensorIndex> tensors;
};

struct LoadSelection {
    struct Skipped {
        std::string path;
        std::string reason;
    };
    std::vector<SelectedStorage> storages;
    std::uint64_t tensorCount = 0;
    std::uint64_t totalBytes = 0;
    std::vector<Skipped> skipped;
};

// Errors: Usage (nothing at or under `select`), Corrupt (a view past its storage's end), Truncated
// (a storage missing from the file).
Expected<LoadSelection> selectForLoad(const Checkpoint& ck, const std::string& select);

}  // namespace ckpt::device
