#include "device/torch_allocator.h"

#include <bit>
#include <cstdlib>
#include <set>

namespace ckpt::device {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kMinBlockSize = 512;
constexpr std::uint64_t kSmallSize = kMiB;
constexpr std::uint64_t kSmallBuffer = 2 * kMiB;
constexpr std::uint64_t kLargeBuffer = 20 * kMiB;
constexpr std::uint64_t kMinLargeAlloc = 10 * kMiB;
constexpr std::uint64_t kRoundLarge = 2 * kMiB;
constexpr int kIntervalStartLog2 = 20;  // the divisions' intervals start at 1 MiB

std::uint64_t roundUp(std::uint64_t size, std::uint64_t step)
{
    return (size + step - 1) / step * step;
}

std::uint64_t divisionsFor(const TorchAllocatorConfig& c, std::uint64_t size)
{
    const int log = std::bit_width(size) - 1;
    const std::size_t index =
        std::min<std::size_t>(log > kIntervalStartLog2 ? log - kIntervalStartLog2 : 0, c.roundupDivisions.size() - 1);
    return c.roundupDivisions[index];
}

// round_size(): 512-byte steps, or the next of N steps between two powers of two.
std::uint64_t roundSize(std::uint64_t size, const TorchAllocatorConfig& c)
{
    if (size < kMinBlockSize) {
        return kMinBlockSize;
    }
    const std::uint64_t divisions = divisionsFor(c, size);
    if (divisions > 1 && size > kMinBlockSize * divisions) {
        if (std::has_single_bit(size)) {
            return size;
        }
        const std::uint64_t floor = std::bit_floor(size);
        const std::uint64_t step = floor >> (std::bit_width(divisions) - 1);
        if (step == 0) {
            return floor << 1;
        }
        const std::uint64_t down = size & ~(step - 1);
        return down == size ? size : down + step;
    }
    return roundUp(size, kMinBlockSize);
}

// get_allocation_size(): a new segment for a request that no free block holds.
std::uint64_t segmentSize(std::uint64_t size)
{
    if (size <= kSmallSize) {
        return kSmallBuffer;
    }
    if (size < kMinLargeAlloc) {
        return kLargeBuffer;
    }
    return roundUp(size, kRoundLarge);
}

Expected<std::uint64_t> number(const std::string& key, const std::string& text)
{
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0') {
        return makeError(ErrorCode::Usage, "allocator option " + key + " takes a number, not '" + text + "'");
    }
    return static_cast<std::uint64_t>(v);
}

Expected<std::uint64_t> powerOfTwo(const std::string& key, const std::string& text)
{
    auto v = number(key, text);
    if (v && !std::has_single_bit(*v)) {
        return makeError(ErrorCode::Usage, "allocator option " + key + " takes powers of 2, not " + text);
    }
    return v;
}

// roundup_power2_divisions: N for every size, or [MB:N,...,>:N] per interval (CUDAAllocatorConfig).
Expected<void> parseDivisions(TorchAllocatorConfig& c, const std::string& value)
{
    const std::string key = "roundup_power2_divisions";
    if (!value.starts_with('[')) {
        auto n = powerOfTwo(key, value);
        if (!n) {
            return n.error();
        }
        c.roundupDivisions.fill(*n);
        return {};
    }
    if (!value.ends_with(']')) {
        return makeError(ErrorCode::Usage, "allocator option " + key + " has no closing ]");
    }
    std::size_t last = 0;
    std::size_t at = 1;
    while (at < value.size() - 1) {
        const std::size_t comma = std::min(value.find(',', at), value.size() - 1);
        const std::string item = value.substr(at, comma - at);
        at = comma + 1;
        const std::size_t colon = item.find(':');
        if (colon == std::string::npos) {
            return makeError(ErrorCode::Usage, "allocator option " + key + " item '" + item + "' is not SIZE:N");
        }
        auto n = powerOfTwo(key, item.substr(colon + 1));
        if (!n) {
            return n.error();
        }
        const std::string size = item.substr(0, colon);
        if (size == ">") {
            std::fill(c.roundupDivisions.begin() + static_cast<std::ptrdiff_t>(last), c.roundupDivisions.end(), *n);
            continue;
        }
        auto mb = powerOfTwo(key, size);
        if (!mb) {
            return mb.error();
        }
        const std::size_t index =
            std::min<std::size_t>(static_cast<std::size_t>(std::bit_width(*mb) - 1), c.roundupDivisions.size() - 1);
        if (last == 0) {
            std::fill(c.roundupDivisions.begin(), c.roundupDivisions.begin() + static_cast<std::ptrdiff_t>(index), *n);
        }
        c.roundupDivisions[index] = *n;
        last = index;
    }
    return {};
}

}  // namespace

Expected<TorchAllocatorConfig> TorchAllocatorConfig::parse(const std::string& text)
{
    TorchAllocatorConfig c;
    std::size_t at = 0;
    while (at < text.size()) {
        // Options are comma-separated KEY:VALUE, but a bracketed list holds commas of its own.
        std::size_t end = text.find(',', at);
        if (const std::size_t open = text.find('[', at); open != std::string::npos && open < end) {
            end = text.find(']', open);
            end = end == std::string::npos ? text.size() : text.find(',', end);
        }
        end = std::min(end, text.size());
        const std::string option = text.substr(at, end - at);
        at = end + 1;
        if (option.empty()) {
            continue;
        }
        const std::size_t colon = option.find(':');
        if (colon == std::string::npos) {
            return makeError(ErrorCode::Usage, "allocator option '" + option + "' is not KEY:VALUE");
        }
        const std::string key = option.substr(0, colon);
        const std::string value = option.substr(colon + 1);
        if (key == "expandable_segments") {
            if (value != "True" && value != "False") {
                return makeError(ErrorCode::Usage, "allocator option expandable_segments takes True or False");
            }
            c.expandableSegments = value == "True";
        } else if (key == "max_split_size_mb") {
            auto mb = number(key, value);
            if (!mb) {
                return mb.error();
            }
            // torch raises anything below the large segment to it, and caps it at SIZE_MAX bytes.
            c.maxSplitSize = std::max(*mb, kLargeBuffer / kMiB) > UINT64_MAX / kMiB
                                 ? UINT64_MAX
                                 : std::max(*mb, kLargeBuffer / kMiB) * kMiB;
        } else if (key == "roundup_power2_divisions") {
            if (auto ok = parseDivisions(c, value); !ok) {
                return ok.error();
            }
        } else {
            c.ignored.push_back(option);
        }
    }
    return c;
}

Expected<TorchAllocatorConfig> TorchAllocatorConfig::fromEnvironment()
{
    for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
        const char* value = std::getenv(name);
        if (value == nullptr || *value == '\0') {
            continue;
        }
        auto c = parse(value);
        if (!c) {
            Error e = c.error();
            e.message = std::string(name) + ": " + e.message;
            return e;
        }
        c->source = std::string(name) + "=" + value;
        return c;
    }
    return TorchAllocatorConfig{};
}

std::string TorchAllocatorConfig::describe() const
{
    std::string s = source.empty() ? std::string("the default allocator settings") : source;
    for (const auto& o : ignored) {
        s += o.starts_with("backend:cudaMallocAsync") ? "; " + o + " is not modelled (CUDA's own pool decides)"
                                                      : "; " + o + " does not change what a load reserves";
    }
    return s;
}

TorchAllocatorPeak torchLoadPeak(const std::vector<std::uint64_t>& storageBytesInLoadOrder,
                                 const TorchAllocatorConfig& config)
{
    TorchAllocatorPeak peak;
    // Nothing is freed during a load, so a pool is the sizes of its free split-off remainders;
    // their addresses would matter only for merging freed neighbours.
    std::multiset<std::uint64_t> smallPool;
    std::multiset<std::uint64_t> largePool;
    std::uint64_t smallMapped = 0;  // expandable segments: the requests each pool's one segment holds
    std::uint64_t largeMapped = 0;
    const std::uint64_t maxSplit = config.maxSplitSize;
    for (const std::uint64_t bytes : storageBytesInLoadOrder) {
        if (bytes == 0) {
            continue;
        }
        peak.requestedBytes += bytes;
        const std::uint64_t size = roundSize(bytes, config);
        const bool small = size <= kSmallSize;
        if (config.expandableSegments) {
            (small ? smallMapped : largeMapped) += size;
            peak.allocatedBytes += size;
            continue;
        }
        auto& pool = small ? smallPool : largePool;
        std::uint64_t block = 0;
        auto it = pool.lower_bound(size);
        // An oversize block serves only an oversize request, and one not 20 MiB beyond it.
        const bool usable =
            it != pool.end() &&
            (small || !((size < maxSplit && *it >= maxSplit) || (size >= maxSplit && *it >= size + kLargeBuffer)));
        if (usable) {
            block = *it;
            pool.erase(it);
        } else {
            block = segmentSize(size);
            peak.reservedBytes += block;
            ++peak.segments;
        }
        const std::uint64_t remaining = block - size;
        const bool split = small ? remaining >= kMinBlockSize : size < maxSplit && remaining > kSmallSize;
        if (split) {
            pool.insert(remaining);
            peak.allocatedBytes += size;
        } else {
            peak.allocatedBytes += block;  // the whole block is handed out
        }
    }
    if (config.expandableSegments) {
        const std::uint64_t smallPages = (smallMapped + kSmallBuffer - 1) / kSmallBuffer;
        const std::uint64_t largePages = (largeMapped + kLargeBuffer - 1) / kLargeBuffer;
        peak.segments = smallPages + largePages;
        peak.reservedBytes = smallPages * kSmallBuffer + largePages * kLargeBuffer;
    }
    return peak;
}

}  // namespace ckpt::device
