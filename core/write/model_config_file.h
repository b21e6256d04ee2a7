// config.json beside a Hugging Face folder written from a model that has one, so from_pretrained
// loads the folder: convert --shard-size writes the weights, and transformers reads the model's
// class and shape from config.json, which the weights do not hold. Only config.json: the other
// files of a model folder (generation_config.json, the tokenizer's) are no part of the weights and
// are not copied, as a split of a model never copied them.
#pragma once

#include "checkpoint/checkpoint.h"
#include "transform/transform.h"
#include "util/error.h"
#include "write/write.h"

#include <optional>
#include <string>

namespace ckpt::write {

struct ConfigWritten {
    std::string path;      // DIR/config.json
    bool written = false;  // false: a config.json was there already and is left as it is
    std::string note;      // what was written and why, or why it was left
};

// Writes util/model_config.h's configForCopy of `in`'s config.json (quantization_config removed where
// `plan` dequantized the weights) into `dir`, through a temporary file renamed into place. nullopt
// when `in` has no config.json. A config.json already in `dir` is never replaced: the note says
// whether it is the one the copy needs. WriteFailed when the file cannot be written.
Expected<std::optional<ConfigWritten>> writeModelConfig(const Checkpoint& in, const transform::Plan& plan,
                                                        const std::string& dir, Durability durability);

}  // namespace ckpt::write
