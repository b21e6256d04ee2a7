// What a server's replies say, parsed without a connection (so the parsers are fuzzed alone,
// tests/fuzz/fuzz_remote.cpp): a range reply's Content-Range, a 429's Retry-After, the Hub API's
// listing of a repository, and the shards a Hugging Face index names.
#pragma once

#include "util/error.h"

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

// The file a whole repository (hf://ORG/REPO) opens as, from the Hub API's reply for it (its
// `siblings`): its single weights file by the names transformers saves, else its sharded set's
// index, else its one checkpoint file; an error naming the choices when there are several.
[[nodiscard]] Expected<std::string> repositoryFileOf(std::string_view apiReply, const std::string& repo);

// The shard names an index's weight_map gives, each once, in order, none with a folder in it; none
// when it is no index (openSet then says what is wrong with it).
[[nodiscard]] std::vector<std::string> shardNamesOf(std::string_view indexText);

}  // namespace ckpt::remote
