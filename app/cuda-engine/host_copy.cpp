#include "host_copy.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace ckpt::device {
namespace {

constexpr std::size_t kKiB = 1024;
// Below this a slice is not worth a thread's wake-up (~10 us against ~25 us of copying).
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
    // Eight threads fill a buffer faster than a PCIe 5 link drains it; more only contend.
    const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
    StagingSettings s;
    s.threads = static_cast<unsigned>(fromEnv("CKPTSCOPE_CUDA_THREADS", std::min(cores, 8U), 1, 64));
    // Four 32 MiB buffers: 128 MiB pinned, 256 MiB at most.
    s.bufferBytes = fromEnv("CKPTSCOPE_CUDA_BUFFER_KIB", 32 * kKiB, 64, 64 * kKiB) * kKiB;
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
    {
        const std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) {
        t.join();
    }
}

void ParallelCopy::copySlice(unsigned slice) const
{
    const std::size_t at = slice * slice_;
    if (at < bytes_) {
        std::memcpy(dst_ + at, src_ + at, std::min(slice_, bytes_ - at));
    }
}

void ParallelCopy::copy(void* dst, const void* src, std::size_t n)
{
    const std::size_t perThread = (n + threads() - 1) / threads();
    if (workers_.empty() || n < 2 * kMinSlice) {
        std::memcpy(dst, src, n);
        return;
    }
    {
        const std::lock_guard lock(mutex_);
        dst_ = static_cast<std::byte*>(dst);
        src_ = static_cast<const std::byte*>(src);
        bytes_ = n;
        // Whole pages, so no two threads fault in the same page of the mapping.
        slice_ = std::max(kMinSlice, (perThread + kPage - 1) / kPage * kPage);
        running_ = static_cast<unsigned>(workers_.size());
        ++generation_;
    }
    wake_.notify_all();
    copySlice(0);
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [this] { return running_ == 0; });
}

void ParallelCopy::work(unsigned slice)
{
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) {
            return;
        }
        seen = generation_;
        // The fields stay put until every worker has reported: copy() waits for running_ == 0.
        lock.unlock();
        copySlice(slice);
        lock.lock();
        if (--running_ == 0) {
            finished_.notify_one();
        }
    }
}

}  // namespace ckpt::device
