#include "write/model_config_file.h"

#include "checkpoint/model_folder.h"
#include "util/bytes.h"
#include "util/file_copy.h"
#include "util/model_config.h"
#include "write/output_file.h"

#include <filesystem>

namespace ckpt::write {

Expected<std::optional<ConfigWritten>> writeModelConfig(const Checkpoint& in, const transform::Plan& plan,
                                                        const std::string& dir, Durability durability)
{
    // A safetensors model file and a set read config.json beside them; a folder's .bin model did not.
    const std::optional<ModelConfig> config =
        in.modelConfig ? in.modelConfig : (in.folder ? readModelConfig(in.folder->dir) : std::nullopt);
    if (!config) {
        return std::optional<ConfigWritten>();
    }
    const std::optional<DType> dequantized = plan.options.dequantize;
    auto text = configForCopy(*config, dequantized);
    if (!text) {
        Error e = text.error();
        e.path = in.path;
        return e;
    }
    ConfigWritten done;
    done.path = (std::filesystem::path(dir) / "config.json").string();
    const std::string what =
        dequantized ? "the input's without quantization_config, dtype " + std::string(dtypeName(*dequantized)) +
                          " (the weights are dequantized), so from_pretrained loads the folder as a plain model"
                    : "the input's, so from_pretrained loads the folder";
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(done.path, ec))) {
        // Never replaced: it may be the user's own, for another model. The same text is no loss.
        auto there = readSmallFile(done.path, text->size() + 1);
        const bool same = there && *there == *text;
        done.note = same ? "config.json already in the folder is the one this copy needs (" + what + ")"
                         : "config.json already in the folder is left as it is, and is not the one this copy needs (" +
                               what + "): from_pretrained reads that one";
        return std::optional<ConfigWritten>(std::move(done));
    }
    auto out = detail::OutputFile::create(done.path, durability);
    if (!out) {
        return out.error();
    }
    if (auto ok = appendBytes(out->fd(), reinterpret_cast<const std::byte*>(text->data()), text->size()); !ok) {
        return detail::onTarget(ok.error(), done.path);
    }
    if (auto ok = out->commit(); !ok) {
        return ok.error();
    }
    done.written = true;
    done.note = "config.json written: " + what;
    return std::optional<ConfigWritten>(std::move(done));
}

}  // namespace ckpt::write
