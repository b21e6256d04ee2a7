#include "device/torch_allocator.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <string_view>

namespace ckpt::device {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kMinBlockSize = 512;
constexpr std::uint64_t kSmallSize = kMiB;
constexpr std::uint64_t kSmallBuffer = 2 * kMiB;
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
std::uint64_t segmentSize(std::uint64_t size, const TorchAllocatorConfig& c)
{
    if (size <= kSmallSize) {
        return kSmallBuffer;
    }
    if (size < kMinLargeAlloc) {
        return c.largeSegmentSize;
    }
    return roundUp(size, kRoundLarge);
}

// What c10 refused, in its words. Thrown inside parse() only, and turned into its Usage error there:
// the parse is a walk over tokens where any step may refuse, as c10's TORCH_CHECKs do.
struct Refused {
    std::string why;
};

// c10's ConfigTokenizer: ',' ':' '[' ']' are tokens of their own, whitespace anywhere is dropped,
// everything else runs together into one token.
class Tokens {
public:
    explicit Tokens(const std::string& text)
    {
        std::string buffer;
        for (const char ch : text) {
            if (ch == ',' || ch == ':' || ch == '[' || ch == ']') {
                if (!buffer.empty()) {
                    tokens_.push_back(std::move(buffer));
                    buffer.clear();
                }
                tokens_.emplace_back(1, ch);
            } else if (std::isspace(static_cast<unsigned char>(ch)) == 0) {
                buffer += ch;
            }
        }
        if (!buffer.empty()) {
            tokens_.push_back(std::move(buffer));
        }
    }

    [[nodiscard]] std::size_t size() const { return tokens_.size(); }

    // Token i; past the end is c10's internal assert, which refuses the whole setting.
    [[nodiscard]] const std::string& operator[](std::size_t i) const
    {
        if (i >= tokens_.size()) {
            throw Refused{"it ends after '" + (tokens_.empty() ? std::string() : tokens_.back()) +
                          "' where a value was expected (torch: \"Index out of bounds in ConfigTokenizer\")"};
        }
        return tokens_[i];
    }

    // std::stoull: leading digits (a sign allowed, "-1" wraps), anything after them ignored.
    [[nodiscard]] std::uint64_t number(std::size_t i) const
    {
        const std::string& t = (*this)[i];
        errno = 0;
        char* end = nullptr;
        const unsigned long long v = std::strtoull(t.c_str(), &end, 10);
        if (end == t.c_str()) {
            throw Refused{"'" + t + "' is not a number (torch: std::stoull)"};
        }
        if (errno == ERANGE) {
            throw Refused{"'" + t + "' is out of range (torch: std::stoull)"};
        }
        return v;
    }

    // std::stod, as number().
    [[nodiscard]] double decimal(std::size_t i) const
    {
        const std::string& t = (*this)[i];
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(t.c_str(), &end);
        if (end == t.c_str() || errno == ERANGE) {
            throw Refused{"'" + t + "' is not a number (torch: std::stod)"};
        }
        return v;
    }

    [[nodiscard]] bool boolean(std::size_t i) const
    {
        const std::string& t = (*this)[i];
        if (t != "True" && t != "False") {
            throw Refused{"expected 'True' or 'False' but got '" + t + "'"};
        }
        return t == "True";
    }

    // Past a key and its value (a single token or a bracketed list); the index of the value's last
    // token. c10 checks that the separators exist, not what they are.
    [[nodiscard]] std::size_t skipKey(std::size_t i) const
    {
        (void)(*this)[++i];  // the ':'
        if ((*this)[++i] != "[") {
            return i;
        }
        while (++i < size() && tokens_[i] != "]") {
        }
        (void)(*this)[i];  // no closing ']'
        return i;
    }

private:
    std::vector<std::string> tokens_;
};

void check(bool ok, std::string why)
{
    if (!ok) {
        throw Refused{std::move(why)};
    }
}

// max_split_size_mb and max_non_split_rounding_mb: at least the large segment, at most SIZE_MAX bytes.
std::uint64_t megabytesFrom(const Tokens& t, std::size_t at, const char* key, std::uint64_t largeSegment)
{
    const std::uint64_t mb = t.number(at);
    check(mb >= largeSegment / kMiB, std::string("CachingAllocator option ") + key +
                                         " too small, must be >= " + std::to_string(largeSegment / kMiB));
    return std::min<std::uint64_t>(mb, UINT64_MAX / kMiB) * kMiB;
}

// roundup_power2_divisions: N for every interval, or [MB:N,...,>:N] (c10's parseRoundUpPower2Divisions:
// the first MB given fills every interval below it too, '>' every interval after the last MB given,
// and N may be 0 in a list, where it turns the rounding off).
std::size_t parseDivisions(const Tokens& t, std::size_t i, TorchAllocatorConfig& c)
{
    auto& d = c.roundupDivisions;
    if (t[++i] != "[") {
        const std::uint64_t n = t.number(i);
        check(std::has_single_bit(n), "For roundups, the divisions has to be power of 2");
        d.fill(n);
        return i;
    }
    bool first = true;
    std::size_t last = 0;
    while (++i < t.size() && t[i] != "]") {
        const std::size_t interval = i;
        (void)t[++i];  // the ':'
        const std::uint64_t n = t.number(++i);
        check(n == 0 || std::has_single_bit(n),
              "For roundups, the divisions has to be power of 2 or 0 to disable roundup");
        if (t[interval] == ">") {
            std::fill(d.begin() + static_cast<std::ptrdiff_t>(std::min(last + 1, d.size())), d.end(), n);
        } else {
            const std::uint64_t mb = t.number(interval);
            check(std::has_single_bit(mb), "For roundups, the intervals have to be power of 2");
            const std::size_t index =
                std::min<std::size_t>(static_cast<std::size_t>(std::bit_width(mb) - 1), d.size() - 1);
            if (first) {
                std::fill(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(index), n);
                first = false;
            }
            d[index] = n;
            last = index;
        }
        if (t[i + 1] != "]") {
            ++i;  // the ','
        }
    }
    (void)t[i];  // no closing ']'
    return i;
}

// The keys PyTorch 2.14 knows that leave what a load reserves alone (c10/core/AllocatorConfig.h and
// c10/cuda/CUDAAllocatorConfig.cpp). Their values are checked where c10's generic parser checks them.
enum class Checked { Nothing, Number, Decimal, Boolean };
struct Harmless {
    std::string_view key;
    Checked value;
};
constexpr std::array<Harmless, 16> kHarmless{{
    {"garbage_collection_threshold", Checked::Decimal},
    {"pinned_use_background_threads", Checked::Boolean},
    {"pinned_max_cached_size_mb", Checked::Number},
    {"pinned_max_round_threshold_mb", Checked::Number},
    {"release_lock_on_cudamalloc", Checked::Nothing},
    {"release_lock_on_hipmalloc", Checked::Nothing},
    {"pinned_use_cuda_host_register", Checked::Nothing},
    {"pinned_use_hip_host_register", Checked::Nothing},
    {"pinned_num_register_threads", Checked::Nothing},
    {"pinned_reserve_segment_size_mb", Checked::Nothing},
    {"graph_capture_record_stream_reuse", Checked::Nothing},
    {"per_process_memory_fraction", Checked::Nothing},
    {"pinned_free_catch_all", Checked::Nothing},
    {"throw_on_cudamalloc_oom", Checked::Nothing},
    {"expandable_segments_reserve", Checked::Nothing},
    {"expandable_segments_reserve_by_class", Checked::Nothing},
}};

// A key with its value as the user wrote it, from the tokens (for the report).
std::string option(const Tokens& t, std::size_t key, std::size_t last)
{
    std::string s;
    for (std::size_t i = key; i <= last && i < t.size(); ++i) {
        s += t[i];
    }
    return s;
}

std::size_t parseOption(const Tokens& t, std::size_t i, TorchAllocatorConfig& c)
{
    const std::string& key = t[i];
    const std::size_t start = i;
    if (key == "large_segment_size_mb") {
        return t.skipKey(i);  // read first, below
    }
    if (key == "max_split_size_mb") {
        c.maxSplitSize = megabytesFrom(t, i + 2, "max_split_size_mb", c.largeSegmentSize);
        return i + 2;
    }
    if (key == "max_non_split_rounding_mb") {
        c.maxNonSplitRounding = megabytesFrom(t, i + 2, "max_non_split_rounding_mb", c.largeSegmentSize);
        return i + 2;
    }
    if (key == "roundup_power2_divisions") {
        return parseDivisions(t, i + 1, c);
    }
    if (key == "expandable_segments") {
        c.expandableSegments = t.boolean(i + 2);
        return i + 2;
    }
    if (key == "backend") {
        const std::string& name = t[i + 2];
        check(name == "native" || name == "cudaMallocAsync",
              "Unknown allocator backend, options are native and cudaMallocAsync");
        c.asyncBackend = name == "cudaMallocAsync";
        return i + 2;
    }
    for (const auto& h : kHarmless) {
        if (key != h.key) {
            continue;
        }
        if (h.value == Checked::Number) {
            (void)t.number(i + 2);
        } else if (h.value == Checked::Boolean) {
            (void)t.boolean(i + 2);
        } else if (h.value == Checked::Decimal) {
            const double v = t.decimal(i + 2);
            check(v > 0 && v < 1.0, "garbage_collect_threshold is invalid, set it in (0.0, 1.0)");
        }
        i = t.skipKey(i);
        c.ignored.push_back(option(t, start, i));
        return i;
    }
    i = t.skipKey(i);
    c.unknown.push_back(option(t, start, i));
    return i;
}

}  // namespace

Expected<TorchAllocatorConfig> TorchAllocatorConfig::parse(const std::string& text)
{
    TorchAllocatorConfig c;
    const Tokens t(text);
    try {
        // c10 reads large_segment_size_mb first, wherever it is: the other limits are relative to it.
        for (std::size_t i = 0; i < t.size(); ++i) {
            if (t[i] == "large_segment_size_mb") {
                const std::uint64_t mb = t.number(i + 2);
                check(mb > kMinLargeAlloc / kMiB, "CachingAllocator option large_segment_size_mb must be > " +
                                                      std::to_string(kMinLargeAlloc / kMiB) + " MB");
                c.largeSegmentSize = std::min<std::uint64_t>(mb, UINT64_MAX / kMiB) * kMiB;
                i += 2;
            }
        }
        c.maxNonSplitRounding = c.largeSegmentSize;
        for (std::size_t i = 0; i < t.size(); ++i) {
            i = parseOption(t, i, c);
            if (i + 1 < t.size()) {
                ++i;  // the ',' (c10 checks that a token follows, not which)
            }
        }
    } catch (const Refused& r) {
        return makeError(ErrorCode::Usage, "torch refuses this allocator setting: " + r.why);
    }
    return c;
}

Expected<TorchAllocatorConfig> TorchAllocatorConfig::fromEnvironment()
{
    for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
        const char* value = std::getenv(name);
        if (value == nullptr) {
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
    if (asyncBackend) {
        s += "; backend:cudaMallocAsync is not modelled (CUDA's own pool decides)";
    }
    for (const auto& o : ignored) {
        s += "; " + o + " does not change what a load reserves";
    }
    for (const auto& o : unknown) {
        s += "; " + o +
             " is not an option PyTorch 2.14 knows (a CUDA build of torch refuses the whole setting: "
             "\"Unrecognized key\")";
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
        // An oversize block serves only an oversize request, and one less than max_non_split_rounding
        // beyond it. (Within one load every free block is a split-off remainder, smaller than the large
        // segment and so than max_split_size: the second rule is c10's, and kept, though it cannot fire.)
        const bool usable =
            it != pool.end() && (small || !((size < maxSplit && *it >= maxSplit) ||
                                            (size >= maxSplit && *it >= size + config.maxNonSplitRounding)));
        if (usable) {
            block = *it;
            pool.erase(it);
        } else {
            block = segmentSize(size, config);
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
        const std::uint64_t page = config.largeSegmentSize;
        const std::uint64_t largePages = (largeMapped + page - 1) / page;
        peak.segments = smallPages + largePages;
        peak.reservedBytes = smallPages * kSmallBuffer + largePages * page;
    }
    return peak;
}

}  // namespace ckpt::device
