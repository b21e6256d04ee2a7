// Which weights a Hugging Face model ties, as transformers 5.12 decides it, and so which names a
// checkpoint may lack without having lost anything. The one home of that rule: the set reader
// (sharded/hf_set.cpp), the safetensors file reader (checkpoint/open.cpp), the safetensors writer and
// the splitter (which name of a tie they keep), and diagnose's tie findings all read it.
//
// transformers (modeling_utils.py, PreTrainedModel.get_expanded_tied_weights_keys and tie_weights):
// - a model class declares `_tied_weights_keys = {target: source}`; it applies when the config's
//   `tie_word_embeddings` is true, read as `getattr(config, "tie_word_embeddings", False)`, so the
//   config class decides what an absent key means (GPT2Config: true, LlamaConfig: false) and some
//   config classes decide it whatever config.json says (T5Config sets it true);
// - save_pretrained (remove_tied_weights_from_state_dict) drops each target that shares its
//   source's storage, so a `model.safetensors` holds the source alone;
// - from_pretrained's tie_weights sets each target to its source; symmetrically, a missing source
//   is tied to a target that is present.
// The classes and their mappings are util/tied_weights.inc, generated from the installed library by
// scripts/gen-tied-weights.py (and checked against it by the torch2 tests). A name in a mapping
// stands for that parameter, or for every parameter under a module of that name. transformers 5.12
// no longer reads `tie_encoder_decoder` (4.x tied an encoder's weights to its decoder's with it).
#pragma once

#include "util/model_config.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

// How a config class decides tie_word_embeddings when config.json does not force it.
enum class TieConfig : std::uint8_t {
    DefaultFalse,  // false unless config.json says true
    DefaultTrue,   // true unless config.json says false
    Always,        // true whatever config.json says (T5Config)
    Never,         // false whatever config.json says
};

struct TiedName {
    std::string name;    // the key the file lacks
    std::string source;  // the stored key it is tied to
};

// What the rule decided for one checkpoint's keys.
struct TieReport {
    bool haveConfig = false;         // config.json was read
    std::string architecture;        // the class config.json names, "" without one
    bool ties = false;               // that class ties, as its config decides
    std::string decidedBy;           // "config.json: tie_word_embeddings true", "T5Config ties always", ...
    std::vector<TiedName> restored;  // absent names the model ties to a stored key: the same tensor
    std::vector<TiedName> untied;    // absent names the class ties only when its config does, which it does not
    // Absent names that transformers ties to a stored key in some class, where this model's tie cannot
    // be known: no config.json, a class transformers 5.12 does not have, ties by pattern or set in
    // __init__, or tie_encoder_decoder. `unknownWhy` says which.
    std::vector<TiedName> unknown;
    std::string unknownWhy;
    [[nodiscard]] bool empty() const { return restored.empty() && untied.empty() && unknown.empty(); }
};

// The tie rule over one state dict's stored keys, given config.json (nullopt: none beside the file).
// `stored` answers whether a key is stored; `keys` lists them all.
[[nodiscard]] TieReport tiedWeights(const std::optional<ModelConfig>& config, const std::vector<std::string>& keys);

// The name a safetensors output stores a group of identical views (a tie) under; the others are
// recorded as aliases of it. safetensors' _remove_duplicate_names (used by save_model: `keep_name =
// sorted(complete_names)[0]`) and huggingface_hub's save_torch_state_dict keep the sorted-first name,
// which for a tied head is `lm_head.weight`. transformers' save_pretrained instead keeps the source
// of the tie (the input embedding) and drops the targets, and from_pretrained ties each target to its
// source: a file holding only the head would leave the embedding randomly initialised. So a group
// whose names are one source and targets transformers ties to it keeps the source; any other group
// keeps the sorted-first name. `names` must not be empty.
[[nodiscard]] std::string keptTiedName(std::vector<std::string> names);

}  // namespace ckpt
