#include "device/nvml.h"

#include "device/dl_error.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace ckpt::device {

namespace {

// The slice of nvml.h we use (the header is not installed here; these layouts are NVML's ABI).
using nvmlReturn_t = int;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kInsufficientSize = 7;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
};
struct nvmlProcessInfo_v1_t {
    unsigned int pid;
    unsigned long long usedGpuMemory;
};
struct nvmlProcessInfo_v2_t {  // also the layout of the v3 call's nvmlProcessInfo_t
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
};
struct nvmlPciInfo_t {  // nvmlDeviceGetPciInfo_v3's layout
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
};
constexpr unsigned long long kValueNotAvailable = ULLONG_MAX;

constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";

}  // namespace

struct Nvml::Impl {
    void* handle = nullptr;
    std::string path;
    nvmlReturn_t (*init)() = nullptr;
    nvmlReturn_t (*shutdown)() = nullptr;
    nvmlReturn_t (*getCount)(unsigned int*) = nullptr;
    nvmlReturn_t (*getHandle)(unsigned int, nvmlDevice_t*) = nullptr;
    nvmlReturn_t (*getName)(nvmlDevice_t, char*, unsigned int) = nullptr;
    nvmlReturn_t (*getMemory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
    nvmlReturn_t (*getUuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
    nvmlReturn_t (*getProcs)(nvmlDevice_t, unsigned int*, void*) = nullptr;
    nvmlReturn_t (*getPci)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
    nvmlReturn_t (*getMigMode)(nvmlDevice_t, unsigned int*, unsigned int*) = nullptr;
    nvmlReturn_t (*getMaxMig)(nvmlDevice_t, unsigned int*) = nullptr;
    nvmlReturn_t (*getMigHandle)(nvmlDevice_t, unsigned int, nvmlDevice_t*) = nullptr;
    int procsVersion = 0;  // which symbol getProcs is: 3, 2 or 1 (layouts differ)
    nvmlReturn_t (*driverVersion)(char*, unsigned int) = nullptr;
    const char* (*errorString)(nvmlReturn_t) = nullptr;
    bool initialised = false;
    unsigned int count = 0;

    [[nodiscard]] std::string why(nvmlReturn_t r) const
    {
        const char* s = errorString ? errorString(r) : nullptr;
        return s ? std::string(s) : "NVML error " + std::to_string(r);
    }

    ~Impl()
    {
        if (initialised && shutdown) {
            shutdown();
        }
        if (handle) {
            dlclose(handle);
        }
    }

    Expected<nvmlDevice_t> device(NvmlDevice d) const
    {
        const int index = d.index;
        if (index < 0 || static_cast<unsigned>(index) >= count) {
            return makeError(ErrorCode::DeviceUnavailable, "GPU " + std::to_string(index) +
                                                               " does not exist (NVML lists " + std::to_string(count) +
                                                               ")");
        }
        nvmlDevice_t dev = nullptr;
        if (auto r = getHandle(static_cast<unsigned>(index), &dev); r != kSuccess) {
            return makeError(ErrorCode::DeviceUnavailable,
                             "NVML cannot open GPU " + std::to_string(index) + ": " + why(r));
        }
        if (!d.isMig()) {
            return dev;
        }
        nvmlDevice_t mig = nullptr;
        if (!getMigHandle) {
            return makeError(ErrorCode::DeviceUnavailable, "this NVML has no MIG devices");
        }
        if (auto r = getMigHandle(dev, static_cast<unsigned>(d.mig), &mig); r != kSuccess) {
            return makeError(ErrorCode::DeviceUnavailable, "NVML cannot open MIG device " + std::to_string(d.mig) +
                                                               " of GPU " + std::to_string(index) + ": " + why(r));
        }
        return mig;
    }
};

namespace {

template <class F> bool bind(void* handle, const char* name, F& out)
{
    out = reinterpret_cast<F>(dlsym(handle, name));  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
    return out != nullptr;
}

}  // namespace

Nvml::Nvml(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Nvml::~Nvml() = default;

Expected<std::shared_ptr<const Nvml>> Nvml::load()
{
    auto impl = std::make_unique<Impl>();
    const char* env = std::getenv("CKPTSCOPE_NVML_LIBRARY");
    impl->path = (env && *env) ? env : kDefaultLibrary;
    (void)takeDlError();
    impl->handle = dlopen(impl->path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!impl->handle) {
        const std::string e = takeDlError();
        return makeError(ErrorCode::DeviceUnavailable,
                         "NVML not available (no NVIDIA driver?): " + (e.empty() ? impl->path : e));
    }
    void* h = impl->handle;
    const char* missing = nullptr;
    if (!bind(h, "nvmlInit_v2", impl->init)) {
        missing = "nvmlInit_v2";
    } else if (!bind(h, "nvmlShutdown", impl->shutdown)) {
        missing = "nvmlShutdown";
    } else if (!bind(h, "nvmlDeviceGetCount_v2", impl->getCount)) {
        missing = "nvmlDeviceGetCount_v2";
    } else if (!bind(h, "nvmlDeviceGetHandleByIndex_v2", impl->getHandle)) {
        missing = "nvmlDeviceGetHandleByIndex_v2";
    } else if (!bind(h, "nvmlDeviceGetMemoryInfo", impl->getMemory)) {
        missing = "nvmlDeviceGetMemoryInfo";
    }
    if (missing) {
        (void)takeDlError();
        return makeError(ErrorCode::DeviceUnavailable, "NVML not usable: " + impl->path + " has no symbol " + missing);
    }
    // Optional ones: their absence only costs a column.
    bind(h, "nvmlDeviceGetName", impl->getName);
    bind(h, "nvmlDeviceGetUUID", impl->getUuid);
    bind(h, "nvmlErrorString", impl->errorString);
    bind(h, "nvmlSystemGetDriverVersion", impl->driverVersion);
    bind(h, "nvmlDeviceGetPciInfo_v3", impl->getPci);
    bind(h, "nvmlDeviceGetMigMode", impl->getMigMode);
    bind(h, "nvmlDeviceGetMaxMigDeviceCount", impl->getMaxMig);
    bind(h, "nvmlDeviceGetMigDeviceHandleByIndex", impl->getMigHandle);
    if (bind(h, "nvmlDeviceGetComputeRunningProcesses_v3", impl->getProcs)) {
        impl->procsVersion = 3;
    } else if (bind(h, "nvmlDeviceGetComputeRunningProcesses_v2", impl->getProcs)) {
        impl->procsVersion = 2;
    } else if (bind(h, "nvmlDeviceGetComputeRunningProcesses", impl->getProcs)) {
        impl->procsVersion = 1;
    }
    (void)takeDlError();  // an optional symbol this driver lacks left an error record

    if (auto r = impl->init(); r != kSuccess) {
        return makeError(ErrorCode::DeviceUnavailable, "NVML could not start (driver not loaded?): " + impl->why(r));
    }
    impl->initialised = true;
    if (auto r = impl->getCount(&impl->count); r != kSuccess) {
        return makeError(ErrorCode::DeviceUnavailable, "NVML cannot count GPUs: " + impl->why(r));
    }
    return std::shared_ptr<const Nvml>(new Nvml(std::move(impl)));
}

int Nvml::deviceCount() const
{
    return static_cast<int>(impl_->count);
}
const std::string& Nvml::libraryPath() const
{
    return impl_->path;
}

Expected<std::string> Nvml::name(NvmlDevice d) const
{
    const int index = d.index;
    auto dev = impl_->device(d);
    if (!dev) {
        return dev.error();
    }
    if (!impl_->getName) {
        return std::string("NVIDIA GPU");
    }
    std::array<char, 128> buf{};
    if (auto r = impl_->getName(*dev, buf.data(), buf.size()); r != kSuccess) {
        return makeError(ErrorCode::DeviceUnavailable,
                         "NVML cannot name GPU " + std::to_string(index) + ": " + impl_->why(r));
    }
    return std::string(buf.data());
}

Expected<std::string> Nvml::uuid(NvmlDevice d) const
{
    const int index = d.index;
    auto dev = impl_->device(d);
    if (!dev) {
        return dev.error();
    }
    if (!impl_->getUuid) {
        return std::string();
    }
    std::array<char, 96> buf{};
    if (auto r = impl_->getUuid(*dev, buf.data(), buf.size()); r != kSuccess) {
        return makeError(ErrorCode::DeviceUnavailable,
                         "NVML has no UUID for GPU " + std::to_string(index) + ": " + impl_->why(r));
    }
    return std::string(buf.data());
}

Expected<GpuMemory> Nvml::memory(NvmlDevice d) const
{
    const int index = d.index;
    auto dev = impl_->device(d);
    if (!dev) {
        return dev.error();
    }
    nvmlMemory_t m{};
    if (auto r = impl_->getMemory(*dev, &m); r != kSuccess) {
        return makeError(ErrorCode::DeviceUnavailable,
                         "NVML cannot read GPU " + std::to_string(index) + "'s memory: " + impl_->why(r));
    }
    return GpuMemory{m.total, m.used, m.free};
}

Expected<std::vector<GpuProcess>> Nvml::processes(NvmlDevice d) const
{
    const int index = d.index;
    auto dev = impl_->device(d);
    if (!dev) {
        return dev.error();
    }
    std::vector<GpuProcess> out;
    if (!impl_->getProcs) {
        return out;
    }
    // The list can grow between the two calls; retry a few times with room to spare.
    for (int attempt = 0; attempt < 4; ++attempt) {
        unsigned int n = 0;
        auto r = impl_->getProcs(*dev, &n, nullptr);
        if (r == kSuccess) {
            return out;  // none
        }
        if (r != kInsufficientSize) {
            return makeError(ErrorCode::DeviceUnavailable,
                             "NVML cannot list GPU " + std::to_string(index) + "'s processes: " + impl_->why(r));
        }
        n += 8;
        if (impl_->procsVersion == 1) {
            std::vector<nvmlProcessInfo_v1_t> infos(n);
            r = impl_->getProcs(*dev, &n, infos.data());
            if (r == kSuccess) {
                for (unsigned i = 0; i < n; ++i) {
                    auto used = infos[i].usedGpuMemory;
                    out.push_back({infos[i].pid, used == kValueNotAvailable ? 0 : used});
                }
                return out;
            }
        } else {
            std::vector<nvmlProcessInfo_v2_t> infos(n);
            r = impl_->getProcs(*dev, &n, infos.data());
            if (r == kSuccess) {
                for (unsigned i = 0; i < n; ++i) {
                    auto used = infos[i].usedGpuMemory;
                    out.push_back({infos[i].pid, used == kValueNotAvailable ? 0 : used});
                }
                return out;
            }
        }
        if (r != kInsufficientSize) {
            return makeError(ErrorCode::DeviceUnavailable,
                             "NVML cannot list GPU " + std::to_string(index) + "'s processes: " + impl_->why(r));
        }
    }
    return out;
}

Expected<std::string> Nvml::pciBusId(NvmlDevice d) const
{
    // A MIG instance sits on its GPU's bus.
    auto dev = impl_->device(d.index);
    if (!dev) {
        return dev.error();
    }
    if (!impl_->getPci) {
        return std::string();
    }
    nvmlPciInfo_t pci{};
    if (auto r = impl_->getPci(*dev, &pci); r != kSuccess) {
        return makeError(ErrorCode::DeviceUnavailable,
                         "NVML has no PCI address for GPU " + std::to_string(d.index) + ": " + impl_->why(r));
    }
    // NVML writes the domain in 8 digits ("00000000:65:00.0"), CUDA in 4.
    std::array<char, 32> out{};
    std::snprintf(out.data(), out.size(), "%04x:%02x:%02x.0", pci.domain, pci.bus, pci.device);  // NOLINT
    return std::string(out.data());
}

std::vector<int> Nvml::migDevices(int index) const
{
    std::vector<int> out;
    auto dev = impl_->device(index);
    unsigned current = 0;
    unsigned pending = 0;
    unsigned slots = 0;
    if (!dev || !impl_->getMigMode || !impl_->getMaxMig || !impl_->getMigHandle ||
        impl_->getMigMode(*dev, &current, &pending) != kSuccess || current == 0 ||
        impl_->getMaxMig(*dev, &slots) != kSuccess) {
        return out;
    }
    for (unsigned i = 0; i < slots; ++i) {
        nvmlDevice_t mig = nullptr;
        if (impl_->getMigHandle(*dev, i, &mig) == kSuccess) {  // empty slots answer NOT_FOUND
            out.push_back(static_cast<int>(i));
        }
    }
    return out;
}

std::string Nvml::driverVersion() const
{
    if (!impl_->driverVersion) {
        return {};
    }
    std::array<char, 96> buf{};
    return impl_->driverVersion(buf.data(), buf.size()) == kSuccess ? std::string(buf.data()) : std::string();
}

std::vector<std::uint32_t> selfPidsAsNvmlSees()
{
    const auto pid = static_cast<std::uint32_t>(::getpid());
    std::vector<std::uint32_t> out{pid};
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
        if (line.rfind("NSpid:", 0) == 0) {
            std::istringstream ls(line.substr(6));
            std::uint32_t outer = 0;
            if (ls >> outer && outer != pid) {
                out.push_back(outer);
            }
            break;
        }
    }
    return out;
}

GpuMemory systemMemory()
{
    std::ifstream mem("/proc/meminfo");
    std::uint64_t totalKb = 0;
    std::uint64_t availableKb = 0;
    for (std::string line; std::getline(mem, line);) {
        std::istringstream ls(line);
        std::string key;
        std::uint64_t kb = 0;
        ls >> key >> kb;
        if (key == "MemTotal:") {
            totalKb = kb;
        } else if (key == "MemAvailable:") {
            availableKb = kb;
        }
    }
    availableKb = std::min(availableKb, totalKb);
    return GpuMemory{totalKb * 1024, (totalKb - availableKb) * 1024, availableKb * 1024};
}

DeviceInfo cpuInfo()
{
    DeviceInfo cpu;
    cpu.id = "cpu";
    cpu.index = -1;
    cpu.name = "CPU";
    std::ifstream info("/proc/cpuinfo");
    for (std::string line; std::getline(info, line);) {
        if (line.rfind("model name", 0) == 0) {
            if (auto colon = line.find(':'); colon != std::string::npos) {
                cpu.name = line.substr(colon + 1);
                cpu.name.erase(0, cpu.name.find_first_not_of(" \t"));
            }
            break;
        }
    }
    auto mem = systemMemory();
    cpu.totalBytes = mem.totalBytes;
    cpu.usedBytes = mem.usedBytes;
    return cpu;
}

}  // namespace ckpt::device
