// The host side of the CUDA engine's copy path: filling a pinned staging buffer from the mapped
// file. One thread memcpy'ing from the mapping (faulting its pages in as it goes) moves 5-6 GB/s on
// an H100 host, a tenth of what the PCIe link takes, so each buffer is filled by several threads at
// once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace ckpt::device {

// How the engine stages its copies: CKPTSCOPE_CUDA_THREADS, CKPTSCOPE_CUDA_BUFFER_KIB (64 to
// 262144) and CKPTSCOPE_CUDA_BUFFERS (2 to 16) override the defaults (for the benchmark to compare
// settings in one run); values out of range are clamped.
struct StagingSettings {
    unsigned threads = 1;         // host threads filling a buffer, the calling one included
    std::size_t bufferBytes = 0;  // one pinned staging buffer
    std::size_t buffers = 3;      // pinned buffers in the ring

    [[nodiscard]] static StagingSettings fromEnvironment();
    [[nodiscard]] std::size_t totalBytes() const { return bufferBytes * buffers; }
};

// A fixed pool that splits one copy across its threads and the caller, and returns when every
// slice is done. Copies below half a MiB stay on the caller: waking threads costs more.
class ParallelCopy {
public:
    explicit ParallelCopy(unsigned threads);
    ParallelCopy(const ParallelCopy&) = delete;
    ParallelCopy& operator=(const ParallelCopy&) = delete;
    ~ParallelCopy();

    void copy(void* dst, const void* src, std::size_t n);
    [[nodiscard]] unsigned threads() const { return static_cast<unsigned>(workers_.size()) + 1; }

private:
    void work(unsigned slice);
    void copySlice(unsigned slice) const;

    // A new copy is published by bumping `generation_` (release) after its fields are set; each
    // worker reads them only after seeing the bump, and the caller changes them only once
    // `running_` is back to 0 (every worker done with them).
    std::atomic<std::uint32_t> generation_ = 0;
    std::atomic<std::uint32_t> running_ = 0;
    std::atomic<bool> stop_ = false;
    std::byte* dst_ = nullptr;
    const std::byte* src_ = nullptr;
    std::size_t bytes_ = 0;
    std::size_t slice_ = 0;
    std::vector<std::thread> workers_;
};

}  // namespace ckpt::device
