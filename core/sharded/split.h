// One checkpoint -> a Hugging Face sharded set (docs/format.md §16.2): the plan's flat state dict split
// greedily in key order as huggingface_hub's split_torch_state_dict_into_shards does, each shard
// written by the ordinary single-file writers, plus the `*.index.json` transformers reads.
#pragma once

#include "checkpoint/checkpoint.h"
#include "transform/transform.h"
#include "util/error.h"
#include "write/write.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt::sharded {

// "5GB" (decimal, as the hub: KB = 1e3 ... TB = 1e12), "2GiB" (binary), "1.5GB", or plain bytes.
// Usage error naming the text when it is none of these or 0.
Expected<std::uint64_t> parseShardSize(std::string_view text);

struct SplitOptions {
    std::uint64_t maxShardBytes = 5'000'000'000ULL;  // the hub's default "5GB"
    write::WriteOptions write;
    // Bytes written of the whole set (its total_size and the shards' headers), with the shard being
    // written as WriteProgress::file.
    std::function<void(const write::WriteProgress&)> progress;
};

struct SplitResult {
    std::string dir;
    std::vector<std::string> files;  // shard names, in order (one file and no index when it fits)
    std::string index;               // index file name, "" for a single shard
    std::uint64_t totalSize = 0;     // metadata.total_size: storage bytes, each storage once
    std::size_t tensors = 0;
    // safetensors: names stored once under another (removed -> kept), as the hub records them
    std::vector<std::pair<std::string, std::string>> tied;
    std::vector<std::string> notes;
};

// The shard file names for `count` shards: `{stem}-00001-of-0000N{ext}`, or `{stem}{ext}` alone.
[[nodiscard]] std::string shardFileName(bool safetensors, std::size_t i, std::size_t count);

// Writes the set into `outDir`. The plan's root must be a flat dict of plain tensors (a state
// dict); the format is plan.options.format. Everything is written into a hidden folder beside
// `outDir` first and moved in only once complete, so a failure or a signal leaves nothing.
// Errors (Usage): `outDir` exists and is not a folder, or already holds a set of the same stem.
Expected<SplitResult> writeShardedSet(const Checkpoint& in, const transform::Plan& plan, const std::string& outDir,
                                      const SplitOptions& options);

}  // namespace ckpt::sharded
