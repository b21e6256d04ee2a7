// The CUDA engine's work: storages copied from the mapped file into device allocations through
// pinned staging buffers, each filled by several host threads, on two streams, with no LibTorch
// (only the driver, opened at run time).
#pragma once

#include "checkpoint/checkpoint.h"
#include "device/cuda_driver.h"
#include "device/load_selection.h"
#include "device/nvml.h"
#include "host_copy.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
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
    CudaLoad(const CudaDriver& cu, std::shared_ptr<const Nvml> nvml, const Checkpoint& ck, const LoadSelection& sel,
             EventSink sink, StagingSettings staging = StagingSettings::fromEnvironment());
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
    // Peak of this process on `ordinal` while it held everything: NVML's per-process figure, else
    // the driver's free memory seen fall since the context existed, plus the context.
    [[nodiscard]] std::pair<std::uint64_t, std::string> peakOn(int ordinal) const;

private:
    struct DeviceState {
        cuda::Context context = nullptr;
        std::string uuid;
        std::string name;
        std::uint64_t total = 0;
        std::uint64_t contextBytes = 0;
        std::uint64_t freeAfterContext = 0;  // cuMemGetInfo once the context existed
        std::uint64_t lowestFree = 0;
        int nvmlIndex = -1;
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
    [[nodiscard]] std::uint64_t processBytes(int ordinal) const;  // NVML, 0 when unknown
    void progress(std::uint64_t done, bool force);

    const CudaDriver& cu_;
    std::shared_ptr<const Nvml> nvml_;
    const Checkpoint& ck_;
    const LoadSelection& sel_;
    EventSink sink_;
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
    std::uint64_t bytes_ = 0;
    std::uint64_t lastEventNs_ = 0;
};

}  // namespace ckpt::device
