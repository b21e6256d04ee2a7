// Folders that hold one model beside the rest of a training run's state, each piece a file of its
// own: accelerate's save_state (model.safetensors or pytorch_model.bin, optimizer.bin,
// scheduler.bin, random_states_0.pkl), a PEFT adapter (adapter_model.safetensors and
// adapter_config.json), a Hugging Face Trainer checkpoint-N/ (trainer_state.json beside the weights)
// and trainer folders of separate torch files (OLMo's model.pt, optim.pt, train.pt). The model file
// is a checkpoint like any other; what the folder adds is which file that is and what the others
// are. Naming the folder opens its model wherever a checkpoint path is taken (openCheckpoint), once
// that choice is unambiguous. Multi-file *sets* of one model (a sharded index, DCP, ZeRO, FSDP rank
// files) are core/sharded's and are tried first.
#pragma once

#include "util/error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

// A PEFT adapter's weights (adapter_model.safetensors): what the folder opens, but no model: the
// LoRA (or other PEFT) weights over a base model that adapter_config.json names.
inline constexpr const char* kAdapterRole = "adapter, which needs its base model";

// What a PEFT folder's adapter_config.json says (peft's PeftConfig.save_pretrained): the base model
// the adapter applies to, and what kind of adapter it is. Each text is as the file holds it, cut to
// kMaxAdapterText bytes (a list to kMaxAdapterModules names): shown only through displayText.
struct AdapterConfig {
    std::string baseModel;                   // base_model_name_or_path; "" when absent or not text
    std::string peftType;                    // peft_type: LORA, IA3, ...; "" when absent
    std::optional<std::int64_t> rank;        // r (LoRA's rank)
    std::vector<std::string> targetModules;  // target_modules: its names, or the one regex it may be
    std::size_t moreModules = 0;             // names past kMaxAdapterModules, left out
    std::string problem;                     // why the file says nothing ("" when it was read)
};
inline constexpr std::size_t kMaxAdapterText = 200;
inline constexpr std::size_t kMaxAdapterModules = 16;
// adapter_config.json is a few hundred bytes; a larger file is not read.
inline constexpr std::uint64_t kMaxAdapterConfigBytes = 1U << 20;

// Parses adapter_config.json's text; never fails: what cannot be read is `problem`.
[[nodiscard]] AdapterConfig parseAdapterConfig(std::string_view text);
// "base model 'gpt2' (adapter_config.json base_model_name_or_path); LORA, r 8, target modules c_attn,
// c_proj", or what the file lacks: the words inspect, check and the window use. Not yet printable:
// pass it through displayText.
[[nodiscard]] std::string adapterSummary(const AdapterConfig& c);

struct FolderMember {
    std::string name;  // file name in the folder
    std::string role;  // "model", "optimizer", "scheduler", "RNG state", "adapter config", ...
};

struct ModelFolder {
    std::string dir;
    std::string layout;                 // "an accelerate save_state folder", "a PEFT adapter folder", ...
    std::vector<FolderMember> members;  // every file with a known role, in name order
    std::vector<std::string> models;    // the members whose role is "model" (or a PEFT adapter)
    // adapter_config.json's facts, for a PEFT adapter folder (which is the one file read here).
    std::optional<AdapterConfig> adapterConfig;
    // The one model the folder opens as; empty when it holds none or several (models says which).
    [[nodiscard]] std::string model() const { return models.size() == 1 ? models.front() : std::string(); }
    // The file it opens is a PEFT adapter (kAdapterRole), not a model.
    [[nodiscard]] bool adapter() const;
    // "model.safetensors (model), optimizer.bin (optimizer), ..." for messages and findings.
    [[nodiscard]] std::string memberList() const;
};

// The layout of the folder `dir` from its file names (and, for a PEFT folder, adapter_config.json,
// read within kMaxAdapterConfigBytes): nullopt when it is
// not a folder, or holds no file whose name says it is one of these layouts' state beside the model
// (a folder of unrelated checkpoints stays a plain folder).
[[nodiscard]] std::optional<ModelFolder> readModelFolder(const std::string& dir);
// The same from the names of the folder's regular files, wherever they were listed (an s3:// prefix,
// a Hub repository's files); `dir` names the folder.
[[nodiscard]] std::optional<ModelFolder> modelFolderOf(const std::string& dir, const std::vector<std::string>& names);

// The file a folder named as a checkpoint opens as: its one model. Usage when the folder holds
// several models or none, naming its members and what to open instead.
[[nodiscard]] Expected<std::string> modelFileOf(const ModelFolder& folder);

}  // namespace ckpt
