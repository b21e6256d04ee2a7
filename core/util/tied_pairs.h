// Output/input embedding pairs transformers ties under tie_word_embeddings, by the key names of
// the common architectures (the model class, which declares _tied_weights_keys, is not at hand).
// In util/, the lowest stage, so the safetensors writer and the set reader and splitter share it.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace ckpt {

struct TiedPair {
    const char* output;
    const char* input;
};

inline constexpr std::array<TiedPair, 5> kTiedPairs{{
    {"lm_head.weight", "model.embed_tokens.weight"},           // Llama, Mistral, Qwen2, Gemma, Phi-3
    {"lm_head.weight", "transformer.wte.weight"},              // GPT-2, GPT-J, CodeGen
    {"lm_head.weight", "model.decoder.embed_tokens.weight"},   // OPT
    {"lm_head.weight", "transformer.word_embeddings.weight"},  // BLOOM, Falcon
    {"embed_out.weight", "gpt_neox.embed_in.weight"},          // GPT-NeoX, Pythia
}};

// The name a safetensors output stores a group of identical views (a tie) under; the others are
// recorded as aliases of it. safetensors' _remove_duplicate_names (bindings/python/.../torch.py,
// used by save_model: `keep_name = sorted(complete_names)[0]` unless `discard_names` or
// `preferred_names` say otherwise) and huggingface_hub's save_torch_state_dict keep the
// sorted-first name, which for a tied head is `lm_head.weight`. transformers' save_pretrained
// instead drops the names matching the model's _tied_weights_keys (the output head) and keeps the
// input embedding, and from_pretrained ties the head to the input: a file holding only the head
// would leave the embedding randomly initialised. So a group that is exactly one known pair keeps
// its input name; any other group keeps the sorted-first one. `names` must not be empty.
inline std::string keptTiedName(std::vector<std::string> names)
{
    std::sort(names.begin(), names.end());
    if (names.size() == 2) {
        for (const auto& pair : kTiedPairs) {
            const bool matches = (names[0] == pair.output && names[1] == pair.input) ||
                                 (names[0] == pair.input && names[1] == pair.output);
            if (matches) {
                return pair.input;
            }
        }
    }
    return names.front();
}

}  // namespace ckpt
