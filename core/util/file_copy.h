// Copying a byte range of one open file to the end of another without holding it in memory: the
// one loop behind the zip writer's records and the safetensors writer's tensors.
#pragma once

#include "util/bytes.h"
#include "util/error.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace ckpt {

// Told how many bytes the last chunk moved; returning false stops the copy with a Cancelled error.
using CopyStep = std::function<bool(std::uint64_t)>;

// Chunk size: large enough for full-speed copies, small enough that a cancel is answered quickly.
inline constexpr std::uint64_t kCopyChunk = 8ULL << 20;

// Appends `size` bytes of `inFd` starting at `offset` at `outFd`'s file position, advancing it:
// copy_file_range in chunks, or the buffered copy below where the kernel refuses (another
// filesystem, an old kernel, a special file). Errors: Truncated (the input ends first; the offset is
// where), Io (reading), WriteFailed (writing; strerror text), Cancelled.
//
// Why not always the buffered copy, whose 4 MiB writes fill larger page-cache folios than the
// kernel's 64 KiB splice steps out of phase: on the development VM it was faster for 1 GiB right
// after memory was freed (DCP chunks 0.31 s against 0.43 s) but slower at 4 GiB, 2.1-8.6 s against
// 1.8-2.4 s in six interleaved runs each (bench/RESULTS.md, "Latest").
Expected<void> appendFileRange(int inFd, std::uint64_t offset, std::uint64_t size, int outFd,
                               const CopyStep& step = {});

// The buffered copy's block: each of its writes ends on a multiple of it in the output.
inline constexpr std::uint64_t kBufferedBlock = 4ULL << 20;

// The same by pread/write through this thread's kBufferedBlock buffer, each write ending on a block
// boundary of the output.
Expected<void> appendFileRangeBuffered(int inFd, std::uint64_t offset, std::uint64_t size, int outFd,
                                       const CopyStep& step = {});

// Reads `size` bytes of `inFd` from `offset` through `buffer` (grown to at most a chunk) and hands
// each piece to `sink`; false from the sink stops with a Cancelled error. Errors: Io, Truncated.
Expected<void> readFileRange(int inFd, std::uint64_t offset, std::uint64_t size, std::vector<std::byte>& buffer,
                             const std::function<bool(Bytes)>& sink);

// Appends `data` at `outFd`'s position, retrying short writes. Errors: WriteFailed.
Expected<void> appendBytes(int outFd, const std::byte* data, std::uint64_t size);

}  // namespace ckpt
