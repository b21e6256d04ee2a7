// libFuzzer entry point for the zip reader: parse, look a few names up, read every record
// (inflating deflated ones, whole and streamed a chunk at a time). Wired into the build by CKPTSCOPE_FUZZ; by hand:
//   clang++-14 -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Icore tests/fuzz/fuzz_zip.cpp \
//     core/archive/*.cpp core/util/*.cpp -lz -o fuzz_zip
#include "archive/inflate.h"
#include "archive/zip.h"

#include <cstddef>
#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const ckpt::Bytes file{reinterpret_cast<const std::byte*>(data), size};  // NOLINT
    auto zip = ckpt::archive::ZipReader::parse(file);
    if (!zip) {
        return 0;
    }
    (void)zip->find("data.pkl");
    (void)zip->find("VERSION");
    std::vector<std::byte> scratch;
    for (const auto& r : zip->records()) {
        auto bytes = zip->data(r, scratch);
        if (bytes && r.method == 0 &&
            (bytes->data() < file.data() || bytes->data() + bytes->size() > file.data() + size)) {
            __builtin_trap();  // a stored record must be a view inside the input
        }
        if (bytes) {
            (void)ckpt::archive::crc32(*bytes);
        }
        // The streaming reader, whole and in part, in small chunks so chunk edges are exercised.
        std::uint64_t seen = 0;
        auto whole = ckpt::archive::readRecord(
            file, r, 0, r.size,
            [&](ckpt::Bytes piece) {
                seen += piece.size();
                return seen <= r.size;
            },
            64);
        if (whole && seen != r.size) {
            __builtin_trap();  // a whole read hands out exactly the declared size
        }
        if (r.size > 2) {
            (void)ckpt::archive::readRecord(
                file, r, r.size / 3, r.size / 3, [](ckpt::Bytes) { return true; }, 7);
        }
    }
    return 0;
}
