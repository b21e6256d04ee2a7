#include "host_copy.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ckpt::device {
namespace {

constexpr std::size_t kKiB = 1024;
// Below this a slice is not worth a thread's wake-up.
constexpr std::size_t kMinSlice = 256 * kKiB;
constexpr std::size_t kPage = 4 * kKiB;

// A positive integer from the environment, clamped to [lo, hi]; `fallback` when unset or not a number.
std::size_t fromEnv(const char* name, std::size_t fallback, std::size_t lo, std::size_t hi)
{
    const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read before any thread starts
    if (v == nullptr || *v == '\0') {
        return fallback;
    }
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0') {
        return fallback;
    }
    return std::clamp<std::size_t>(n, lo, hi);
}

}  // namespace

StagingSettings StagingSettings::fromEnvironment()
{
    // Measured on a 16-core H100 host (bench/RESULTS.md): filling from the mapping scales to all
    // 16 cores (6 GB/s on one, 55 on 16) and is what limits the copy, so every core takes part.
    const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
    StagingSettings s;
    s.threads = static_cast<unsigned>(fromEnv("CKPTSCOPE_CUDA_THREADS", std::min(cores, 16U), 1, 64));
    // Four 32 MiB buffers: 128 MiB pinned, 256 MiB at most.
    s.bufferBytes = fromEnv("CKPTSCOPE_CUDA_BUFFER_KIB", 32 * kKiB, 64, 64 * kKiB) * kKiB;
    return s;
}

void copyToStaging(std::byte* dst, const std::byte* src, std::size_t n)
{
#if defined(__SSE2__)
    // memcpy up to a 16-byte boundary of dst, 64 bytes a step around the caches, memcpy the rest.
    const std::size_t head = std::min(n, (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16);  // NOLINT
    std::memcpy(dst, src, head);
    std::size_t at = head;
    for (; at + 64 <= n; at += 64) {
        const auto* s = reinterpret_cast<const __m128i*>(src + at);  // NOLINT
        auto* d = reinterpret_cast<__m128i*>(dst + at);              // NOLINT
        const __m128i a = _mm_loadu_si128(s);
        const __m128i b = _mm_loadu_si128(s + 1);  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
        const __m128i c = _mm_loadu_si128(s + 2);  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
        const __m128i e = _mm_loadu_si128(s + 3);  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
        _mm_stream_si128(d, a);
        _mm_stream_si128(d + 1, b);  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
        _mm_stream_si128(d + 2, c);  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
        _mm_stream_si128(d + 3, e);  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
    }
    std::memcpy(dst + at, src + at, n - at);
    // Streaming stores are weakly ordered: all of them visible before the copy is reported done.
    _mm_sfence();
#else
    std::memcpy(dst, src, n);
#endif
}

ParallelCopy::ParallelCopy(unsigned threads)
{
    for (unsigned i = 1; i < std::max(1U, threads); ++i) {
        workers_.emplace_back([this, i] { work(i); });
    }
}

ParallelCopy::~ParallelCopy()
{
    stop_.store(true);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : workers_) {
        t.join();
    }
}

void ParallelCopy::copySlice(unsigned slice) const
{
    const std::size_t at = slice * slice_;
    if (at < bytes_) {
        copyToStaging(dst_ + at, src_ + at, std::min(slice_, bytes_ - at));  // NOLINT
    }
}

void ParallelCopy::copy(void* dst, const void* src, std::size_t n)
{
    if (workers_.empty() || n < 2 * kMinSlice) {
        copyToStaging(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
        return;
    }
    dst_ = static_cast<std::byte*>(dst);
    src_ = static_cast<const std::byte*>(src);
    bytes_ = n;
    // Whole pages, so no two threads fault in the same page of the mapping.
    const std::size_t perThread = (n + threads() - 1) / threads();
    slice_ = std::max(kMinSlice, (perThread + kPage - 1) / kPage * kPage);
    running_.store(static_cast<std::uint32_t>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    copySlice(0);
    for (std::uint32_t left = running_.load(std::memory_order_acquire); left != 0;
         left = running_.load(std::memory_order_acquire)) {
        running_.wait(left, std::memory_order_acquire);
    }
}

void ParallelCopy::work(unsigned slice)
{
    std::uint32_t seen = 0;
    for (;;) {
        generation_.wait(seen, std::memory_order_acquire);
        seen = generation_.load(std::memory_order_acquire);
        if (stop_.load()) {
            return;
        }
        copySlice(slice);
        if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            running_.notify_one();
        }
    }
}

}  // namespace ckpt::device
