// Plan -> file: a torch zip archive or a safetensors file, streamed from the mapped input, written
// to a temporary file beside the target and renamed into place; never a partial file.
#pragma once

#include "checkpoint/checkpoint.h"
#include "transform/transform.h"

#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <vector>

namespace ckpt::write {

struct WriteProgress {
    std::uint64_t bytesDone = 0;
    std::uint64_t bytesTotal = 0;
};

struct WriteResult {
    std::string path;
    std::uint64_t bytes = 0;
    std::vector<std::string> notes;    // e.g. safetensors aliases, materialised views
};

Expected<WriteResult> writeCheckpoint(const Checkpoint& in, const transform::Plan& plan, const std::string& outPath,
                                      const std::function<void(const WriteProgress&)>& progress = {},
                                      std::stop_token stop = {});

}  // namespace ckpt::write
