#include "device/sampler.h"

#include "device/gpu_map.h"

#include <algorithm>
#include <fstream>
#include <unistd.h>

namespace ckpt::device {

namespace {

// Resident set of one process in bytes (0 when it is gone).
std::uint64_t residentBytes(pid_t pid)
{
    std::ifstream statm("/proc/" + std::to_string(pid) + "/statm");
    std::uint64_t size = 0;
    std::uint64_t resident = 0;
    if (!(statm >> size >> resident)) {
        return 0;
    }
    return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

std::uint64_t Timeline::maxRise(std::size_t col) const
{
    if (samples.empty() || col >= devices.size()) {
        return 0;
    }
    const std::uint64_t base = samples.front().usedBytes[col];
    std::uint64_t rise = 0;
    for (const auto& s : samples) {
        if (s.usedBytes[col] > base) {
            rise = std::max(rise, s.usedBytes[col] - base);
        }
    }
    return rise;
}

std::uint64_t Timeline::peak(std::size_t col) const
{
    std::uint64_t p = 0;
    for (const auto& s : samples) {
        if (col < s.usedBytes.size()) {
            p = std::max(p, s.usedBytes[col]);
        }
    }
    return p;
}

int Timeline::column(const std::string& id) const
{
    auto it = std::find(devices.begin(), devices.end(), id);
    return it == devices.end() ? -1 : static_cast<int>(it - devices.begin());
}

Sampler::Sampler(std::shared_ptr<const Nvml> nvml) : nvml_(std::move(nvml)) {}

Sampler::~Sampler()
{
    // stop() throws only what locking or allocating the last sample can; a destructor has no one
    // to tell, and the jthread member still joins on its way out.
    try {
        stop();
    } catch (...) {
    }
}

void Sampler::start(Options options)
{
    stop();
    options_ = std::move(options);
    if (options_.interval.count() <= 0) {
        options_.interval = std::chrono::milliseconds(1);
    }
    // The GPUs a load here can touch are the ones CUDA sees; another job's GPU on a shared node is
    // not watched, so its allocations are never charged to this load.
    const GpuMap map = nvml_ ? GpuMap::query(nvml_) : GpuMap{};
    {
        std::lock_guard lock(mutex_);
        timeline_ = Timeline{};
        timeline_.intervalMs = static_cast<double>(options_.interval.count());
        timeline_.devices.emplace_back("cpu");
        timeline_.uuids.emplace_back();
        timeline_.totalBytes.push_back(systemMemory().totalBytes);
        watched_.clear();
        for (const auto& g : map.gpus()) {
            if (!g.nvml || (map.cudaCount() > 0 && !g.cudaOrdinal)) {
                continue;
            }
            timeline_.devices.push_back(g.label());
            timeline_.uuids.push_back(g.uuid);
            auto mem = nvml_->memory(*g.nvml);
            timeline_.totalBytes.push_back(mem ? mem->totalBytes : g.totalBytes);
            watched_.emplace_back(g.nvml);
        }
        pids_ = {getpid()};
    }
    t0_ = std::chrono::steady_clock::now();
    sampleOnce();
    thread_ = std::jthread([this](std::stop_token stop) {
        auto next = t0_;
        while (!stop.stop_requested()) {
            next += options_.interval;
            // Sleep in short slices so stop() answers quickly even at long intervals.
            while (!stop.stop_requested() && std::chrono::steady_clock::now() < next) {
                auto left = next - std::chrono::steady_clock::now();
                std::this_thread::sleep_for(
                    std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(5)));
            }
            if (stop.stop_requested()) {
                break;
            }
            // A slow NVML call must not make the timeline burst to catch up.
            if (auto now = std::chrono::steady_clock::now(); now > next + options_.interval) {
                next = now;
            }
            sampleOnce();
        }
    });
}

void Sampler::stop()
{
    if (!thread_.joinable()) {
        return;
    }
    thread_.request_stop();
    thread_.join();
    sampleOnce();
}

bool Sampler::running() const
{
    return thread_.joinable();
}

void Sampler::trackPid(pid_t pid)
{
    std::lock_guard lock(mutex_);
    if (std::find(pids_.begin(), pids_.end(), pid) == pids_.end()) {
        pids_.push_back(pid);
    }
}

void Sampler::sampleOnce()
{
    std::vector<pid_t> pids;
    std::size_t columns = 0;
    {
        std::lock_guard lock(mutex_);
        pids = pids_;
        columns = timeline_.devices.size();
    }
    Sample s;
    s.usedBytes.assign(columns, 0);
    s.ownBytes.assign(columns, 0);
    s.usedBytes[0] = systemMemory().usedBytes;
    for (pid_t p : pids) {
        s.ownBytes[0] += residentBytes(p);
    }
    for (std::size_t c = 1; c < columns; ++c) {
        const NvmlDevice gpu = *watched_[c - 1];
        if (auto mem = nvml_->memory(gpu)) {
            s.usedBytes[c] = mem->usedBytes;
        }
        if (auto procs = nvml_->processes(gpu)) {
            for (const auto& p : *procs) {
                if (std::find(pids.begin(), pids.end(), static_cast<pid_t>(p.pid)) != pids.end()) {
                    s.ownBytes[c] += p.usedBytes;
                }
            }
        }
    }
    s.tMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    {
        std::lock_guard lock(mutex_);
        timeline_.samples.push_back(s);
    }
    if (options_.onSample) {
        options_.onSample(s);
    }
}

Timeline Sampler::snapshot(std::size_t from) const
{
    std::lock_guard lock(mutex_);
    Timeline t;
    t.devices = timeline_.devices;
    t.uuids = timeline_.uuids;
    t.totalBytes = timeline_.totalBytes;
    t.intervalMs = timeline_.intervalMs;
    if (from < timeline_.samples.size()) {
        t.samples.assign(timeline_.samples.begin() + static_cast<std::ptrdiff_t>(from), timeline_.samples.end());
    }
    return t;
}

}  // namespace ckpt::device
