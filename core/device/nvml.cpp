#include "device/nvml.h"

#include "device/dl_error.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <optional>
#include <sstream>
#include <unistd.h>

namespace ckpt::device {

namespace {

// The slice of nvml.h we use (the header is not installed here; these layouts are NVML's ABI).
using nvmlReturn_t = int;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kInvalidArgument = 2;
constexpr nvmlReturn_t kNotSupported = 3;
constexpr nvmlReturn_t kInsufficientSize = 7;
constexpr nvmlReturn_t kFunctionNotFound = 13;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
};
// The process lists. nvmlDeviceGetRunningProcessDetailList takes a versioned list whose entries
// have one fixed layout (nvmlProcessDetail_v1_t, 32 bytes). The older calls take an array whose entry
// size the driver decides, and drivers have not agreed: nvmlProcessInfo_v1_t is 16 bytes (pid,
// padding, usedGpuMemory), nvmlProcessInfo_v2_t 24 (then gpuInstanceId, computeInstanceId); the _v3
// calls write 24 on R510 and from 535.104 on, 32 on 535.43-535.86 (the detail entry, under the same
// name), and 16 has been seen on 550.127. So their entries are measured, never assumed (entryStride).
struct nvmlProcessDetailList_v1_t {
    unsigned int version;
    unsigned int mode;  // nvmlProcessMode_t
    unsigned int numProcArrayEntries;
    void* procArray;  // nvmlProcessDetail_v1_t[]
};
constexpr unsigned kProcessDetailListV1 = sizeof(nvmlProcessDetailList_v1_t) | 1U << 24;  // NVML_STRUCT_VERSION
constexpr unsigned kModeCompute = 0;                                                      // NVML_PROCESS_MODE_COMPUTE
constexpr unsigned kModeMps = 2;                                                          // NVML_PROCESS_MODE_MPS
constexpr std::size_t kDetailEntryBytes = 32;
// Every layout an entry has had, and room for one twice the largest, so no driver writes past the end.
constexpr std::array<std::size_t, 3> kEntryStrides{16, 24, 32};
constexpr std::size_t kEntryRoom = 64;
constexpr unsigned char kUnwritten = 0xa5;  // no entry's last byte (the top of a size or id) holds it
using ProcessListFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, void*);
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

// What one count-then-fill exchange gave: the entries' bytes and how many there are, or the error.
struct RawList {
    nvmlReturn_t status = kSuccess;
    std::vector<unsigned char> bytes;
    unsigned count = 0;
};

// NVML's protocol: ask how many (0 entries, no array: SUCCESS when there are none), then fill an
// array with room to spare, trying again while the list grows between the calls. The array has
// kEntryRoom bytes per entry, more than any driver writes, all kUnwritten until written.
template <class Call> RawList fetchList(Call call)
{
    RawList l;
    for (int attempt = 0; attempt < 4; ++attempt) {
        unsigned n = 0;
        l.status = call(&n, nullptr);
        if (l.status != kInsufficientSize) {
            return l;  // none (SUCCESS), or the error
        }
        l.count = n + 8;
        l.bytes.assign(static_cast<std::size_t>(l.count) * kEntryRoom, kUnwritten);
        l.status = call(&l.count, l.bytes.data());
        if (l.status != kInsufficientSize) {
            return l;
        }
    }
    return l;
}

// Up to the last byte the driver wrote.
std::size_t writtenBytes(const std::vector<unsigned char>& bytes)
{
    std::size_t end = bytes.size();
    while (end > 0 && bytes[end - 1] == kUnwritten) {
        --end;
    }
    return end;
}

// The size of each of the `count` entries the driver wrote: the one layout whose entries end where
// the writing ends (every layout's last field is a size or an id, whose top byte is 0x00 or 0xff).
std::optional<std::size_t> entryStride(const std::vector<unsigned char>& bytes, unsigned count)
{
    const std::size_t end = writtenBytes(bytes);
    for (const std::size_t stride : kEntryStrides) {
        if (end == stride * count) {
            return stride;
        }
    }
    return std::nullopt;
}

// Every layout starts with the pid (4 bytes) and, after 4 bytes of padding, usedGpuMemory (8 bytes).
std::vector<GpuProcess> parseEntries(const RawList& l, std::size_t stride)
{
    std::vector<GpuProcess> out;
    for (unsigned i = 0; i < l.count && (i + 1) * stride <= l.bytes.size(); ++i) {
        const unsigned char* e = l.bytes.data() + static_cast<std::size_t>(i) * stride;
        GpuProcess p;
        unsigned long long used = 0;
        std::memcpy(&p.pid, e, sizeof p.pid);
        std::memcpy(&used, e + 8, sizeof used);
        p.usedBytes = used == kValueNotAvailable ? 0 : used;  // a MIG instance without privileges
        out.push_back(p);
    }
    return out;
}

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
    nvmlReturn_t (*getDetailList)(nvmlDevice_t, nvmlProcessDetailList_v1_t*) = nullptr;
    ProcessListFn getCompute = nullptr;  // the newest of nvmlDeviceGetComputeRunningProcesses{_v3,_v2,}
    ProcessListFn getMps = nullptr;      // ... and of nvmlDeviceGetMPSComputeRunningProcesses
    nvmlReturn_t (*getPci)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
    nvmlReturn_t (*getMigMode)(nvmlDevice_t, unsigned int*, unsigned int*) = nullptr;
    nvmlReturn_t (*getMaxMig)(nvmlDevice_t, unsigned int*) = nullptr;
    nvmlReturn_t (*getMigHandle)(nvmlDevice_t, unsigned int, nvmlDevice_t*) = nullptr;
    nvmlReturn_t (*driverVersion)(char*, unsigned int) = nullptr;
    const char* (*errorString)(nvmlReturn_t) = nullptr;
    bool initialised = false;
    unsigned int count = 0;

    [[nodiscard]] std::string why(nvmlReturn_t r) const
    {
        const char* s = errorString ? errorString(r) : nullptr;
        return s ? std::string(s) : "NVML error " + std::to_string(r);
    }

    // One kind of process (kModeCompute or kModeMps): through the detail list where the driver has
    // it and supports it on this GPU, else through the older call, its entries measured.
    [[nodiscard]] Expected<std::vector<GpuProcess>> processList(nvmlDevice_t dev, unsigned mode) const
    {
        if (getDetailList) {
            const RawList l = fetchList([&](unsigned* entryCount, void* entries) {
                nvmlProcessDetailList_v1_t list{kProcessDetailListV1, mode, *entryCount, entries};
                const nvmlReturn_t r = getDetailList(dev, &list);
                *entryCount = list.numProcArrayEntries;
                return r;
            });
            if (l.status == kSuccess) {
                return parseEntries(l, kDetailEntryBytes);
            }
            if (l.status != kNotSupported && l.status != kInvalidArgument && l.status != kFunctionNotFound) {
                return makeError(ErrorCode::DeviceUnavailable, why(l.status));
            }
        }
        const ProcessListFn fn = mode == kModeMps ? getMps : getCompute;
        if (!fn) {
            return std::vector<GpuProcess>{};
        }
        const RawList l = fetchList([&](unsigned* entryCount, void* entries) { return fn(dev, entryCount, entries); });
        if (l.status != kSuccess) {
            return makeError(ErrorCode::DeviceUnavailable, why(l.status));
        }
        if (l.count == 0) {
            return std::vector<GpuProcess>{};
        }
        const auto stride = entryStride(l.bytes, l.count);
        if (!stride) {
            return makeError(ErrorCode::DeviceUnavailable,
                             "NVML wrote " + std::to_string(l.count) +
                                 " process entries in a layout of no size any NVML has used (" +
                                 std::to_string(writtenBytes(l.bytes)) + " bytes)");
        }
        return parseEntries(l, *stride);
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
    out = reinterpret_cast<F>(dlsym(handle, name));
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
    bind(h, "nvmlDeviceGetRunningProcessDetailList", impl->getDetailList);
    for (const char* suffix : {"_v3", "_v2", ""}) {
        if (!impl->getCompute) {
            bind(h, (std::string("nvmlDeviceGetComputeRunningProcesses") + suffix).c_str(), impl->getCompute);
        }
        if (!impl->getMps) {
            bind(h, (std::string("nvmlDeviceGetMPSComputeRunningProcesses") + suffix).c_str(), impl->getMps);
        }
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
    auto dev = impl_->device(d);
    if (!dev) {
        return dev.error();
    }
    auto out = impl_->processList(*dev, kModeCompute);
    if (!out) {
        return makeError(ErrorCode::DeviceUnavailable,
                         "NVML cannot list GPU " + std::to_string(d.index) + "'s processes: " + out.error().message);
    }
    // Under MPS the compute list holds the server; its clients are listed apart. A driver that
    // cannot list them has none to show.
    if (auto clients = impl_->processList(*dev, kModeMps)) {
        for (auto& c : *clients) {
            if (std::none_of(out->begin(), out->end(), [&](const GpuProcess& p) { return p.pid == c.pid; })) {
                c.mps = true;
                out->push_back(c);
            }
        }
    }
    return out;
}

Expected<void> Nvml::reachable(int index) const
{
    if (auto dev = impl_->device(index); !dev) {
        return dev.error();
    }
    return {};
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
