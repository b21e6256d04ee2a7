// What torch.load(map_location='cuda:N') would hold on the GPU for a file: PyTorch's CUDA caching
// allocator never hands the driver a storage's size as it is. Its rules (c10/cuda/
// CUDACachingAllocator.cpp, c10/core/AllocatorConfig.{h,cpp}):
//   - a request is rounded up to a multiple of 512 bytes (kMinBlockSize), at least 512; with
//     roundup_power2_divisions:N a request above 512*N bytes is instead rounded up to the next of
//     N equal steps between two powers of two (a power of two stays as it is);
//   - requests up to 1 MiB (kSmallSize) come from the small pool, larger ones from the large pool;
//   - by default a new small segment is 2 MiB (kSmallBuffer) and splits down to 512-byte
//     remainders; a new large segment is large_segment_size_mb (20 MiB by default) under 10 MiB
//     (kMinLargeAlloc) and the request rounded up to 2 MiB (kRoundLarge) from 10 MiB on; a large
//     block is split only when more than 1 MiB would remain and the request is below
//     max_split_size_mb; a request takes the smallest free block of its pool that fits (best fit),
//     but never an oversize block (one of at least max_split_size) for a request below it, nor one
//     max_non_split_rounding_mb (large_segment_size_mb by default) or more beyond a request above it;
//   - with expandable_segments:True each pool is one segment that grows by mapping pages, 2 MiB for
//     the small pool and large_segment_size_mb (20 MiB) for the large one (measured on PyTorch 2.11,
//     bench/RESULTS.md), so with nothing freed what is reserved is each pool's rounded requests
//     rounded up to its page;
//   - a zero-byte storage allocates nothing.
// torch.load allocates one block per storage, in the order the pickle first names them, and frees
// nothing while it loads, so the segments reserved when it returns are its peak. The CUDA context
// comes on top; the allocator does not see it.
//
// The settings are parsed as c10 parses them (ConfigTokenizer: whitespace anywhere is ignored, ',' ':'
// '[' ']' are tokens, numbers are read as std::stoull reads them), and refused where c10 refuses
// them, in its words; tests/device/torch_alloc_conf_2.14.json holds what PyTorch 2.14's own parser
// made of the strings the tests use (tests/device/torch_alloc_conf_oracle.py).
#pragma once

#include "util/error.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ckpt::device {

struct TorchAllocatorConfig {
    static constexpr std::uint64_t kDefaultLargeSegment = 20ULL << 20;

    bool expandableSegments = false;
    std::uint64_t maxSplitSize = UINT64_MAX;  // bytes; UINT64_MAX: unlimited (torch's default)
    // The most a free block may exceed a request of max_split_size or more and still be handed out.
    std::uint64_t maxNonSplitRounding = kDefaultLargeSegment;
    // The segment of a request between 1 and 10 MiB, and the large pool's page with expandable segments.
    std::uint64_t largeSegmentSize = kDefaultLargeSegment;
    // Divisions per power-of-two interval from 1 MiB up (index 0: sizes below 2 MiB, 15: 32 GiB on);
    // 0 or 1: plain 512-byte rounding.
    std::array<std::uint64_t, 16> roundupDivisions{};
    bool asyncBackend = false;  // backend:cudaMallocAsync: CUDA's own pool decides, not modelled
    std::string source;         // "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", or "" for the default
    // Options torch takes that do not change what a load reserves (garbage_collection_threshold,
    // pinned_*, ...), and keys torch does not know (a CUDA build refuses the whole setting for those:
    // "Unrecognized key"), as written, for the report.
    std::vector<std::string> ignored;
    std::vector<std::string> unknown;

    // "expandable_segments: True, max_split_size_mb:128, roundup_power2_divisions:[256:1,>:4]".
    static Expected<TorchAllocatorConfig> parse(const std::string& text);
    // As torch reads its environment: PYTORCH_CUDA_ALLOC_CONF if set (even empty), else
    // PYTORCH_HIP_ALLOC_CONF, else PYTORCH_ALLOC_CONF (PyTorch 2.14 reads them in this order); a value
    // torch would reject is an error (Usage) naming the variable.
    static Expected<TorchAllocatorConfig> fromEnvironment();
    // "the default allocator settings" or the variable and its value, plus what is not modelled.
    [[nodiscard]] std::string describe() const;
};

struct TorchAllocatorPeak {
    std::uint64_t requestedBytes = 0;  // the storages' own bytes
    std::uint64_t allocatedBytes = 0;  // after rounding (torch.cuda.memory_allocated)
    std::uint64_t reservedBytes = 0;   // segments taken from the driver (torch.cuda.memory_reserved)
    std::uint64_t segments = 0;        // cudaMalloc calls (or pages mapped, with expandable segments)
};

[[nodiscard]] TorchAllocatorPeak torchLoadPeak(const std::vector<std::uint64_t>& storageBytesInLoadOrder,
                                               const TorchAllocatorConfig& config = {});

}  // namespace ckpt::device
