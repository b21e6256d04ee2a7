#include "device/torch_allocator.h"

#include <set>

namespace ckpt::device {
namespace {

constexpr std::uint64_t kMinBlockSize = 512;
constexpr std::uint64_t kSmallSize = 1ULL << 20;
constexpr std::uint64_t kSmallBuffer = 2ULL << 20;
constexpr std::uint64_t kLargeBuffer = 20ULL << 20;
constexpr std::uint64_t kMinLargeAlloc = 10ULL << 20;
constexpr std::uint64_t kRoundLarge = 2ULL << 20;

std::uint64_t roundSize(std::uint64_t size)
{
    return size < kMinBlockSize ? kMinBlockSize : kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

std::uint64_t allocationSize(std::uint64_t size)
{
    if (size <= kSmallSize) {
        return kSmallBuffer;
    }
    if (size < kMinLargeAlloc) {
        return kLargeBuffer;
    }
    return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

}  // namespace

TorchAllocatorPeak torchLoadPeak(const std::vector<std::uint64_t>& storageBytesInLoadOrder)
{
    TorchAllocatorPeak peak;
    // Nothing is freed during a load, so a pool is the sizes of its free split-off remainders;
    // their addresses would matter only for merging freed neighbours.
    std::multiset<std::uint64_t> smallPool;
    std::multiset<std::uint64_t> largePool;
    for (const std::uint64_t bytes : storageBytesInLoadOrder) {
        if (bytes == 0) {
            continue;
        }
        peak.requestedBytes += bytes;
        const std::uint64_t size = roundSize(bytes);
        const bool small = size <= kSmallSize;
        auto& pool = small ? smallPool : largePool;
        std::uint64_t block = 0;
        if (auto it = pool.lower_bound(size); it != pool.end()) {
            block = *it;
            pool.erase(it);
        } else {
            block = allocationSize(size);
            peak.reservedBytes += block;
            ++peak.segments;
        }
        const std::uint64_t remaining = block - size;
        const bool split = small ? remaining >= kMinBlockSize : remaining > kSmallSize;
        if (split) {
            pool.insert(remaining);
            peak.allocatedBytes += size;
        } else {
            peak.allocatedBytes += block;  // the whole block is handed out
        }
    }
    return peak;
}

}  // namespace ckpt::device
