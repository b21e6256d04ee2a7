// safetensors (docs/format.md §10): u64 little-endian header length N (<= 100'000'000), N bytes of
// JSON (`{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}`, padded
// with spaces), then the data buffer. Validation follows the reference reader: offsets contiguous
// from 0 with no holes or overlaps, each size = numel x element size, buffer ends at the file end.
#pragma once

#include "util/bytes.h"
#include "util/dtype.h"
#include "util/error.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ckpt::archive {

struct SafetensorsEntry {
    std::string name;
    DType dtype = DType::Unknown;
    std::string dtypeCode;  // as written (`F32`), kept for unknown codes
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0;  // relative to the data buffer
    std::uint64_t end = 0;
};

struct SafetensorsFile {
    std::uint64_t headerSize = 0;
    std::uint64_t dataStart = 0;            // 8 + headerSize
    std::vector<SafetensorsEntry> tensors;  // in header order
    std::vector<std::pair<std::string, std::string>> metadata;
};

// Quick signature check (u64 length that fits, then '{').
[[nodiscard]] bool looksLikeSafetensors(Bytes file);
Expected<SafetensorsFile> parseSafetensors(Bytes file);
// The same from the file's first bytes (`file`: the length and the whole header at least) and its
// size: a file that is not mapped (a byte source over HTTP) reads no more than that.
Expected<SafetensorsFile> parseSafetensors(Bytes file, std::uint64_t fileSize);

struct SafetensorsOut {
    std::string name;
    DType dtype = DType::Unknown;
    std::vector<std::int64_t> shape;
    std::uint64_t nbytes = 0;
};
// The header (length prefix included) for tensors written back to back in the given order, padded
// to a multiple of 8 as the reference writer does. Fails for dtypes safetensors cannot hold.
Expected<std::string> safetensorsHeader(const std::vector<SafetensorsOut>& tensors,
                                        const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace ckpt::archive
