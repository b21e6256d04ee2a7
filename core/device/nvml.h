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
    bool mps = false;             // an MPS client (listed by NVML's MPS calls, not as a compute process)
};

struct GpuMemory {
    std::uint64_t totalBytes = 0;
    std::uint64_t usedBytes = 0;
    std::uint64_t freeBytes = 0;
};

// A device as NVML addresses it: a physical GPU by its NVML index (PCI bus order), or one MIG
// instance of it (`mig` >= 0: NVML's MIG device index under that GPU). Converts from a bare index,
// so a physical GPU is still named by its number.
struct NvmlDevice {
    int index = -1;
    int mig = -1;
    NvmlDevice(int i, int m = -1) : index(i), mig(m) {}
    [[nodiscard]] bool isMig() const { return mig >= 0; }
    friend bool operator==(const NvmlDevice&, const NvmlDevice&) = default;
};

// One row of the inventory. The CPU is always row 0 (id "cpu", index -1): total is MemTotal and
// used is MemTotal - MemAvailable from /proc/meminfo. GPUs follow as GpuMap lists them
// (device/gpu_map.h): those CUDA sees in this process first, in CUDA's order with the id "cuda:<N>"
// that torch.device('cuda:N') means here, then those it does not see ("nvml:<i>"), which cannot be
// loaded onto from here.
struct DeviceInfo {
    std::string id;        // "cpu", "cuda:0", ..., "nvml:3"
    int index = -1;        // NVML index (of the parent GPU for a MIG instance), -1 for the CPU or unknown
    int mig = -1;          // NVML's MIG device index under `index`, or -1
    int cudaOrdinal = -1;  // CUDA's ordinal in this process, -1 when CUDA does not see it here
    std::string pciBusId;  // "0000:65:00.0" (empty for the CPU or unknown)
    std::string name;      // "NVIDIA H100 80GB HBM3", or the CPU model name
    std::string uuid;      // "GPU-..." or "MIG-..." (empty for the CPU)
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
    // GPUs NVML counts but cannot open here (Slurm's cgroups deny another job's device nodes), which
    // are left out of `devices`: "NVML counts 3 GPUs; GPU 1 cannot be opened here (Insufficient
    // Permissions): another job's under a scheduler's cgroups", or "".
    std::string unreachableNote;
    // Why no GPU has a CUDA ordinal ("no NVIDIA driver found ..."; cuInit's "no CUDA-capable device"
    // when CUDA_VISIBLE_DEVICES hides them all), or "".
    std::string cudaNote;
    [[nodiscard]] int gpuCount() const { return static_cast<int>(devices.size()) - 1; }
    // The GPUs CUDA sees in this process: what torch.cuda.device_count() says here.
    [[nodiscard]] int cudaCount() const;
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
    [[nodiscard]] Expected<std::string> name(NvmlDevice d) const;
    [[nodiscard]] Expected<std::string> uuid(NvmlDevice d) const;  // "GPU-..." or "MIG-..."
    // "0000:65:00.0" (domain in 4 digits, as CUDA writes it; a MIG instance has its GPU's).
    [[nodiscard]] Expected<std::string> pciBusId(NvmlDevice d) const;
    [[nodiscard]] Expected<GpuMemory> memory(NvmlDevice d) const;
    // Compute processes and MPS clients (GpuProcess::mps): nvmlDeviceGetRunningProcessDetailList,
    // whose entries have one versioned layout, where the driver supports it; else the newest of
    // nvmlDevice{Compute,MPSCompute}RunningProcesses{_v3,_v2,}, whose entry size drivers have
    // changed without a new name, measured on every call (nvml.cpp). PIDs are as the driver sees
    // them: the host's, which differ from ours inside a container's PID namespace.
    [[nodiscard]] Expected<std::vector<GpuProcess>> processes(NvmlDevice d) const;
    // Whether NVML can open GPU `index` here; the error says why not ("NVML cannot open GPU 1:
    // Insufficient Permissions": another job's GPU under a scheduler's cgroups).
    [[nodiscard]] Expected<void> reachable(int index) const;
    // The MIG instances of a physical GPU in MIG mode (their NVML MIG indices), else none.
    [[nodiscard]] std::vector<int> migDevices(int index) const;
    [[nodiscard]] std::string driverVersion() const;
    [[nodiscard]] const std::string& libraryPath() const;

    struct Impl;

private:
    explicit Nvml(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// The PIDs this process may have in NVML's process list: getpid(), and the first of NSpid in
// /proc/self/status when it differs (a nested PID namespace whose /proc was mounted outside it shows
// the outer PID there, which is the one NVML reports).
[[nodiscard]] std::vector<std::uint32_t> selfPidsAsNvmlSees();

// System RAM from /proc/meminfo: total = MemTotal, used = MemTotal - MemAvailable.
[[nodiscard]] GpuMemory systemMemory();

// The CPU row alone (from /proc/meminfo and /proc/cpuinfo).
[[nodiscard]] DeviceInfo cpuInfo();

// Everything at once: the CPU, then every GPU (GpuMap's order and ids). Never fails: without NVML
// or a GPU the inventory holds the CPU and gpuNote says why. Pass a loaded Nvml to avoid loading it
// again.
[[nodiscard]] Inventory queryInventory(const std::shared_ptr<const Nvml>& given = nullptr);

}  // namespace ckpt::device
