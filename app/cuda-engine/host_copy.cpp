#include "host_copy.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

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
    // Measured on a 16-core H100 host (bench/RESULTS.md): filling from the mapping is what limits
    // the copy, and it scales to all 16 cores (6 GB/s on one, 48 on 16), so every core takes part.
    const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
    StagingSettings s;
    s.threads = static_cast<unsigned>(fromEnv("CKPTSCOPE_CUDA_THREADS", std::min(cores, 16U), 1, 64));
    // Three 32 MiB buffers (96 MiB pinned): one filling, two queued for the link. On the lent H100
    // (2026-11-27, scripts/gpu-proof.sh's sweep, bench/RESULTS.md) 3 x 32 MiB moved 4 GiB at
    // 40.9-44.0 GB/s against 37.0-37.2 for 3 x 64 MiB; deeper rings (4, 6, 8) and 128 MiB buffers
    // were slower still: a smaller buffer starts the link sooner and stays warmer in the caches.
    s.bufferBytes = fromEnv("CKPTSCOPE_CUDA_BUFFER_KIB", 32 * kKiB, 64, 256 * kKiB) * kKiB;
    // How deep the ring is: scripts/gpu-proof.sh sweeps it against the buffer size on the card.
    s.buffers = fromEnv("CKPTSCOPE_CUDA_BUFFERS", s.buffers, 2, 16);
    return s;
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
        std::memcpy(dst_ + at, src_ + at, std::min(slice_, bytes_ - at));  // NOLINT
    }
}

void ParallelCopy::copy(void* dst, const void* src, std::size_t n)
{
    if (workers_.empty() || n < 2 * kMinSlice) {
        std::memcpy(dst, src, n);
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
