// libFuzzer entry for the Hugging Face index reader: any bytes as `model.safetensors.index.json`
// beside no shards must open as a set (with findings) or give an error, never a crash, a hang or a
// sanitizer report (deep nesting, Python's NaN/1e400, floods of keys, names given twice).
#include "sharded/sharded.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {

// One folder per process, the index rewritten for every input.
const std::string& folder()
{
    static const std::string dir = [] {
        std::string t = (std::filesystem::temp_directory_path() / "fuzz-hf-index-XXXXXX").string();
        return std::string(::mkdtemp(t.data()) != nullptr ? t.c_str() : "/tmp");
    }();
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string index = folder() + "/model.safetensors.index.json";
    {
        std::ofstream out(index, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data),  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
                  static_cast<std::streamsize>(size));
    }
    const auto loc = ckpt::sharded::detectSet(index);
    if (loc.kind == ckpt::sharded::SetKind::HuggingFace) {
        auto set = ckpt::sharded::openSet(loc);
        if (set) {
            std::size_t n = set->findings.size() + set->tensors.size() + set->shardFiles.size();
            (void)n;
        }
        (void)ckpt::sharded::memberFiles(loc);
    }
    return 0;
}
