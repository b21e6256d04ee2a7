// The boundary between the helper's torch-free half (protocol, opening the checkpoint, choosing
// tensors) and its LibTorch half (torch_load.cpp, the only file that includes LibTorch headers,
// so only one translation unit pays their compile time).
#pragma once

#include "util/bytes.h"
#include "util/dtype.h"
#include "util/error.h"

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ckpt::helper {

// A storage's bytes [0, nbytes) handed to `sink` in order, in pieces of at most 64 MiB: views of the
// mapping, inflated a piece at a time, or read from a set's member files (Checkpoint::streamStorage),
// so the helper never holds more of a storage on the host than one piece.
using ReadFn = std::function<Expected<void>(const std::function<bool(Bytes)>& sink)>;

struct StoragePlan {
    std::string key;
    std::uint64_t nbytes = 0;
    ReadFn read;
    std::vector<std::uint32_t> tensors;  // indices into LoadPlan::tensors viewing it
};

struct TensorPlan {
    std::string path;
    std::uint32_t storage = 0;  // index into LoadPlan::storages
    DType dtype = DType::Unknown;
    std::uint32_t elementSize = 0;
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> stride;
    std::int64_t storageOffset = 0;  // elements
    std::uint64_t nbytes = 0;
};

struct LoadPlan {
    std::string device;  // "cpu" / "cuda:N"
    bool verify = false;
    std::vector<StoragePlan> storages;
    std::vector<TensorPlan> tensors;
    std::uint64_t totalBytes = 0;  // sum of storage bytes
};

using Emit = std::function<void(const nlohmann::json&)>;

// Materialises the plan on its device, emits start/progress and then exactly one result or error
// event. Returns the process exit code (0 loaded, 1 failed).
int runLoad(const LoadPlan& plan, const Emit& emit);

}  // namespace ckpt::helper
