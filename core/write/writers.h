// The two output formats behind writeCheckpoint() and writeCheckpointTo(); each writes into a
// ByteSink (the temporary file, or a stream that takes bytes in order only) and returns the bytes
// written. The caller owns the output's fate (commit or discard).
#pragma once

#include "checkpoint/checkpoint.h"
#include "transform/transform.h"
#include "write/output_file.h"
#include "write/write.h"

#include <functional>
#include <stop_token>
#include <string>
#include <vector>

namespace ckpt::write::detail {

Expected<std::uint64_t> writeTorch(const Checkpoint& in, const transform::Plan& plan, ByteSink& out,
                                   const std::string& target, const std::function<void(const WriteProgress&)>& progress,
                                   const std::stop_token& stop, std::vector<std::string>& notes);

Expected<std::uint64_t> writeSafetensors(const Checkpoint& in, const transform::Plan& plan, ByteSink& out,
                                         const std::string& target,
                                         const std::function<void(const WriteProgress&)>& progress,
                                         const std::stop_token& stop, std::vector<std::string>& notes,
                                         bool allowExpand);

// Refuses (Usage) tensor data beyond 4x the input's storage bytes and 64 MiB more, unless allowed.
Expected<void> checkExpansion(const Checkpoint& in, std::uint64_t outputTensorBytes, bool allowExpand);

}  // namespace ckpt::write::detail
