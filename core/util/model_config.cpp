#include "util/model_config.h"

#include "util/bytes.h"
#include "util/folder_member.h"
#include "util/json_text.h"

#include <filesystem>

namespace ckpt {

namespace {

constexpr std::uint64_t kMaxConfigBytes = 64U << 20;

std::optional<bool> boolAt(const nlohmann::json& j, const char* key)
{
    const auto it = j.find(key);
    return it != j.end() && it->is_boolean() ? std::optional<bool>(it->get<bool>()) : std::nullopt;
}

std::string textAt(const nlohmann::json& j, const char* key)
{
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

Expected<ModelConfig> parseModelConfig(std::string_view text)
{
    auto parsed = parseJsonText<nlohmann::json>(text, "config.json");
    if (!parsed) {
        return parsed.error();
    }
    const auto& j = *parsed;
    if (!j.is_object()) {
        return makeError(ErrorCode::Corrupt, "config.json is not a JSON object");
    }
    ModelConfig c;
    c.text = std::string(text);
    if (const auto it = j.find("architectures"); it != j.end() && it->is_array()) {
        for (const auto& a : *it) {
            if (a.is_string()) {
                c.architectures.push_back(a.get<std::string>());
            }
        }
    }
    c.tieWordEmbeddings = boolAt(j, "tie_word_embeddings");
    if (const auto it = j.find("text_config"); it != j.end() && it->is_object()) {
        c.textTieWordEmbeddings = boolAt(*it, "tie_word_embeddings");
    }
    c.tieEncoderDecoder = boolAt(j, "tie_encoder_decoder").value_or(false);
    if (const auto it = j.find("quantization_config"); it != j.end() && it->is_object()) {
        ModelConfig::Quantization q;
        q.method = textAt(*it, "quant_method");
        q.format = textAt(*it, "fmt");
        q.activationScheme = textAt(*it, "activation_scheme");
        q.scaleFormat = textAt(*it, "scale_fmt");
        if (const auto bs = it->find("weight_block_size"); bs != it->end() && bs->is_array()) {
            std::vector<std::int64_t> dims;
            for (const auto& d : *bs) {
                if (!d.is_number_integer() || d.get<std::int64_t>() <= 0) {
                    dims.clear();
                    break;
                }
                dims.push_back(d.get<std::int64_t>());
            }
            if (!dims.empty()) {
                q.blockSize = std::move(dims);
            }
        }
        c.quantization = std::move(q);
    }
    return c;
}

Expected<std::string> configForCopy(const ModelConfig& config, std::optional<DType> dequantizedTo)
{
    if (!dequantizedTo) {
        return config.text;
    }
    auto parsed = parseJsonText<nlohmann::ordered_json>(config.text, "config.json");
    if (!parsed) {
        return parsed.error();
    }
    auto& j = *parsed;
    if (!j.is_object()) {
        return makeError(ErrorCode::Corrupt, "config.json is not a JSON object");
    }
    j.erase("quantization_config");
    const std::string dtype(dtypeName(*dequantizedTo));
    if (j.contains("torch_dtype")) {
        j["torch_dtype"] = dtype;
    }
    if (j.contains("dtype") || !j.contains("torch_dtype")) {
        j["dtype"] = dtype;
    }
    return dumpJson(std::move(j), 2) + "\n";
}

std::optional<ModelConfig> readModelConfig(const std::string& dir)
{
    // A member of the model's folder like a set's shard (util/folder_member.h): a config.json that
    // leads outside it (a symlink to another model's, or to /etc/passwd), or that is no regular
    // file, is not read, so nothing of it is shown or copied into a convert's output folder.
    const auto path = memberOfFolder(dir, "config.json", "the model's folder");
    std::error_code ec;
    if (!path || !std::filesystem::is_regular_file(*path, ec)) {
        return std::nullopt;
    }
    auto text = readSmallFile(*path, kMaxConfigBytes);
    if (!text) {
        return std::nullopt;
    }
    auto config = parseModelConfig(*text);
    return config ? std::optional<ModelConfig>(std::move(*config)) : std::nullopt;
}

}  // namespace ckpt
