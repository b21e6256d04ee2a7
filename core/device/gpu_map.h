// One identity for a GPU everywhere: CUDA's ordinal in this process, NVML's index, the UUID and
// the PCI bus id, tied together by UUID (cuDeviceGetUuid against NVML's), or by bus id where a
// driver gives no UUID.
//
// Why it exists: `cuda:N` must mean what torch.device('cuda:N') means in the same environment, and
// that is CUDA's numbering, which CUDA_VISIBLE_DEVICES (Slurm sets it for every job; by index,
// by UUID, or MIG-...), CUDA_DEVICE_ORDER (FASTEST_FIRST by default, so mixed GPUs are not in PCI
// order) and MIG all change. NVML, which watches memory, numbers every GPU of the machine in PCI
// order and sees MIG instances only under their parent. The CUDA driver itself is asked (cuInit
// creates no context and allocates nothing on any GPU), so the rules are the driver's, not a copy.
#pragma once

#include "device/cuda_driver.h"
#include "device/nvml.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::device {

struct GpuIdentity {
    std::string uuid;      // "GPU-..." or "MIG-..."
    std::string pciBusId;  // "0000:65:00.0"; a MIG instance has its GPU's
    std::string name;
    std::uint64_t totalBytes = 0;
    std::optional<int> cudaOrdinal;  // CUDA's in this process; none when CUDA does not see it here
    std::optional<NvmlDevice> nvml;  // how NVML reaches it; none when NVML does not list it
    [[nodiscard]] bool isMig() const { return uuid.starts_with("MIG-"); }
    // "cuda:N" when CUDA sees it here, else "nvml:I" (or "nvml:I/mig:J"): the one label the CLI, the
    // window, the chart and the JSON use.
    [[nodiscard]] std::string label() const;
};

class GpuMap {
public:
    // Either may be null (no driver, no NVML). The devices CUDA sees come first, in CUDA's order;
    // then what NVML lists that CUDA does not see here (other jobs' GPUs, in Slurm's terms).
    static GpuMap build(const CudaDriver* cuda, const Nvml* nvml);
    // Loads what it can: the CUDA driver (CKPTSCOPE_CUDA_LIBRARY or libcuda.so.1) and `nvml` if
    // given, else NVML too. `note` says why CUDA's view is missing, if it is.
    static GpuMap query(const std::shared_ptr<const Nvml>& nvml);

    [[nodiscard]] const std::vector<GpuIdentity>& gpus() const { return gpus_; }
    // What torch.cuda.device_count() says in this process.
    [[nodiscard]] int cudaCount() const { return cudaCount_; }
    [[nodiscard]] const GpuIdentity* byOrdinal(int ordinal) const;
    // By UUID ("GPU-..." / "MIG-..." / "MIG-GPU-.../gi/ci"; compared by uuidKey).
    [[nodiscard]] const GpuIdentity* byUuid(const std::string& uuid) const;
    [[nodiscard]] const GpuIdentity* byLabel(const std::string& label) const;
    // Why CUDA's numbering is unknown ("no NVIDIA driver found ..."), or "".
    [[nodiscard]] const std::string& cudaNote() const { return cudaNote_; }
    // GPUs NVML counts but cannot open here, left out of gpus() (Inventory::unreachableNote), or "".
    [[nodiscard]] const std::string& unreachableNote() const { return unreachableNote_; }

private:
    std::vector<GpuIdentity> gpus_;
    int cudaCount_ = 0;
    std::string cudaNote_;
    std::string unreachableNote_;
};

// "GPU-d1a7cf8f-b447-0058-c941-3b81d2a837af" from cuDeviceGetUuid's 16 bytes, with `prefix`.
[[nodiscard]] std::string uuidText(const cuda::Uuid& u, const char* prefix = "GPU-");
// What identifies a device in any of its UUID's forms, lower case ("" when it has none): the 32 hex
// digits of "GPU-..." and "MIG-..." (what cuDeviceGetUuid_v2 and NVML give), and "<hex>/<gi>/<ci>" for
// a MIG device named as drivers before R470 named it, "MIG-GPU-<its GPU's uuid>/<gi>/<ci>".
[[nodiscard]] std::string uuidKey(const std::string& uuid);
// "0000:65:00.0" from CUDA's or NVML's form (domain in 4 or 8 digits), lower case.
[[nodiscard]] std::string normalPciBusId(const std::string& busId);

}  // namespace ckpt::device
