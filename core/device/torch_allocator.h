// What torch.load(map_location='cuda:N') would hold on the GPU for a file: PyTorch's CUDA caching
// allocator never hands the driver a storage's size as it is. Its rules (c10/cuda/
// CUDACachingAllocator.cpp, the default configuration):
//   - a request is rounded up to a multiple of 512 bytes (kMinBlockSize), at least 512;
//   - requests up to 1 MiB (kSmallSize) come from the small pool, whose segments are 2 MiB
//     (kSmallBuffer) and split down to 512-byte remainders;
//   - larger ones come from the large pool: under 10 MiB (kMinLargeAlloc) a new segment is
//     20 MiB (kLargeBuffer), from 10 MiB on it is the request rounded up to 2 MiB (kRoundLarge),
//     and a large block is split only when more than 1 MiB would remain;
//   - a request takes the smallest free block of its pool that fits (best fit); a zero-byte
//     storage allocates nothing.
// torch.load allocates one block per storage, in the order the pickle first names them, and frees
// nothing while it loads, so the segments reserved when it returns are its peak. The CUDA context
// comes on top; the allocator does not see it.
#pragma once

#include <cstdint>
#include <vector>

namespace ckpt::device {

struct TorchAllocatorPeak {
    std::uint64_t requestedBytes = 0;  // the storages' own bytes
    std::uint64_t allocatedBytes = 0;  // after rounding (torch.cuda.memory_allocated)
    std::uint64_t reservedBytes = 0;   // segments taken from the driver (torch.cuda.memory_reserved)
    std::uint64_t segments = 0;
};

[[nodiscard]] TorchAllocatorPeak torchLoadPeak(const std::vector<std::uint64_t>& storageBytesInLoadOrder);

}  // namespace ckpt::device
