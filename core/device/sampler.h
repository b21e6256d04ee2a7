// A memory timeline: a thread that samples every GPU's used memory (NVML) and the system RAM at a
// fixed interval, plus how much of it belongs to a set of tracked processes (this process and the
// test-load helper). Qt-free; the window either polls snapshot() from a timer or takes the
// per-sample callback (which runs on the sampler thread: post it to the GUI thread yourself).
#pragma once

#include "device/nvml.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace ckpt::device {

struct Sample {
    double tMs = 0;                        // since Sampler::start
    std::vector<std::uint64_t> usedBytes;  // per column of Timeline::devices: whole-device use
    std::vector<std::uint64_t> ownBytes;   // per column: the tracked processes' share (GPU: NVML
                                           // per-process use; CPU: their resident set)
};

struct Timeline {
    // Column ids: "cpu", then each GPU CUDA sees in this process as "cuda:<ordinal>" in CUDA's order
    // (GpuMap); only when CUDA's view is unknown, NVML's GPUs as "nvml:<index>".
    std::vector<std::string> devices;
    std::vector<std::string> uuids;         // per column ("" for the CPU)
    std::vector<std::uint64_t> totalBytes;  // per column
    double intervalMs = 0;
    std::vector<Sample> samples;

    // Largest rise above the first sample in one column (0 when it never rose); -1 column = none.
    [[nodiscard]] std::uint64_t maxRise(std::size_t column) const;
    [[nodiscard]] std::uint64_t peak(std::size_t column) const;
    [[nodiscard]] int column(const std::string& id) const;  // -1 when absent
};

class Sampler {
public:
    struct Options {
        std::chrono::milliseconds interval{20};
        std::function<void(const Sample&)> onSample;  // optional; called on the sampler thread
    };

    // nvml may be null: the timeline then has the CPU column only.
    explicit Sampler(std::shared_ptr<const Nvml> nvml);
    Sampler(const Sampler&) = delete;
    Sampler& operator=(const Sampler&) = delete;
    ~Sampler();  // stops

    // Starts a fresh timeline; takes the first sample before returning (the baseline).
    void start(Options options);
    // Takes one last sample and joins the thread. Idempotent.
    void stop();
    [[nodiscard]] bool running() const;

    // Processes whose share goes into Sample::ownBytes (this process is always tracked). Safe to
    // call while running, e.g. right after spawning a helper.
    void trackPid(pid_t pid);

    // A copy of the timeline so far (all of it, or the samples from index `from` on).
    [[nodiscard]] Timeline snapshot(std::size_t from = 0) const;

private:
    void sampleOnce();
    std::shared_ptr<const Nvml> nvml_;
    std::vector<std::optional<NvmlDevice>> watched_;  // per column after the CPU: how NVML reaches it
    Options options_;
    mutable std::mutex mutex_;
    Timeline timeline_;
    std::vector<pid_t> pids_;
    std::chrono::steady_clock::time_point t0_;
    std::jthread thread_;
};

}  // namespace ckpt::device
