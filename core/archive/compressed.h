// Whole-file compression around a checkpoint (`gzip model.pt` to save space or upload). torch.load
// reads none of them: its first four bytes are neither `PK\x03\x04` nor a pickle opcode, so it says
// "invalid load key, '\x1f'". ckptscope names the wrapper and, for gzip (zlib is already linked),
// reads the checkpoint inside.
//
// Signatures (RFC 1952; zstd's frame format; the xz and bzip2 file formats):
//   gzip  1f 8b            zstd  28 b5 2f fd
//   xz    fd 37 7a 58 5a 00  bzip2 42 5a 68 ('BZh') then a block-size digit '1'..'9'
#pragma once

#include "util/bytes.h"
#include "util/error.h"

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ckpt::archive {

enum class Compression : std::uint8_t { None, Gzip, Zstd, Xz, Bzip2 };

[[nodiscard]] Compression sniffCompression(Bytes file);
// "gzip", "zstd", "xz", "bzip2" ("" for None).
[[nodiscard]] std::string_view compressionName(Compression c);
// The command that undoes it: "gunzip", "zstd -d", "unxz", "bunzip2".
[[nodiscard]] std::string_view decompressCommand(Compression c);

// Inflates a gzip file (every member, as gunzip does) into memory. More than `limit` bytes of
// output is a Limit error (a gzip bomb, or a checkpoint too big to hold in memory: gunzip it);
// a damaged or cut stream is Corrupt/Truncated.
Expected<std::vector<std::byte>> gunzip(Bytes file, std::uint64_t limit);

}  // namespace ckpt::archive
