// The CUDA engine's work: storages copied from the mapped file into device allocations through
// pinned staging buffers, each filled by several host threads, on two streams, with no LibTorch
// (only the driver, opened at run time).
#pragma once

#include "checkpoint/checkpoint.h"
#include "device/cuda_driver.h"
#include "device/gpu_map.h"
#include "device/load_selection.h"
#include "device/nvml.h"
#include "device/torch_allocator.h"
#include "host_copy.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::device {

using EventSink = std::function<void(const nlohmann::json&)>;

// Where one storage goes: a CUDA ordinal, or -1 for host memory (torch.load's `cpu`).
struct Placement {
    std::uint32_t selected = 0;  // index into LoadSelection::storages
    int device = -1;
};

class CudaLoad {
public:
    // `allocator`: the PyTorch allocator settings the torch.load prediction models
    // (TorchAllocatorConfig::fromEnvironment() in the engine).
    CudaLoad(const CudaDriver& cu, std::shared_ptr<const Nvml> nvml, const Checkpoint& ck, const LoadSelection& sel,
             EventSink sink, TorchAllocatorConfig allocator = {},
             StagingSettings staging = StagingSettings::fromEnvironment());
    CudaLoad(const CudaLoad&) = delete;
    CudaLoad& operator=(const CudaLoad&) = delete;
    ~CudaLoad();  // frees every allocation and releases every context

    // Retains the primary context of `ordinal` (as torch does; creating nothing on any other GPU)
    // and measures what it took. The first call names the device the load reports on.
    Expected<void> openContext(int ordinal);
    // Allocates and copies each placed storage (host placements are only counted), emitting
    // progress. Out of memory stops at the first storage that does not fit (OutOfMemory, with what
    // was needed, what was free and what the context took); everything is freed by the destructor.
    Expected<void> load(const std::vector<Placement>& placements);
    // Copies every device storage back and hashes it: one storage_check event each.
    Expected<void> verify();

    [[nodiscard]] nlohmann::json startEvent() const;
    [[nodiscard]] nlohmann::json resultEvent() const;
    // Bytes placed per device ("cuda:0", "cpu").
    [[nodiscard]] std::map<std::string, std::uint64_t> bytesByDevice() const;
    // Peak of this process on `ordinal` while it held everything, and how it was measured:
    //   "nvml-process"       NVML's figure for this process (its PID is in NVML's list);
    //   "driver-meminfo"     the context, plus the driver's free memory seen fall since the context
    //                        existed, when that fall agrees with what this process allocated;
    //   "engine-allocations" the context plus this process's own allocations, when the device moved
    //                        by more than that (another process allocated or freed meanwhile);
    // with `note` saying what was doubtful, if anything.
    struct Peak {
        std::uint64_t bytes = 0;
        std::string source;
        std::string note;
    };
    [[nodiscard]] Peak peakOn(int ordinal) const;
    // The UUIDs of every device this process made a context on ("cuda:1" -> "GPU-...").
    [[nodiscard]] std::map<std::string, std::string> touchedUuids() const;
    // What each context took and how it was measured ("cuda:1" -> {bytes, "nvml-process"}).
    struct Context {
        std::uint64_t bytes = 0;
        std::string source;  // "nvml-process", "nvml-device" or "unknown"
    };
    [[nodiscard]] std::map<std::string, Context> contexts() const;
    // What torch's caching allocator would reserve on each device for the storages placed there, in
    // the order they were placed ("cuda:0" -> bytes): one rank's torch.load in a replay.
    [[nodiscard]] std::map<std::string, std::uint64_t> torchReservedByDevice() const;
    // Nothing placed has left since load(); the storages placed so far, by device (for an OOM
    // mid-way: how far this process got).
    [[nodiscard]] std::uint64_t bytesPlaced() const;

private:
    struct DeviceState {
        cuda::Context context = nullptr;
        GpuIdentity id;  // UUID (MIG- for a MIG instance), bus id, how NVML reaches it
        std::uint64_t total = 0;
        std::uint64_t contextBytes = 0;
        // "nvml-process" (our PID's row), "nvml-device" (the device's use before and after the
        // context: right unless another process moved meanwhile) or "unknown" (no NVML for it).
        std::string contextSource = "unknown";
        // NVML lists processes on the device but never this one: a container's PID namespace
        // (NVML reports host PIDs) or a driver that hides them.
        bool pidHidden = false;
        std::string blind;                   // why NVML gives no figure for this process here, or ""
        std::uint64_t freeAfterContext = 0;  // cuMemGetInfo once the context existed
        std::uint64_t lowestFree = 0;
        std::uint64_t allocated = 0;  // what this process asked cuMemAlloc for here
        // What the driver takes for it (driverBytes()): allocations of 2 MiB or more in whole 2 MiB
        // pages, smaller ones packed together into 2 MiB pages, each 512-byte aligned.
        std::uint64_t smallBytes = 0;
        std::uint64_t largeBytes = 0;
        [[nodiscard]] std::uint64_t driverBytes() const;
    };
    struct Allocation {
        std::uint32_t selected;
        int device;
        cuda::DevicePtr ptr;
    };

    Expected<void> use(int ordinal);
    Expected<void> allocateAndCopy(const Placement& p, std::uint64_t& done);
    Expected<void> copy(cuda::DevicePtr dst, StorageIndex storage, std::uint64_t nbytes, std::uint64_t& done);
    Expected<void> stageBuffers();
    Expected<void> nextBuffer();
    // NVML's figure for this process on the device, or none (no NVML, or our PID not listed).
    [[nodiscard]] std::optional<std::uint64_t> processBytes(const DeviceState& d) const;
    [[nodiscard]] std::optional<std::uint64_t> deviceUsed(const DeviceState& d) const;  // NVML, whole device
    // Why processBytes has no figure for the device (sets d.pidHidden for a PID namespace).
    [[nodiscard]] std::string whyNoProcessFigure(DeviceState& d) const;
    void progress(std::uint64_t done, bool force);
    [[nodiscard]] double elapsed() const;  // since load() began, up to now while it runs
    [[nodiscard]] TorchAllocatorPeak torchPrediction() const;

    const CudaDriver& cu_;
    std::shared_ptr<const Nvml> nvml_;
    GpuMap gpus_;
    const Checkpoint& ck_;
    const LoadSelection& sel_;
    EventSink sink_;
    TorchAllocatorConfig allocatorConfig_;
    std::map<int, DeviceState> devices_;
    int primary_ = -1;
    int current_ = -1;
    std::vector<Allocation> allocations_;
    std::uint64_t hostBytes_ = 0;
    StagingSettings settings_;
    ParallelCopy fill_;
    std::vector<void*> staging_;
    std::vector<cuda::Event> events_;
    std::vector<cuda::Stream> streams_;
    std::size_t buffer_ = 0;      // the ring's buffer being filled
    std::size_t bufferUsed_ = 0;  // its bytes already taken
    double seconds_ = 0;
    std::optional<std::chrono::steady_clock::time_point> loadStart_;  // set while load() runs
    std::uint64_t bytes_ = 0;
    std::uint64_t lastEventNs_ = 0;
    std::uint64_t verified_ = 0;  // bytes hashed by verify() so far
};

}  // namespace ckpt::device
