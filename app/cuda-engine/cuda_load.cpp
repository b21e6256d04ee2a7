#include "cuda_load.h"

#include "device/sha256.h"
#include "device/torch_allocator.h"
#include "util/bytes.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace ckpt::device {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// A ring of pinned buffers (StagingSettings): while the GPU drains one, the host threads fill the
// next from the mapping, and two streams keep a copy queued behind the one in flight, so the PCIe
// link never waits.
constexpr std::size_t kStreams = 2;
constexpr std::size_t kPage = 4096;
constexpr std::uint64_t kEventEveryNs = 50'000'000;  // the client kills a helper silent for 30 s
// How far the device's fall in free memory may stray from what this process's allocations take
// (DeviceState::driverBytes) before another process is taken to have moved it: the driver keeps
// some bookkeeping of its own, and its packing of small allocations is its own business.
constexpr std::uint64_t kMeminfoSlack = 64ULL << 20;
constexpr std::uint64_t kDriverPage = 2ULL << 20;
constexpr std::uint64_t kDriverAlign = 512;

std::uint64_t roundUp(std::uint64_t n, std::uint64_t step)
{
    return (n + step - 1) / step * step;
}

std::uint64_t nowNs()
{
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

std::string deviceId(int ordinal)
{
    return ordinal < 0 ? std::string("cpu") : "cuda:" + std::to_string(ordinal);
}

// Slurm and container runtimes narrow what CUDA sees; say so where a device is missing.
std::string visibleDevicesNote()
{
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    return v == nullptr ? std::string() : " (CUDA_VISIBLE_DEVICES=" + std::string(v) + ")";
}

}  // namespace

CudaLoad::CudaLoad(const CudaDriver& cu, std::shared_ptr<const Nvml> nvml, const Checkpoint& ck,
                   const LoadSelection& sel, EventSink sink, TorchAllocatorConfig allocator, StagingSettings staging)
    : cu_(cu), nvml_(std::move(nvml)), gpus_(GpuMap::build(&cu_, nvml_.get())), ck_(ck), sel_(sel),
      sink_(std::move(sink)), allocatorConfig_(std::move(allocator)), settings_(staging), fill_(staging.threads)
{
}

std::uint64_t CudaLoad::DeviceState::driverBytes() const
{
    return roundUp(smallBytes, kDriverPage) + largeBytes;
}

CudaLoad::~CudaLoad()
{
    // A load that stopped part-way (out of memory, a copy that failed) may still have copies in
    // flight out of the pinned staging buffers into the allocations: they land before anything they
    // touch is freed.
    for (auto* s : streams_) {
        cu_.cuStreamSynchronize(s);
    }
    // Each allocation is freed in its own device's context; streams and events name theirs.
    for (const auto& a : allocations_) {
        if (a.device != current_ && cu_.cuCtxSetCurrent(devices_.at(a.device).context) == cuda::kSuccess) {
            current_ = a.device;
        }
        cu_.cuMemFree(a.ptr);
    }
    for (void* p : staging_) {
        cu_.cuMemFreeHost(p);
    }
    for (auto* e : events_) {
        cu_.cuEventDestroy(e);
    }
    for (auto* s : streams_) {
        cu_.cuStreamDestroy(s);
    }
    for (const auto& [ordinal, d] : devices_) {
        cu_.cuDevicePrimaryCtxRelease(ordinal);
    }
}

Expected<void> CudaLoad::openContext(int ordinal)
{
    if (devices_.contains(ordinal)) {
        return use(ordinal);
    }
    if (ordinal < 0 || ordinal >= cu_.deviceCount()) {
        return makeError(ErrorCode::DeviceUnavailable, deviceId(ordinal) + " does not exist: the NVIDIA driver sees " +
                                                           std::to_string(cu_.deviceCount()) +
                                                           (cu_.deviceCount() == 1 ? " GPU" : " GPUs") +
                                                           visibleDevicesNote());
    }
    DeviceState d;
    cuda::Device dev = 0;
    if (auto ok = cu_.check(cu_.cuDeviceGet(&dev, ordinal), "cuDeviceGet", ErrorCode::DeviceUnavailable); !ok) {
        return ok;
    }
    if (const GpuIdentity* g = gpus_.byOrdinal(ordinal)) {
        d.id = *g;
    }
    std::size_t total = 0;
    cu_.cuDeviceTotalMem(&total, dev);
    d.total = total;
    // What the context costs: our own row in NVML's process list where NVML shows it, else the
    // device's use before and after (true unless another process moved in between).
    const auto procBefore = processBytes(d);
    const auto usedBefore = deviceUsed(d);
    if (auto ok =
            cu_.check(cu_.cuDevicePrimaryCtxRetain(&d.context, dev), "creating a CUDA context on " + deviceId(ordinal));
        !ok) {
        return ok;
    }
    devices_.emplace(ordinal, d);
    if (auto ok = use(ordinal); !ok) {
        return ok;
    }
    DeviceState& s = devices_.at(ordinal);
    std::size_t freeBytes = 0;
    cu_.cuMemGetInfo(&freeBytes, &total);
    s.freeAfterContext = freeBytes;
    s.lowestFree = freeBytes;
    if (const auto proc = processBytes(s)) {
        s.contextBytes = *proc - std::min(*proc, procBefore.value_or(0));
        s.contextSource = "nvml-process";
    } else {
        s.blind = whyNoProcessFigure(s);
        if (const auto usedAfter = deviceUsed(s); usedAfter && usedBefore) {
            s.contextBytes = *usedAfter - std::min(*usedAfter, *usedBefore);
            s.contextSource = "nvml-device";
        }
    }
    if (primary_ < 0) {
        primary_ = ordinal;
    }
    return {};
}

Expected<void> CudaLoad::use(int ordinal)
{
    if (ordinal == current_) {
        return {};
    }
    // Copies still queued on the other device's streams read the shared staging buffers.
    for (auto* s : streams_) {
        cu_.cuStreamSynchronize(s);
    }
    for (auto* e : events_) {
        cu_.cuEventDestroy(e);
    }
    for (auto* s : streams_) {
        cu_.cuStreamDestroy(s);
    }
    events_.clear();
    streams_.clear();
    if (auto ok = cu_.check(cu_.cuCtxSetCurrent(devices_.at(ordinal).context), "cuCtxSetCurrent"); !ok) {
        return ok;
    }
    current_ = ordinal;
    // The new streams know nothing of the buffer in use; everything out of it has arrived (above).
    bufferUsed_ = settings_.bufferBytes;
    for (std::size_t i = 0; i < kStreams; ++i) {
        cuda::Stream s = nullptr;
        if (auto ok = cu_.check(cu_.cuStreamCreate(&s, cuda::kStreamNonBlocking), "cuStreamCreate"); !ok) {
            return ok;
        }
        streams_.push_back(s);
    }
    for (std::size_t i = 0; i < settings_.buffers; ++i) {
        cuda::Event e = nullptr;
        if (auto ok = cu_.check(cu_.cuEventCreate(&e, cuda::kEventDisableTiming), "cuEventCreate"); !ok) {
            return ok;
        }
        events_.push_back(e);
    }
    return {};
}

Expected<void> CudaLoad::stageBuffers()
{
    while (staging_.size() < settings_.buffers) {
        void* p = nullptr;
        const cuda::Result r = cu_.cuMemHostAlloc(&p, settings_.bufferBytes, cuda::kHostAllocPortable);
        if (r == cuda::kErrorOutOfMemory) {
            // The driver says "out of memory" for host memory too; this one is not the GPU's.
            return makeError(ErrorCode::LoadFailed,
                             "could not pin " + humanBytes(settings_.bufferBytes) +
                                 " of host memory for staging (the host, not the GPU, is out of pinnable memory: "
                                 "free RAM, raise the locked-memory limit, or set CKPTSCOPE_CUDA_BUFFER_KIB lower)");
        }
        if (auto ok = cu_.check(r, "allocating pinned staging memory"); !ok) {
            return ok;
        }
        staging_.push_back(p);
    }
    return {};
}

std::optional<std::uint64_t> CudaLoad::processBytes(const DeviceState& d) const
{
    if (!nvml_ || !d.id.nvml) {
        return std::nullopt;
    }
    auto procs = nvml_->processes(*d.id.nvml);
    if (!procs) {
        return std::nullopt;
    }
    const auto self = selfPidsAsNvmlSees();
    for (const auto& p : *procs) {
        // A row of 0 bytes is NVML saying it cannot tell (a MIG instance without privileges).
        if (std::find(self.begin(), self.end(), p.pid) != self.end() && p.usedBytes > 0) {
            return p.usedBytes;
        }
    }
    return std::nullopt;
}

std::string CudaLoad::whyNoProcessFigure(DeviceState& d) const
{
    if (!nvml_ || !d.id.nvml) {
        return "NVML does not reach this device";
    }
    auto procs = nvml_->processes(*d.id.nvml);
    if (!procs) {
        return "NVML cannot list this device's processes (" + procs.error().message + ")";
    }
    const auto self = selfPidsAsNvmlSees();
    if (std::any_of(procs->begin(), procs->end(),
                    [&](const GpuProcess& p) { return std::find(self.begin(), self.end(), p.pid) != self.end(); })) {
        return "NVML lists this process without its memory (a MIG instance without administrator rights)";
    }
    if (procs->empty()) {
        return "NVML lists no process on this device";
    }
    d.pidHidden = true;
    return "NVML lists this device's processes but not this one: a container's PID namespace (NVML reports "
           "host PIDs)";
}

std::optional<std::uint64_t> CudaLoad::deviceUsed(const DeviceState& d) const
{
    if (!nvml_ || !d.id.nvml) {
        return std::nullopt;
    }
    auto mem = nvml_->memory(*d.id.nvml);
    return mem ? std::optional<std::uint64_t>(mem->usedBytes) : std::nullopt;
}

void CudaLoad::progress(std::uint64_t done, bool force)
{
    const std::uint64_t now = nowNs();
    if (!force && now - lastEventNs_ < kEventEveryNs) {
        return;
    }
    lastEventNs_ = now;
    sink_({{"event", "progress"}, {"bytes", done}, {"total_bytes", sel_.totalBytes}, {"seconds", elapsed()}});
}

double CudaLoad::elapsed() const
{
    return loadStart_ ? std::chrono::duration<double>(Clock::now() - *loadStart_).count() : seconds_;
}

Expected<void> CudaLoad::nextBuffer()
{
    // Every copy out of the buffer given up went to its stream: the event marks the last of them.
    if (auto ok = cu_.check(cu_.cuEventRecord(events_[buffer_], streams_[buffer_ % kStreams]), "cuEventRecord"); !ok) {
        return ok;
    }
    buffer_ = (buffer_ + 1) % settings_.buffers;
    bufferUsed_ = 0;
    return cu_.check(cu_.cuEventSynchronize(events_[buffer_]), "cuEventSynchronize");
}

Expected<void> CudaLoad::copy(cuda::DevicePtr dst, StorageIndex storage, std::uint64_t nbytes, std::uint64_t& done)
{
    Expected<void> failed;
    std::uint64_t offset = 0;
    // Storages are packed into the buffers, so small ones do not each hold a whole buffer and the
    // link always has a full ring's worth queued; a piece that does not fit goes on in the next.
    auto read = ck_.streamStorage(
        storage, 0, nbytes,
        [&](Bytes piece) {
            while (!piece.empty()) {
                if (bufferUsed_ == settings_.bufferBytes) {
                    if (failed = nextBuffer(); !failed) {
                        return false;
                    }
                }
                const std::size_t n = std::min(piece.size(), settings_.bufferBytes - bufferUsed_);
                std::byte* at = static_cast<std::byte*>(staging_[buffer_]) + bufferUsed_;  // NOLINT
                fill_.copy(at, piece.data(), n);
                if (failed = cu_.check(cu_.cuMemcpyHtoDAsync(dst + offset, at, n, streams_[buffer_ % kStreams]),
                                       "copying to " + deviceId(current_));
                    !failed) {
                    return false;
                }
                // The next piece starts on a page boundary, as the DMA engine likes its source.
                bufferUsed_ = std::min(settings_.bufferBytes, (bufferUsed_ + n + kPage - 1) / kPage * kPage);
                offset += n;
                done += n;
                piece = piece.subspan(n);
            }
            progress(done, false);
            return true;
        },
        settings_.bufferBytes);
    if (!failed) {
        return failed;
    }
    return read;
}

Expected<void> CudaLoad::allocateAndCopy(const Placement& p, std::uint64_t& done)
{
    const SelectedStorage& s = sel_.storages[p.selected];
    if (p.device < 0) {
        hostBytes_ += s.nbytes;  // torch.load's `cpu`: nothing reaches a GPU
        done += s.nbytes;
        return {};
    }
    if (s.nbytes == 0) {
        return {};  // torch allocates nothing for an empty storage either
    }
    if (auto ok = use(p.device); !ok) {
        return ok;
    }
    cuda::DevicePtr ptr = 0;
    const cuda::Result r = cu_.cuMemAlloc(&ptr, s.nbytes);
    if (r == cuda::kErrorOutOfMemory) {
        const DeviceState& d = devices_.at(p.device);
        std::uint64_t placed = 0;
        for (const auto& a : allocations_) {
            placed += a.device == p.device ? sel_.storages[a.selected].nbytes : 0;
        }
        std::uint64_t needed = 0;
        for (const auto& q : sel_.storages) {
            needed += q.nbytes;
        }
        const auto torch = torchPrediction();
        return makeError(
            ErrorCode::OutOfMemory,
            deviceId(p.device) + " cannot hold this checkpoint: storage " + ck_.storages[s.storage].key + " (" +
                humanBytes(s.nbytes) + ") did not fit after " + humanBytes(placed) + " of " + humanBytes(needed) +
                " were placed. The GPU had " + humanBytes(d.freeAfterContext) + " free of " + humanBytes(d.total) +
                " once the CUDA context existed" +
                (d.contextBytes > 0 ? " (the context itself took " + humanBytes(d.contextBytes) + ")" : std::string()) +
                "; torch.load(map_location='" + deviceId(p.device) + "') would reserve " +
                humanBytes(torch.reservedBytes) + " there");
    }
    if (auto ok = cu_.check(r, "cuMemAlloc"); !ok) {
        return ok;
    }
    allocations_.push_back({p.selected, p.device, ptr});
    auto& d = devices_.at(p.device);
    d.allocated += s.nbytes;
    (s.nbytes >= kDriverPage ? d.largeBytes : d.smallBytes) +=
        roundUp(s.nbytes, s.nbytes >= kDriverPage ? kDriverPage : kDriverAlign);
    std::size_t freeBytes = 0;
    std::size_t total = 0;
    if (cu_.cuMemGetInfo(&freeBytes, &total) == cuda::kSuccess) {
        d.lowestFree = std::min<std::uint64_t>(d.lowestFree, freeBytes);
    }
    return copy(ptr, s.storage, s.nbytes, done);
}

Expected<void> CudaLoad::load(const std::vector<Placement>& placements)
{
    if (auto ok = stageBuffers(); !ok) {
        return ok;
    }
    loadStart_ = Clock::now();
    std::uint64_t done = 0;
    progress(0, true);
    auto finish = [&](Expected<void> ok) {
        seconds_ = elapsed();
        loadStart_.reset();
        return ok;
    };
    for (const auto& p : placements) {
        if (auto ok = allocateAndCopy(p, done); !ok) {
            return finish(ok);
        }
    }
    for (auto* s : streams_) {
        if (auto ok = cu_.check(cu_.cuStreamSynchronize(s), "waiting for the copies"); !ok) {
            return finish(ok);
        }
    }
    bytes_ = done;
    progress(done, true);
    return finish({});
}

Expected<void> CudaLoad::verify()
{
    std::vector<std::byte> back(settings_.bufferBytes);
    for (const auto& a : allocations_) {
        if (auto ok = use(a.device); !ok) {
            return ok;
        }
        const SelectedStorage& s = sel_.storages[a.selected];
        Sha256 hash;
        for (std::uint64_t at = 0; at < s.nbytes;) {
            const std::uint64_t n = std::min<std::uint64_t>(settings_.bufferBytes, s.nbytes - at);
            if (auto ok = cu_.check(cu_.cuMemcpyDtoH(back.data(), a.ptr + at, n), "copying back for --verify"); !ok) {
                return ok;
            }
            hash.update({back.data(), n});
            at += n;
            verified_ += n;
            // A flat buffer of many GB hashes for longer than the client waits for a word.
            if (const std::uint64_t now = nowNs(); now - lastEventNs_ >= kEventEveryNs) {
                lastEventNs_ = now;
                sink_({{"event", "verify"}, {"bytes", verified_}, {"total_bytes", sel_.totalBytes}});
            }
        }
        sink_({{"event", "storage_check"},
               {"storage", ck_.storages[s.storage].key},
               {"bytes", s.nbytes},
               {"sha256", hash.hexDigest()}});
    }
    return {};
}

std::map<std::string, std::uint64_t> CudaLoad::bytesByDevice() const
{
    std::map<std::string, std::uint64_t> out;
    for (const auto& a : allocations_) {
        out[deviceId(a.device)] += sel_.storages[a.selected].nbytes;
    }
    if (hostBytes_ > 0) {
        out["cpu"] += hostBytes_;
    }
    return out;
}

CudaLoad::Peak CudaLoad::peakOn(int ordinal) const
{
    const auto it = devices_.find(ordinal);
    if (it == devices_.end()) {
        return {0, "none", "no context on " + deviceId(ordinal)};
    }
    const DeviceState& d = it->second;
    if (const auto own = processBytes(d)) {
        return {*own, "nvml-process", {}};
    }
    std::string why = d.blind.empty() ? std::string("NVML gives no per-process figure here") : d.blind;
    const std::uint64_t fell = d.freeAfterContext - std::min(d.freeAfterContext, d.lowestFree);
    const std::uint64_t taken = d.driverBytes();
    const std::uint64_t gap = fell > taken ? fell - taken : taken - fell;
    std::string context = d.contextSource == "unknown" ? "; the context's own cost is unknown" : std::string();
    if (gap <= std::max(kMeminfoSlack, taken / 20)) {
        return {d.contextBytes + fell, "driver-meminfo", why + context};
    }
    return {d.contextBytes + taken, "engine-allocations",
            why + "; the device's free memory fell by " + humanBytes(fell) + " while this load's allocations (" +
                humanBytes(d.allocated) + ") take " + humanBytes(taken) + " of the driver's pages" +
                ", so another process moved it meanwhile" + context};
}

std::map<std::string, std::string> CudaLoad::touchedUuids() const
{
    std::map<std::string, std::string> out;
    for (const auto& [ordinal, d] : devices_) {
        out[deviceId(ordinal)] = d.id.uuid;
    }
    return out;
}

std::map<std::string, CudaLoad::Context> CudaLoad::contexts() const
{
    std::map<std::string, Context> out;
    for (const auto& [ordinal, d] : devices_) {
        out[deviceId(ordinal)] = {d.contextBytes, d.contextSource};
    }
    return out;
}

std::map<std::string, std::uint64_t> CudaLoad::torchReservedByDevice() const
{
    std::map<int, std::vector<std::uint64_t>> sizes;
    for (const auto& a : allocations_) {
        sizes[a.device].push_back(sel_.storages[a.selected].nbytes);
    }
    std::map<std::string, std::uint64_t> out;
    for (const auto& [ordinal, bytes] : sizes) {
        out[deviceId(ordinal)] = torchLoadPeak(bytes, allocatorConfig_).reservedBytes;
    }
    return out;
}

std::uint64_t CudaLoad::bytesPlaced() const
{
    std::uint64_t n = 0;
    for (const auto& a : allocations_) {
        n += sel_.storages[a.selected].nbytes;
    }
    return n + hostBytes_;
}

TorchAllocatorPeak CudaLoad::torchPrediction() const
{
    // torch.load(map_location='cuda:N') allocates every storage of the file, whatever --select
    // keeps, in the order the pickle names them (the storage table's order).
    std::vector<std::uint64_t> sizes;
    sizes.reserve(ck_.storages.size());
    for (std::uint32_t i = 0; i < ck_.storages.size(); ++i) {
        sizes.push_back(ck_.storages[StorageIndex{i}].nbytes);
    }
    return torchLoadPeak(sizes, allocatorConfig_);
}

json CudaLoad::startEvent() const
{
    const DeviceState& d = devices_.at(primary_);
    return {{"event", "start"},
            {"engine", "cuda"},
            {"cuda", true},
            {"device", deviceId(primary_)},
            {"device_uuid", d.id.uuid},
            {"device_pci_bus_id", d.id.pciBusId},
            {"device_nvml_index", d.id.nvml ? json(d.id.nvml->index) : json(nullptr)},
            {"device_name", d.id.name},
            {"device_total_bytes", d.total},
            {"context_bytes", d.contextBytes},
            {"driver_version", cu_.driverVersion()},
            {"total_bytes", sel_.totalBytes},
            {"total_tensors", sel_.tensorCount}};
}

json CudaLoad::resultEvent() const
{
    const DeviceState& d = devices_.at(primary_);
    const TorchAllocatorPeak torch = torchPrediction();
    const Peak peak = peakOn(primary_);
    json out = {{"event", "result"},
                {"engine", "cuda"},
                {"device", deviceId(primary_)},
                {"device_uuid", d.id.uuid},
                {"tensors_loaded", sel_.tensorCount},
                {"storages_loaded", allocations_.size()},
                {"bytes", bytes_},
                {"seconds", seconds_},
                {"gb_per_s", seconds_ > 0 ? static_cast<double>(bytes_) / seconds_ / 1e9 : 0.0},
                {"peak_bytes", peak.bytes},
                {"peak_source", peak.source},
                {"context_bytes", d.contextBytes},
                {"context_source", d.contextSource},
                {"pid_hidden", d.pidHidden},
                {"torch_reserved_bytes", torch.reservedBytes},
                {"torch_allocated_bytes", torch.allocatedBytes},
                {"torch_peak_bytes", d.contextBytes + torch.reservedBytes},
                {"torch_alloc_conf", allocatorConfig_.describe()},
                {"host_threads", fill_.threads()},
                {"staging_bytes", settings_.totalBytes()},
                {"staging_buffers", settings_.buffers}};
    if (!peak.note.empty()) {
        out["peak_note"] = peak.note;
    }
    return out;
}

}  // namespace ckpt::device
