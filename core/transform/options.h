// What a user asks convert to do. The same options come from the command line, from a finding's
// `fix` (as JSON), and from the window's export panel.
#pragma once

#include "util/dtype.h"
#include "util/error.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt::transform {

// `cpu`, `cuda:1`, or pairs `cuda:0=cuda:1,cuda:2=cpu` (docs/format.md §4.3: a tag not in the pairs stays).
struct LocationMap {
    std::optional<std::string> all;
    std::vector<std::pair<std::string, std::string>> pairs;
    [[nodiscard]] bool empty() const { return !all && pairs.empty(); }
    [[nodiscard]] std::string apply(const std::string& location) const;
    [[nodiscard]] std::string spec() const;  // back to the command-line form
    static Expected<LocationMap> parse(const std::string& spec);
};

enum class OutputFormat { Torch, Safetensors };

// The prefix DataParallel and DistributedDataParallel give every key of the model they wrap.
inline constexpr std::string_view kDataParallelPrefix = "module.";

// Wrappers that hold the model as one attribute, so every key of the wrapped model gains its name as
// a first segment (docs/format.md §7). The one table of them: check's prefix rules, the single-card
// preset and diff's key alignment all read it.
enum class Wrapper : std::uint8_t { Ddp, Compile, Fsdp, Opacus };
struct WrapperSegment {
    std::string_view name;  // without its dot
    Wrapper wrapper;
    bool singleCard;  // the single-card preset strips it (FSDP's names are a LOCAL state dict's, not a prefix)
};
inline constexpr std::array<WrapperSegment, 6> kWrapperSegments{{
    {"module", Wrapper::Ddp, true},                        // nn.DataParallel, DistributedDataParallel
    {"_orig_mod", Wrapper::Compile, true},                 // torch.compile's OptimizedModule
    {"_module", Wrapper::Opacus, true},                    // Opacus' GradSampleModule
    {"_fsdp_wrapped_module", Wrapper::Fsdp, false},        // FSDP v1
    {"_fpw_module", Wrapper::Fsdp, false},                 // FSDP v1's FlattenParamsWrapper
    {"_checkpoint_wrapped_module", Wrapper::Fsdp, false},  // activation checkpointing
}};
// The wrapper segment `key` has at byte `at` (followed by a dot), or null.
[[nodiscard]] const WrapperSegment* wrapperSegmentAt(std::string_view key, std::size_t at);

struct Options {
    std::vector<std::string> stripPrefixes;  // each anchored at the key start, applied in order
    std::optional<std::string> addPrefix;
    std::optional<std::string> select;  // key path that becomes the new root
    std::vector<std::string> drop;      // key paths removed
    LocationMap mapLocation;
    bool unwrapModules = false;       // whole-model pickle -> model.state_dict()
    bool weightsOnly = false;         // make torch.load(weights_only=True) accept it
    bool compact = false;             // storages shrunk to what tensors reach
    bool singleModulePrefix = false;  // --multi-card: every state-dict key gets exactly one `module.`
    // --drop-extra-state: every value under a TransformerEngine `_extra_state` key left out
    // (isExtraStateKey); kept otherwise, as dcp_to_torch_save and torch.save keep them.
    bool dropExtraState = false;
    OutputFormat format = OutputFormat::Torch;
    // Block-quantized FP8 weights (a float8 `weight` beside its `weight_scale_inv`,
    // checkpoint/block_quant.h) written as this dtype (bfloat16, float16 or float32), their scales
    // left out (transform/dequantize.cpp).
    std::optional<DType> dequantize;

    // JSON object with keys strip_prefix (string or list), add_prefix, select, drop (list),
    // map_location, unwrap, weights_only, compact, multi_card, drop_extra_state, format, dequantize:
    // the `fix` of a finding.
    [[nodiscard]] std::string toJson() const;
    static Expected<Options> fromJson(const std::string& json);
    // Merges `other` into this (used when the window applies several findings' fixes).
    void merge(const Options& other);
    // A state-dict key after the prefix edits: each strip prefix removed when the key starts with
    // it (in list order), then with --multi-card exactly one `module.`, then the added prefix.
    [[nodiscard]] std::string renamedKey(const std::string& key) const;
    // What renamedKey does to `key`: the prefix it takes off and the one it puts in its place (the
    // rest of the key stays); the rule a plan's summary groups renames by.
    struct KeyEdit {
        std::string removed;
        std::string added;
    };
    // `stripsUsed` (sized as stripPrefixes): each strip that took something off is marked true.
    [[nodiscard]] KeyEdit keyEdit(std::string_view key, std::vector<bool>* stripsUsed = nullptr) const;
};

// The dtype `--dequantize` names: bf16/bfloat16, fp16/float16/half, fp32/float32/float; Usage otherwise.
Expected<DType> parseDequantizeDtype(std::string_view name);

// Whether a key-path component names a module's extra state (nn.Module's `_extra_state` suffix,
// _EXTRA_STATE_KEY_SUFFIX): `_extra_state`, `...._extra_state`, or Megatron-LM's ShardedObject key
// for it, `..._extra_state/shard_<offset>_<shape>` (mapping.py ShardedObject.unique_key), the FP8
// scaling state TransformerEngine modules keep there.
[[nodiscard]] inline bool isExtraStateKey(std::string_view name)
{
    constexpr std::string_view kSuffix = "_extra_state";
    const std::string_view key = name.substr(0, name.find('/'));
    return key.ends_with(kSuffix) && (key.size() == kSuffix.size() || key[key.size() - kSuffix.size() - 1] == '.');
}

Options singleCardPreset();
Options multiCardPreset();

}  // namespace ckpt::transform
