#include "device/gpu_map.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace ckpt::device {
namespace {

// What NVML lists as one device CUDA could use: a physical GPU, or each MIG instance of a GPU in MIG
// mode (the GPU itself then runs nothing). A GPU NVML counts but cannot open (another job's, under
// Slurm's cgroups) is left out and said in `unreachable`.
std::vector<GpuIdentity> nvmlDevices(const Nvml& nvml, std::string& unreachable)
{
    std::vector<GpuIdentity> out;
    std::string closed;
    auto add = [&](NvmlDevice d) {
        GpuIdentity g;
        g.nvml = d;
        if (auto u = nvml.uuid(d)) {
            g.uuid = *u;
        }
        if (auto p = nvml.pciBusId(d)) {
            g.pciBusId = normalPciBusId(*p);
        }
        if (auto n = nvml.name(d)) {
            g.name = *n;
        }
        if (auto m = nvml.memory(d)) {
            g.totalBytes = m->totalBytes;
        }
        out.push_back(std::move(g));
    };
    int left = 0;
    for (int i = 0; i < nvml.deviceCount(); ++i) {
        if (auto open = nvml.reachable(i); !open) {
            closed += (closed.empty() ? "" : "; ") + open.error().message;
            ++left;
            continue;
        }
        const auto migs = nvml.migDevices(i);
        if (migs.empty()) {
            add(i);
        }
        for (const int m : migs) {
            add({i, m});
        }
    }
    if (left > 0) {
        unreachable = "NVML counts " + std::to_string(nvml.deviceCount()) + " GPUs; " + std::to_string(left) +
                      (left == 1 ? " cannot be opened here and is" : " cannot be opened here and are") + " left out (" +
                      closed + "): another job's, under a scheduler's cgroups";
    }
    return out;
}

// "1f2e.../1/0" -> "1f2e...": the GPU of a MIG device named the pre-R470 way, else "".
std::string oldMigParent(const std::string& key)
{
    const auto slash = key.find('/');
    return slash == std::string::npos ? std::string() : key.substr(0, slash);
}

// The MIG device CUDA_VISIBLE_DEVICES names the pre-R470 way ("MIG-GPU-<uuid>/<gi>/<ci>"), by key.
std::vector<std::string> visibleOldMigKeys()
{
    std::vector<std::string> out;
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    std::string list = v ? v : "";
    for (std::size_t at = 0; at <= list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        if (const std::string key = uuidKey(list.substr(at, comma - at)); !oldMigParent(key).empty()) {
            out.push_back(key);
        }
        at = comma + 1;
    }
    return out;
}

GpuIdentity cudaDevice(const CudaDriver& cu, int ordinal)
{
    GpuIdentity g;
    g.cudaOrdinal = ordinal;
    cuda::Device dev = 0;
    if (cu.cuDeviceGet(&dev, ordinal) != cuda::kSuccess) {
        return g;
    }
    std::array<char, 256> name{};
    if (cu.cuDeviceGetName(name.data(), static_cast<int>(name.size()), dev) == cuda::kSuccess) {
        g.name = name.data();
    }
    cuda::Uuid uuid{};
    if (cu.cuDeviceGetUuid(&uuid, dev) == cuda::kSuccess) {
        g.uuid = uuidText(uuid);
    }
    std::array<char, 64> bus{};
    if (cu.cuDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), dev) == cuda::kSuccess) {
        g.pciBusId = normalPciBusId(bus.data());
    }
    std::size_t total = 0;
    if (cu.cuDeviceTotalMem(&total, dev) == cuda::kSuccess) {
        g.totalBytes = total;
    }
    return g;
}

}  // namespace

std::string uuidText(const cuda::Uuid& u, const char* prefix)
{
    std::array<char, 48> out{};
    const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
    std::snprintf(out.data(), out.size(), "%s%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                  prefix, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                  b[15]);
    return out.data();
}

std::string uuidKey(const std::string& uuid)
{
    // Before R470 a MIG device had no UUID of its own: "MIG-GPU-<its GPU's uuid>/<gi>/<ci>".
    if (uuid.starts_with("MIG-GPU-")) {
        const auto slash = uuid.find('/');
        const std::string gpu = slash == std::string::npos ? std::string() : uuidKey(uuid.substr(4, slash - 4));
        return gpu.empty() ? std::string() : gpu + uuid.substr(slash);
    }
    // "GPU-" and "MIG-" forms end in the 32 hex digits.
    std::string hex;
    for (auto it = uuid.rbegin(); it != uuid.rend() && hex.size() < 32; ++it) {
        if (std::isxdigit(static_cast<unsigned char>(*it))) {
            hex.insert(hex.begin(), static_cast<char>(std::tolower(static_cast<unsigned char>(*it))));
        } else if (*it != '-') {
            break;
        }
    }
    return hex.size() == 32 ? hex : std::string();
}

std::string normalPciBusId(const std::string& busId)
{
    unsigned domain = 0;
    unsigned bus = 0;
    unsigned device = 0;
    unsigned function = 0;
    if (std::sscanf(busId.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) {  // NOLINT
        return busId;
    }
    std::array<char, 32> out{};
    std::snprintf(out.data(), out.size(), "%04x:%02x:%02x.%x", domain, bus, device, function);  // NOLINT
    return out.data();
}

std::string GpuIdentity::label() const
{
    if (cudaOrdinal) {
        return "cuda:" + std::to_string(*cudaOrdinal);
    }
    if (nvml) {
        return "nvml:" + std::to_string(nvml->index) + (nvml->isMig() ? "/mig:" + std::to_string(nvml->mig) : "");
    }
    return uuid;
}

GpuMap GpuMap::build(const CudaDriver* cuda, const Nvml* nvml)
{
    GpuMap map;
    std::vector<GpuIdentity> listed = nvml ? nvmlDevices(*nvml, map.unreachableNote_) : std::vector<GpuIdentity>{};
    std::vector<bool> taken(listed.size(), false);
    const auto namedOldMigs = visibleOldMigKeys();
    auto match = [&](const GpuIdentity& g) -> int {
        const std::string hex = uuidKey(g.uuid);
        for (std::size_t i = 0; i < listed.size(); ++i) {
            if (!taken[i] && !hex.empty() && uuidKey(listed[i].uuid) == hex) {
                return static_cast<int>(i);
            }
        }
        // Before R470 CUDA answers a MIG device with its GPU's UUID (cuDeviceGetUuid has no _v2) and
        // enumerates one MIG device: the one CUDA_VISIBLE_DEVICES names, else the GPU's first.
        int first = -1;
        for (std::size_t i = 0; i < listed.size(); ++i) {
            const std::string key = uuidKey(listed[i].uuid);
            if (taken[i] || hex.empty() || oldMigParent(key) != hex) {
                continue;
            }
            if (std::find(namedOldMigs.begin(), namedOldMigs.end(), key) != namedOldMigs.end()) {
                return static_cast<int>(i);
            }
            first = first < 0 ? static_cast<int>(i) : first;
        }
        if (first >= 0 && namedOldMigs.empty()) {
            return first;
        }
        // A driver without UUIDs: the bus id names a whole GPU, never one MIG instance of several.
        for (std::size_t i = 0; i < listed.size(); ++i) {
            if (!taken[i] && hex.empty() && !g.pciBusId.empty() && listed[i].pciBusId == g.pciBusId &&
                !listed[i].isMig()) {
                return static_cast<int>(i);
            }
        }
        return -1;
    };
    if (cuda) {
        map.cudaCount_ = cuda->deviceCount();
        for (int ordinal = 0; ordinal < map.cudaCount_; ++ordinal) {
            GpuIdentity g = cudaDevice(*cuda, ordinal);
            if (const int i = match(g); i >= 0) {
                taken[static_cast<std::size_t>(i)] = true;
                g.nvml = listed[static_cast<std::size_t>(i)].nvml;
                g.uuid = listed[static_cast<std::size_t>(i)].uuid;  // NVML knows whether it is a MIG instance
                if (g.pciBusId.empty()) {
                    g.pciBusId = listed[static_cast<std::size_t>(i)].pciBusId;
                }
            }
            map.gpus_.push_back(std::move(g));
        }
    }
    for (std::size_t i = 0; i < listed.size(); ++i) {
        if (!taken[i]) {
            map.gpus_.push_back(std::move(listed[i]));
        }
    }
    return map;
}

GpuMap GpuMap::query(const std::shared_ptr<const Nvml>& nvml)
{
    std::shared_ptr<const Nvml> watched = nvml;
    if (!watched) {
        if (auto loaded = Nvml::load()) {
            watched = *loaded;
        }
    }
    auto cuda = CudaDriver::load();
    GpuMap map = build(cuda ? cuda->get() : nullptr, watched.get());
    if (!cuda) {
        map.cudaNote_ = cuda.error().message;
    }
    return map;
}

const GpuIdentity* GpuMap::byOrdinal(int ordinal) const
{
    for (const auto& g : gpus_) {
        if (g.cudaOrdinal == ordinal) {
            return &g;
        }
    }
    return nullptr;
}

const GpuIdentity* GpuMap::byUuid(const std::string& uuid) const
{
    const std::string hex = uuidKey(uuid);
    for (const auto& g : gpus_) {
        if (!hex.empty() && uuidKey(g.uuid) == hex) {
            return &g;
        }
    }
    return nullptr;
}

const GpuIdentity* GpuMap::byLabel(const std::string& label) const
{
    for (const auto& g : gpus_) {
        if (g.label() == label) {
            return &g;
        }
    }
    return nullptr;
}

int Inventory::cudaCount() const
{
    return static_cast<int>(
        std::count_if(devices.begin(), devices.end(), [](const DeviceInfo& d) { return d.cudaOrdinal >= 0; }));
}

// Declared in nvml.h beside the Inventory it fills; here because it needs CUDA's numbering too.
Inventory queryInventory(const std::shared_ptr<const Nvml>& given)
{
    Inventory inv;
    inv.devices.push_back(cpuInfo());
    std::shared_ptr<const Nvml> nvml = given;
    if (!nvml) {
        auto loaded = Nvml::load();
        if (!loaded) {
            inv.gpuNote = loaded.error().message;
        } else {
            nvml = *loaded;
        }
    }
    const GpuMap map = GpuMap::query(nvml);
    inv.cudaNote = map.cudaNote();
    inv.unreachableNote = map.unreachableNote();
    if (nvml) {
        inv.driverVersion = nvml->driverVersion();
    }
    for (const auto& g : map.gpus()) {
        DeviceInfo d;
        d.id = g.label();
        d.index = g.nvml ? g.nvml->index : -1;
        d.mig = g.nvml ? g.nvml->mig : -1;
        d.cudaOrdinal = g.cudaOrdinal.value_or(-1);
        d.pciBusId = g.pciBusId;
        d.name = g.name.empty() ? std::string("NVIDIA GPU") : g.name;
        d.uuid = g.uuid;
        d.totalBytes = g.totalBytes;
        if (nvml && g.nvml) {
            if (auto mem = nvml->memory(*g.nvml)) {
                d.totalBytes = mem->totalBytes;
                d.usedBytes = mem->usedBytes;
            }
            if (auto procs = nvml->processes(*g.nvml)) {
                d.processes = std::move(*procs);
            }
        }
        inv.devices.push_back(std::move(d));
    }
    if (inv.gpuNote.empty() && inv.gpuCount() == 0) {
        inv.gpuNote = nvml ? "NVML found no GPU" : "no NVIDIA driver";
    }
    return inv;
}

}  // namespace ckpt::device
