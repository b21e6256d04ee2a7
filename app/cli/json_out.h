// The JSON shapes the command line prints. Every document carries "schema" so scripts can check
// what they parse; a field once published keeps its name and meaning.
#pragma once

#include "checkpoint/checkpoint.h"
#include "util/json_text.h"

#include <nlohmann/json.hpp>
#include <string>

namespace ckpt::cli {

[[nodiscard]] nlohmann::ordered_json errorJson(const Error& e);
// Every command's --json help, naming the schema it prints.
[[nodiscard]] inline std::string jsonFlagHelp()
{
    return "print JSON (schema " + std::to_string(kJsonSchema) + ") on stdout";
}
[[nodiscard]] nlohmann::ordered_json shapeJson(const std::vector<std::int64_t>& dims);

}  // namespace ckpt::cli

namespace ckpt::cli {

// Streams the inspect document straight to `target`: a 40k-tensor checkpoint would otherwise build a
// JSON DOM several times the size of the file first.
void writeInspectJson(const Checkpoint& c, std::ostream& target);

}  // namespace ckpt::cli
