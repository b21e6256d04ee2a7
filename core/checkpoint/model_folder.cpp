#include "checkpoint/model_folder.h"

#include "util/bytes.h"
#include "util/folder_member.h"
#include "util/json_text.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <string_view>

namespace ckpt {

namespace fs = std::filesystem;

namespace {

// "optimizer_3.bin" matches stem "optimizer", extension ".bin": the _N suffix accelerate gives the
// second and later models, optimizers and schedulers, and the process index of random_states_N.pkl.
bool numbered(std::string_view name, std::string_view stem, std::string_view ext)
{
    if (name.size() <= stem.size() + 1 + ext.size() || !name.starts_with(stem) || !name.ends_with(ext) ||
        name[stem.size()] != '_') {
        return false;
    }
    const auto digits = name.substr(stem.size() + 1, name.size() - stem.size() - 1 - ext.size());
    return std::all_of(digits.begin(), digits.end(),
                       [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

bool either(std::string_view name, std::string_view stem, std::string_view ext)
{
    return name == std::string(stem) + std::string(ext) || numbered(name, stem, ext);
}

// What a file in such a folder is, from the names its writers use (accelerate/utils/constants.py
// and checkpointing.py, transformers' Trainer._save_checkpoint, peft's save_pretrained, OLMo's
// unsharded checkpointer). Empty: a file these layouts do not write.
std::string roleOf(std::string_view n)
{
    struct Named {
        std::string_view name;
        std::string_view role;
    };
    static constexpr std::array<Named, 24> kExact{{
        {"model.safetensors", "model"},
        {"pytorch_model.bin", "model"},
        {"adapter_model.safetensors", std::string_view(kAdapterRole)},
        {"adapter_model.bin", std::string_view(kAdapterRole)},
        {"model.pt", "model"},
        {"model.pth", "model"},
        {"optimizer.pt", "optimizer"},
        {"optim.pt", "optimizer"},
        {"scheduler.pt", "scheduler"},
        {"lr_scheduler.pt", "scheduler"},
        {"scaler.pt", "gradient scaler"},
        {"rng_state.pth", "RNG state"},
        {"train.pt", "training state"},
        {"trainer_state.json", "Trainer state"},
        {"training_args.bin", "training arguments"},
        {"adapter_config.json", "adapter config"},
        {"config.json", "model config"},
        {"config.yaml", "run config"},
        {"generation_config.json", "generation config"},
        {"tokenizer.json", "tokenizer"},
        {"tokenizer_config.json", "tokenizer"},
        {"special_tokens_map.json", "tokenizer"},
        {"tokenizer.model", "tokenizer"},
        {"dl_state_dict.bin", "dataloader state"},
    }};
    for (const auto& e : kExact) {
        if (n == e.name) {
            return std::string(e.role);
        }
    }
    if (numbered(n, "model", ".safetensors") || numbered(n, "pytorch_model", ".bin")) {
        return "model";
    }
    if (either(n, "optimizer", ".bin")) {
        return "optimizer";
    }
    if (either(n, "scheduler", ".bin")) {
        return "scheduler";
    }
    if (either(n, "sampler", ".bin")) {
        return "sampler";
    }
    if (numbered(n, "dl_state_dict", ".bin")) {
        return "dataloader state";
    }
    if (numbered(n, "random_states", ".pkl") || numbered(n, "rng_state", ".pth")) {
        return "RNG state";
    }
    if (numbered(n, "custom_checkpoint", ".pkl")) {
        return "custom state";
    }
    return {};
}

// The state beside a model that says which writer made the folder (config and tokenizer files
// alone also sit beside a bare save_pretrained model, which is named by config.json).
std::string layoutOf(const std::vector<FolderMember>& members)
{
    auto has = [&](std::string_view name) {
        return std::any_of(members.begin(), members.end(), [&](const FolderMember& m) { return m.name == name; });
    };
    auto hasRole = [&](std::string_view role) {
        return std::any_of(members.begin(), members.end(), [&](const FolderMember& m) { return m.role == role; });
    };
    if (has("trainer_state.json")) {
        return "a Hugging Face Trainer checkpoint folder";
    }
    if (has("adapter_config.json")) {
        return "a PEFT adapter folder";
    }
    const bool accelerate = std::any_of(members.begin(), members.end(), [](const FolderMember& m) {
        return numbered(m.name, "random_states", ".pkl") || either(m.name, "optimizer", ".bin") ||
               either(m.name, "scheduler", ".bin") || either(m.name, "sampler", ".bin") ||
               numbered(m.name, "custom_checkpoint", ".pkl");
    });
    if (accelerate) {
        return "an accelerate save_state folder";
    }
    if (hasRole("optimizer") || hasRole("training state") || hasRole("scheduler") || hasRole("RNG state")) {
        return "a training checkpoint folder of separate files";
    }
    if (has("config.json")) {
        return "a Hugging Face model folder";
    }
    return {};
}

// transformers, accelerate and peft load X.safetensors where X.bin is there too: the .bin is the
// same weights in the older format, not a second model.
void keepSafetensorsOverTwins(ModelFolder& f)
{
    for (auto& m : f.members) {
        const bool adapter = m.role == kAdapterRole;
        if ((m.role != "model" && !adapter) || !m.name.ends_with(".bin")) {
            continue;
        }
        std::string twin = m.name.substr(0, m.name.size() - 4);
        if (twin.starts_with("pytorch_model")) {
            twin = "model" + twin.substr(13);
        }
        twin += ".safetensors";
        const bool hasTwin =
            std::any_of(f.members.begin(), f.members.end(), [&](const FolderMember& o) { return o.name == twin; });
        if (hasTwin) {
            m.role = std::string(adapter ? "adapter" : "model") + ", as .bin (" + twin +
                     " holds it too and is what loaders read)";
        }
    }
}

// A text of adapter_config.json as shown: at most kMaxAdapterText bytes, cut before a UTF-8
// sequence rather than inside it, with "..." where it was cut.
std::string cutText(const std::string& s)
{
    if (s.size() <= kMaxAdapterText) {
        return s;
    }
    std::size_t n = kMaxAdapterText;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0U) == 0x80U) {
        --n;
    }
    return s.substr(0, n) + "...";
}

std::string textAt(const nlohmann::json& j, const char* key)
{
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? cutText(it->get<std::string>()) : std::string();
}

void readAdapterConfig(ModelFolder& f)
{
    if (!f.adapter()) {
        return;
    }
    AdapterConfig c;
    auto path = memberOfFolder(f.dir, "adapter_config.json", "the PEFT folder");
    auto text = path ? readSmallFile(*path, kMaxAdapterConfigBytes) : Expected<std::string>(path.error());
    if (!text) {
        c.problem = "adapter_config.json cannot be read: " + text.error().message;
    } else {
        c = parseAdapterConfig(*text);
    }
    f.adapterConfig = std::move(c);
}

}  // namespace

AdapterConfig parseAdapterConfig(std::string_view text)
{
    AdapterConfig c;
    auto parsed = parseJsonText<nlohmann::json>(text, "adapter_config.json");
    if (!parsed || !parsed->is_object()) {
        c.problem = "adapter_config.json is not a JSON object";
        return c;
    }
    const auto& j = *parsed;
    c.baseModel = textAt(j, "base_model_name_or_path");
    c.peftType = textAt(j, "peft_type");
    if (const auto r = j.find("r"); r != j.end() && r->is_number_integer()) {
        c.rank = r->get<std::int64_t>();
    }
    if (const auto t = j.find("target_modules"); t != j.end()) {
        if (t->is_string()) {
            c.targetModules.push_back(cutText(t->get<std::string>()));  // one regex over module names
        } else if (t->is_array()) {
            for (const auto& m : *t) {
                if (!m.is_string()) {
                    continue;
                }
                if (c.targetModules.size() == kMaxAdapterModules) {
                    ++c.moreModules;
                } else {
                    c.targetModules.push_back(cutText(m.get<std::string>()));
                }
            }
        }
    }
    return c;
}

std::string adapterSummary(const AdapterConfig& c)
{
    if (!c.problem.empty()) {
        return c.problem + ", so the base model it needs is not known";
    }
    std::string s = c.baseModel.empty()
                        ? std::string("adapter_config.json names no base model "
                                      "(base_model_name_or_path)")
                        : "base model '" + c.baseModel + "' (adapter_config.json base_model_name_or_path)";
    std::string kind = c.peftType;
    if (c.rank) {
        kind += (kind.empty() ? "r " : ", r ") + std::to_string(*c.rank);
    }
    if (!c.targetModules.empty()) {
        std::string modules;
        for (const auto& m : c.targetModules) {
            modules += (modules.empty() ? "" : ", ") + m;
        }
        if (c.moreModules > 0) {
            modules += " and " + std::to_string(c.moreModules) + " more";
        }
        kind += (kind.empty() ? "target modules " : ", target modules ") + modules;
    }
    return kind.empty() ? s : s + "; " + kind;
}

bool ModelFolder::adapter() const
{
    const std::string one = model();
    return !one.empty() && std::any_of(members.begin(), members.end(),
                                       [&](const FolderMember& m) { return m.name == one && m.role == kAdapterRole; });
}

std::string ModelFolder::memberList() const
{
    std::string s;
    for (const auto& m : members) {
        s += (s.empty() ? "" : ", ") + m.name + " (" + m.role + ")";
    }
    return s;
}

std::optional<ModelFolder> readModelFolder(const std::string& dir)
{
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        return std::nullopt;
    }
    std::vector<std::string> names;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        std::error_code st;
        if (it->is_regular_file(st)) {
            names.push_back(it->path().filename().string());
        }
    }
    return modelFolderOf(dir, names);
}

std::optional<ModelFolder> modelFolderOf(const std::string& dir, const std::vector<std::string>& names)
{
    ModelFolder f;
    f.dir = dir;
    for (const auto& name : names) {
        if (auto role = roleOf(name); !role.empty()) {
            f.members.push_back({name, std::move(role)});
        }
    }
    std::sort(f.members.begin(), f.members.end(),
              [](const FolderMember& a, const FolderMember& b) { return a.name < b.name; });
    f.layout = layoutOf(f.members);
    if (f.layout.empty()) {
        return std::nullopt;
    }
    keepSafetensorsOverTwins(f);
    for (const auto& m : f.members) {
        if (m.role == "model" || m.role == kAdapterRole) {
            f.models.push_back(m.name);
        }
    }
    readAdapterConfig(f);
    return f;
}

Expected<std::string> modelFileOf(const ModelFolder& folder)
{
    if (folder.models.size() == 1) {
        return memberOfFolder(folder.dir, folder.models.front(), "the folder");
    }
    std::string message = "is " + folder.layout;
    if (folder.models.empty()) {
        message += " with no model file in it (" + folder.memberList() +
                   "); inspect one of those files, or the folder that holds the weights";
    } else {
        message += " with " + std::to_string(folder.models.size()) + " models (" + folder.memberList() +
                   "); name the one to open";
    }
    Error e = makeError(ErrorCode::Usage, message);
    e.path = folder.dir;
    return e;
}

}  // namespace ckpt
