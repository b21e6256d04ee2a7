// libFuzzer entry for the DCP `.metadata` reader: any bytes must give a Metadata or an error,
// never a crash, hang or sanitizer report.
#include "sharded/dcp.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    auto md = ckpt::sharded::dcp::parseMetadata(ckpt::Bytes(
        reinterpret_cast<const std::byte*>(data), size));  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
    if (md) {
        std::uint64_t n = 0;
        for (const auto& item : md->items) {
            n += item.numel() + item.chunks.size() + item.path.size();
        }
        (void)n;
    }
    return 0;
}
