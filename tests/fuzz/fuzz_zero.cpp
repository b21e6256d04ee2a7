// libFuzzer entry for the DeepSpeed ZeRO reader: any bytes as a tag folder's rank-0
// `mp_rank_00_model_states.pt` (the file whose dp_world_size, param_shapes and frozen fragments
// shape the set) must open as a set with findings or give an error, never a crash, a hang or a
// sanitizer report. No optimizer files: the reader's own findings say they are missing.
#include "sharded/zero.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {

const std::string& folder()
{
    static const std::string dir = [] {
        std::string t = (std::filesystem::temp_directory_path() / "fuzz-zero-XXXXXX").string();
        const std::string made = ::mkdtemp(t.data()) != nullptr ? t.c_str() : "/tmp/fuzz-zero";
        std::filesystem::create_directories(made + "/global_step1");
        std::ofstream(made + "/latest") << "global_step1";
        return made;
    }();
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    {
        std::ofstream out(folder() + "/global_step1/mp_rank_00_model_states.pt", std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data),  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
                  static_cast<std::streamsize>(size));
    }
    const auto loc = ckpt::sharded::detectSet(folder());
    if (loc.kind == ckpt::sharded::SetKind::DeepSpeedZero) {
        auto set = ckpt::sharded::zero::open(loc);
        if (set) {
            std::size_t n = set->findings.size() + set->files.size();
            (void)n;
        }
    }
    return 0;
}
