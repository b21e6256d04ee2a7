// libFuzzer entry for DCP's newer layouts, built twice (fuzz.cmake): fuzz_dcp_safetensors and
// fuzz_dcp_zstd. Each input is the one data file `__0_0.distcp` of a folder whose `.metadata` is that
// of a real PyTorch 2.x save in the layout (tests/fuzz/dcp_templates, CKPTSCOPE_FUZZ_TEMPLATE): the
// safetensors file that ends it (its header, DCP_SHARDING_INFO, the chunk bytes) or its zstd frames
// mutated. The set is opened, listed, and when whole every storage of its view is read: any bytes
// must give a set, a finding or an error, never a crash, hang or sanitizer report, and never more
// memory than an item's limit.
#include "sharded/dcp.h"
#include "sharded/listing.h"
#include "sharded/sharded.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

// A folder of this process's own holding the template's .metadata; the data file is each input.
// Removed when the fuzzer exits.
struct Folder {
    fs::path dir = fs::temp_directory_path() / ("ckptscope-fuzz-dcp-" + std::to_string(::getpid()));
    Folder()
    {
        fs::create_directories(dir);
        fs::copy_file(fs::path(CKPTSCOPE_FUZZ_TEMPLATE) / ".metadata", dir / ".metadata",
                      fs::copy_options::overwrite_existing);
    }
    Folder(const Folder&) = delete;
    Folder& operator=(const Folder&) = delete;
    ~Folder()
    {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

const fs::path& folder()
{
    static const Folder f;
    return f.dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const fs::path& dir = folder();
    {
        std::ofstream f(dir / "__0_0.distcp", std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(data),  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
                static_cast<std::streamsize>(size));
    }
    const auto loc = ckpt::sharded::detectSet(dir.string());
    if (loc.kind != ckpt::sharded::SetKind::Dcp) {
        return 0;
    }
    auto set = ckpt::sharded::dcp::open(loc);
    if (!set) {
        return 0;
    }
    const auto listing = ckpt::sharded::listingOf(*set);
    (void)listing;
    auto view = ckpt::sharded::dcp::view(*set);
    if (!view) {
        return 0;
    }
    std::uint64_t sum = 0;
    for (std::uint32_t i = 0; i < (*view)->storages.size(); ++i) {
        const ckpt::StorageIndex s{i};
        (void)(*view)->streamStorage(s, 0, (*view)->storages[s].nbytes, [&sum](ckpt::Bytes b) {
            sum += b.empty() ? 0 : static_cast<std::uint64_t>(b.front());
            return true;
        });
    }
    return 0;
}
