// GPU inventory through NVML, loaded with dlopen at run time so the app starts on machines without
// an NVIDIA driver. NVML reads the driver's bookkeeping: listing and watching GPUs never creates a
// CUDA context on them, so the watcher itself moves no GPU's memory.
//
// Which library: env CKPTSCOPE_NVML_LIBRARY if set (tests point it at a missing or fake file to
// exercise the no-driver path), else "libnvidia-ml.so.1".
#pragma once

#include "util/error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ckpt::device {

struct GpuProcess {
    std::uint32_t pid = 0;
    std::uint64_t usedBytes = 0;  // this process's memory on the GPU (0 when the driver hides it)
};

struct GpuMemory {
    std::uint64_t totalBytes = 0;
    std::uint64_t usedBytes = 0;
    std::uint64_t freeBytes = 0;
};

// One row of the inventory. The CPU is always row 0 (id "cpu", index -1): total is MemTotal and
// used is MemTotal - MemAvailable from /proc/meminfo. GPUs follow in NVML order with id "cuda:<i>".
// NVML order is PCI bus order; CUDA's default order (and CUDA_VISIBLE_DEVICES) may differ, which
// is why the test-load matches the chosen device by UUID when the helper reports one.
struct DeviceInfo {
    std::string id;    // "cpu", "cuda:0", ...
    int index = -1;    // NVML index, -1 for the CPU
    std::string name;  // "NVIDIA H100 80GB HBM3", or the CPU model name
    std::string uuid;  // "GPU-..." (empty for the CPU)
    std::uint64_t totalBytes = 0;
    std::uint64_t usedBytes = 0;
    std::vector<GpuProcess> processes;  // compute processes on this GPU (empty for the CPU)
};

struct Inventory {
    std::vector<DeviceInfo> devices;  // devices[0] is the CPU
    // One line saying why no GPU is listed ("NVML not available: libnvidia-ml.so.1: cannot open
    // shared object file ..."; "NVML found no GPU"); empty when GPUs are listed.
    std::string gpuNote;
    std::string driverVersion;  // empty when unknown
    [[nodiscard]] int gpuCount() const { return static_cast<int>(devices.size()) - 1; }
};

// The loaded NVML library. Thread-safe for queries (NVML is). Unloaded (nvmlShutdown + dlclose)
// when the last shared_ptr goes.
class Nvml {
public:
    // dlopen + nvmlInit_v2. The error (code DeviceUnavailable) is the one-line reason.
    static Expected<std::shared_ptr<const Nvml>> load();

    Nvml(const Nvml&) = delete;
    Nvml& operator=(const Nvml&) = delete;
    ~Nvml();

    [[nodiscard]] int deviceCount() const;
    [[nodiscard]] Expected<std::string> name(int index) const;
    [[nodiscard]] Expected<std::string> uuid(int index) const;
    [[nodiscard]] Expected<GpuMemory> memory(int index) const;
    // Compute processes (nvmlDeviceGetComputeRunningProcesses, v3 then v2 then v1 symbol).
    [[nodiscard]] Expected<std::vector<GpuProcess>> processes(int index) const;
    [[nodiscard]] std::string driverVersion() const;
    [[nodiscard]] const std::string& libraryPath() const;

    struct Impl;

private:
    explicit Nvml(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// System RAM from /proc/meminfo: total = MemTotal, used = MemTotal - MemAvailable.
[[nodiscard]] GpuMemory systemMemory();

// The CPU row alone (from /proc/meminfo and /proc/cpuinfo).
[[nodiscard]] DeviceInfo cpuInfo();

// Everything at once: the CPU, then every GPU NVML lists. Never fails: without NVML or a GPU the
// inventory holds the CPU and gpuNote says why. Pass a loaded Nvml to avoid loading it again.
[[nodiscard]] Inventory queryInventory(const std::shared_ptr<const Nvml>& given = nullptr);

}  // namespace ckpt::device
