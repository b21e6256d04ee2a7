// Reading a zstd frame (RFC 8878) with the system's libzstd, streaming into memory that grows only as
// output is really produced, never by what the frame header claims. What DCP's ZStandard stream
// extension writes (torch/distributed/checkpoint/_extension.py: `zstandard.ZstdCompressor().
// stream_writer`, one frame per item, its content size not recorded) and what reads it back
// (`ZstdDecompressor().stream_reader`, which stops at the end of the first frame).
#pragma once

#include "util/bytes.h"
#include "util/error.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace ckpt::archive {

// The most one stored byte of a zstd frame can become: a block holds at most 128 KiB
// (Block_Maximum_Size) and the smallest block that makes them is an RLE block of 4 bytes (a 3-byte
// header and the byte repeated). So `n` stored bytes never inflate past n * kZstdMostInflation,
// whatever they claim: the bound a reader can hold a few stored bytes to before it inflates them.
inline constexpr std::uint64_t kZstdMostInflation = 32768;

// The frame magic number 28 b5 2f fd.
[[nodiscard]] bool looksLikeZstd(Bytes b);

// What the first frame of `in` takes and says it holds (libzstd's ZSTD_findFrameCompressedSize and
// ZSTD_getFrameContentSize), read from its headers alone; nullopt when `in` holds no whole frame.
struct ZstdFrameInfo {
    std::uint64_t stored = 0;
    std::optional<std::uint64_t> content;  // none when the header does not record it
};
[[nodiscard]] std::optional<ZstdFrameInfo> zstdFrameInfo(Bytes in);

// Inflates the first zstd frame of `in`, handing the output to `sink` in pieces of at most `chunk`
// bytes (false from `sink` stops with Cancelled), and returns the number of bytes it produced.
// Bytes after the first frame are not read, as zstandard's stream_reader leaves them. Refused:
// a frame whose header records more than `limit` bytes, or that inflates past `limit` (Limit: a
// decompression bomb); a frame cut short (Truncated); a damaged one, or one whose window is larger
// than libzstd's default limit of 128 MiB (Corrupt, with libzstd's reason). `limit` bounds what
// comes out; memory is libzstd's window and one chunk.
Expected<std::uint64_t> unzstdFrame(Bytes in, std::uint64_t limit, const std::function<bool(Bytes)>& sink,
                                    std::size_t chunk = std::size_t{1} << 20);

// The same, into memory that grows with the output (at most `limit` bytes).
Expected<std::vector<std::byte>> unzstdFrame(Bytes in, std::uint64_t limit);

}  // namespace ckpt::archive
