// What a server's replies say, parsed without a connection (so the parsers are fuzzed alone,
// tests/fuzz/fuzz_remote.cpp): a range reply's Content-Range, a 429's Retry-After, the Hub API's
// listing of a repository, and the shards a Hugging Face index names.
#pragma once

#include "util/error.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::remote {

// A decimal number and nothing else.
[[nodiscard]] std::optional<std::uint64_t> parseNumber(std::string_view s);

struct ContentRange {
    std::uint64_t first = 0;
    std::uint64_t last = 0;
    std::uint64_t total = 0;
};
// "bytes FIRST-LAST/TOTAL"; an unknown total ("*") is refused: the file's size is what every
// later range is checked against.
[[nodiscard]] std::optional<ContentRange> parseContentRange(std::string_view v);

// A 429 or 503's Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, as seconds from
// now; none when absent or unreadable.
[[nodiscard]] std::optional<std::int64_t> retryAfterSeconds(const std::string& value);

// Whether `name`, as a server's reply gives it (a Hub listing's rfilename), is a path inside the
// repository: relative, every component a name (none empty, "." or ".."), no control character.
// Anything else is no file of the repository (git holds no such path), and requesting it would
// read another (`../../other/repo/resolve/main/x`, which the URL's dot segments reach).
[[nodiscard]] bool isRepositoryPath(std::string_view name);

// Whether `name` is one plain file name (a repository path without a folder): what a set's member
// named by its index may be, over HTTP as on disk (memberOfFolder).
[[nodiscard]] bool isPlainFileName(std::string_view name);

// The file a whole repository (hf://ORG/REPO) opens as, from the Hub API's reply for it (its
// `siblings`, those that are repository paths): its single weights file by the names transformers
// saves, else its sharded set's index, else its one checkpoint file; an error naming the choices
// (the first few, and how many) when there are several. A reply nesting deeper than JSON files
// are read (kMaxJsonDepth) lists no files.
[[nodiscard]] Expected<std::string> repositoryFileOf(std::string_view apiReply, const std::string& repo);
// The repository paths the Hub API's reply lists (its `siblings`); Io when it lists none.
[[nodiscard]] Expected<std::vector<std::string>> repositoryFilesOf(std::string_view apiReply, const std::string& repo);
// A DCP folder's metadata file: a folder holding it (or its ranks' __R.metadata) opens as the set.
inline constexpr std::string_view kDcpMetadata = ".metadata";
// A DeepSpeed save folder's `latest` (naming its tag folder), and the rank-0 model states of a ZeRO
// tag folder (stages 1/2, stage 3): a folder holding one opens as the ZeRO set, as on disk.
inline constexpr std::string_view kZeroLatest = "latest";
inline constexpr std::array<std::string_view, 2> kZeroModelStates{"mp_rank_00_model_states.pt",
                                                                  "zero_pp_rank_0_mp_rank_00_model_states.pt"};
// The files a folder opens as, most preferred first: a DCP folder's .metadata, a ZeRO folder's
// `latest` or tag folder's model states (a Trainer folder saved under DeepSpeed holds its model
// file too, and opens as the ZeRO set on disk), the weights transformers and accelerate save, a
// sharded set's index, a PEFT adapter's weights (the model files of core/checkpoint/model_folder.h's
// layouts). folderFileOf takes the first a listing holds; a folder nothing lists (an http(s) URL
// ending in '/') is probed for them in this order.
inline constexpr std::array<std::string_view, 10> kFolderEntryNames{kDcpMetadata,
                                                                    kZeroLatest,
                                                                    kZeroModelStates[0],
                                                                    kZeroModelStates[1],
                                                                    "model.safetensors",
                                                                    "pytorch_model.bin",
                                                                    "model.safetensors.index.json",
                                                                    "pytorch_model.bin.index.json",
                                                                    "adapter_model.safetensors",
                                                                    "adapter_model.bin"};
// The same choice among a folder's `files` (an s3:// prefix's listing): `what` names the folder in
// messages ("the repository"), `nameOne` says how to name one file instead. A DCP folder is its
// kDcpMetadata.
[[nodiscard]] Expected<std::string> folderFileOf(const std::vector<std::string>& files, const std::string& what,
                                                 const std::string& nameOne);

// What an s3:// prefix holds directly: its files (names relative to it) and its sub-folders.
struct PrefixListing {
    std::vector<std::string> files;
    std::vector<std::string> folders;
};

// The file an s3:// folder opens as (`shown` is how it was typed, ending in '/'): its DCP .metadata,
// its ZeRO `latest` or model states, its Hugging Face set's index, or its one checkpoint file
// (folderFileOf).
[[nodiscard]] Expected<std::string> prefixFileOf(const PrefixListing& listing, const std::string& shown);

// The shard names an index's weight_map gives, each once, in order, each a plain file name; none
// when it is no index (openSet then says what is wrong with it).
[[nodiscard]] std::vector<std::string> shardNamesOf(std::string_view indexText);

}  // namespace ckpt::remote
