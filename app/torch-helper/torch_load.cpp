// The LibTorch half of the helper: one host->device copy per storage straight from the mapped file,
// views rebuilt over the device storage with their sizes, strides and offsets (so storages shared
// by several tensors stay shared), an optional check of what landed, and freeing at the end.
#include "device/helper_protocol.h"
#include "device/sha256.h"
#include "load_plan.h"
#include "util/device_name.h"

#include <ATen/ATen.h>
#include <c10/core/ScalarType.h>
#include <torch/version.h>  // TORCH_VERSION only; the rest of <torch/...> stays out

#ifdef CKPTSCOPE_HELPER_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

namespace ckpt::helper {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The client kills a helper that sends no event for its timeout (30 s by default), so no piece of
// work runs long between two events: copies and hashes go in chunks, and an event goes out after
// any chunk that ends more than kEventEvery after the last one.
constexpr std::size_t kChunkBytes = 64U << 20;
constexpr auto kEventEvery = std::chrono::milliseconds(50);

// Told the bytes done so far after each chunk.
using ChunkFn = std::function<void(std::uint64_t)>;

// True at most once per kEventEvery.
class EventPacer {
public:
    bool due()
    {
        const auto now = Clock::now();
        if (now - last_ < kEventEvery) {
            return false;
        }
        last_ = now;
        return true;
    }

private:
    Clock::time_point last_ = Clock::now();
};

struct Failure {
    std::string code;
    std::string message;
};

std::optional<at::ScalarType> scalarTypeOf(DType t)
{
    switch (t) {
    case DType::Float64:
        return at::kDouble;
    case DType::Float32:
        return at::kFloat;
    case DType::Float16:
        return at::kHalf;
    case DType::BFloat16:
        return at::kBFloat16;
    case DType::Int64:
        return at::kLong;
    case DType::Int32:
        return at::kInt;
    case DType::Int16:
        return at::kShort;
    case DType::Int8:
        return at::kChar;
    case DType::UInt8:
        return at::kByte;
    case DType::Bool:
        return at::kBool;
    case DType::Complex128:
        return at::kComplexDouble;
    case DType::Complex64:
        return at::kComplexFloat;
    case DType::Complex32:
        return at::kComplexHalf;
    default:
        return std::nullopt;  // quantized, float8, uint16+, bits: viewed as raw bytes below
    }
}

// Anonymous resident memory of this process: what the CPU load itself allocated (file-backed
// pages of the mapping are not counted, they are the page cache's).
std::uint64_t rssAnonBytes()
{
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
        if (line.rfind("RssAnon:", 0) == 0) {
            return std::stoull(line.substr(8)) * 1024;
        }
    }
    return 0;
}

std::string gib(std::uint64_t n)
{
    return humanBytes(n);
}

// A view of `storage` with the tensor's geometry. Element types LibTorch lacks become a uint8
// tensor with one more dimension of elementSize bytes: the same bytes in the same order.
at::Tensor makeView(const at::Tensor& storage, const TensorPlan& t)
{
    if (auto st = scalarTypeOf(t.dtype)) {
        at::Tensor v = at::empty({0}, storage.options().dtype(*st));
        v.set_(storage.storage(), t.storageOffset, t.shape, t.stride);
        return v;
    }
    const auto e = static_cast<std::int64_t>(t.elementSize);
    std::vector<std::int64_t> shape = t.shape;
    std::vector<std::int64_t> stride;
    for (auto s : t.stride) {
        stride.push_back(s * e);
    }
    shape.push_back(e);
    stride.push_back(1);
    at::Tensor v = at::empty({0}, storage.options().dtype(at::kByte));
    v.set_(storage.storage(), t.storageOffset * e, shape, stride);
    return v;
}

// The sha256 of a contiguous 1-D tensor's bytes, brought to the host a chunk at a time (on the CPU
// each chunk is a view, not a copy), so host memory stays at one chunk whatever the size.
std::string shaOfFlat(const at::Tensor& flat, const ChunkFn& onChunk)
{
    device::Sha256 h;
    const auto elementBytes = static_cast<std::int64_t>(flat.element_size());
    const std::int64_t step = std::max<std::int64_t>(1, static_cast<std::int64_t>(kChunkBytes) / elementBytes);
    const std::int64_t n = flat.numel();
    for (std::int64_t done = 0; done < n;) {
        const std::int64_t len = std::min(step, n - done);
        const at::Tensor part = flat.narrow(0, done, len).to(at::kCPU).contiguous();
        h.update({static_cast<const std::byte*>(part.data_ptr()), static_cast<std::size_t>(part.nbytes())});
        done += len;
        onChunk(static_cast<std::uint64_t>(done * elementBytes));
    }
    return h.hexDigest();
}

// A tensor's C-order bytes as materialised: as much memory as the tensor's own bytes, which is why
// the caller only asks for tensors no bigger than their storage.
std::string shaOfTensor(const at::Tensor& t, const ChunkFn& onChunk)
{
    return shaOfFlat(t.contiguous().reshape({-1}), onChunk);
}

// Copies one piece of a storage to `offset` bytes into a host tensor (the CPU "device").
void copyToCpu(Bytes piece, at::Tensor& dst, std::int64_t offset)
{
    std::memcpy(static_cast<std::byte*>(dst.data_ptr()) + offset, piece.data(), piece.size());
}

#ifdef CKPTSCOPE_HELPER_CUDA
// Pageable memory (the mapping) goes to the GPU through the driver's small bounce buffer; two
// pinned staging buffers filled by several threads while the other one is in flight get close to
// the pinned bandwidth.
class PinnedStager {
public:
    static constexpr std::int64_t kChunk = 64LL << 20;
    PinnedStager()
    {
        for (auto& b : buffers_) {
            b = at::empty({kChunk}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
        }
    }
    // One piece of a storage, to `offset` bytes into `dst`.
    void copy(Bytes src, at::Tensor& dst, std::int64_t offset)
    {
        auto stream = at::cuda::getCurrentCUDAStream();
        std::int64_t done = 0;
        const auto total = static_cast<std::int64_t>(src.size());
        while (done < total) {
            const int k = next_;
            next_ ^= 1;
            events_[k].synchronize();  // the buffer's previous copy has left it
            const std::int64_t len = std::min(kChunk, total - done);
            parallelMemcpy(static_cast<std::byte*>(buffers_[k].data_ptr()), src.data() + done,
                           static_cast<std::size_t>(len));
            dst.narrow(0, offset + done, len).copy_(buffers_[k].narrow(0, 0, len), /*non_blocking=*/true);
            events_[k].record(stream);
            done += len;
        }
    }
    void finish() { at::cuda::getCurrentCUDAStream().synchronize(); }

private:
    static void parallelMemcpy(std::byte* dst, const std::byte* src, std::size_t n)
    {
        constexpr std::size_t kMinPerThread = 8U << 20;
        const std::size_t threads = std::clamp<std::size_t>(n / kMinPerThread, 1, 8);
        if (threads == 1) {
            std::memcpy(dst, src, n);
            return;
        }
        std::vector<std::jthread> pool;
        const std::size_t part = (n + threads - 1) / threads;
        for (std::size_t i = 0; i < threads; ++i) {
            const std::size_t off = i * part;
            const std::size_t len = std::min(part, n - std::min(n, off));
            if (len > 0) {
                pool.emplace_back([=] { std::memcpy(dst + off, src + off, len); });
            }
        }
    }
    at::Tensor buffers_[2];
    at::cuda::CUDAEvent events_[2];
    int next_ = 0;
};
#endif

// Picks the device; on failure says exactly why (no such device, a LibTorch without CUDA).
std::optional<Failure> openDevice(const std::string& device, at::Device& out, std::string& uuid)
{
    if (device == "cpu") {
        out = at::Device(at::kCPU);
        return std::nullopt;
    }
    const auto name = parseDeviceName(device);
    if (!name || name->type != "cuda" || !name->index) {
        return Failure{"Usage", "unknown device '" + device + "': use cpu or cuda:N"};
    }
    const std::int64_t requested = *name->index;
#ifdef CKPTSCOPE_HELPER_CUDA
    if (!at::cuda::is_available()) {
        return Failure{"DeviceUnavailable",
                       device +
                           " is not available: this machine has no usable CUDA device (no NVIDIA driver, or no GPU)"};
    }
    const int count = static_cast<int>(at::cuda::device_count());
    if (requested >= count) {
        return Failure{"DeviceUnavailable", device + " does not exist: this machine has " + std::to_string(count) +
                                                " CUDA device" + (count == 1 ? "" : "s") + " (cuda:0" +
                                                (count > 1 ? "..cuda:" + std::to_string(count - 1) : std::string()) +
                                                ")"};
    }
    const int index = static_cast<int>(requested);  // below the device count, so it fits
    // Before anything touches CUDA: otherwise the first allocation (even pinned host memory) makes a
    // context on cuda:0, the very thing this test-load is there to catch.
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
    out = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, index) == cudaSuccess) {
        static constexpr char kHex[] = "0123456789abcdef";
        uuid = "GPU-";
        for (int i = 0; i < 16; ++i) {
            const auto b = static_cast<unsigned char>(prop.uuid.bytes[i]);
            uuid += kHex[b >> 4];
            uuid += kHex[b & 15];
            if (i == 3 || i == 5 || i == 7 || i == 9) {
                uuid += '-';
            }
        }
    }
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
    return std::nullopt;
#else
    (void)requested;
    (void)uuid;
    return Failure{"DeviceUnavailable",
                   "this ckptscope-torch-helper was built against a LibTorch without CUDA; rebuild with "
                   "-DCMAKE_PREFIX_PATH=<CUDA LibTorch> -DCKPTSCOPE_WITH_CUDA=ON to test-load on " +
                       device};
#endif
}

std::uint64_t freeBytesOn(const at::Device& dev)
{
#ifdef CKPTSCOPE_HELPER_CUDA
    if (dev.is_cuda()) {
        std::size_t freeB = 0;
        std::size_t totalB = 0;
        c10::cuda::CUDACachingAllocator::emptyCache();
        if (cudaMemGetInfo(&freeB, &totalB) == cudaSuccess) {
            return freeB;
        }
        return 0;
    }
#endif
    (void)dev;
    std::ifstream mem("/proc/meminfo");
    for (std::string line; std::getline(mem, line);) {
        if (line.rfind("MemAvailable:", 0) == 0) {
            return std::stoull(line.substr(13)) * 1024;
        }
    }
    return 0;
}

// --verify: every storage's bytes as they sit on the device, hashed once, for the client to compare
// with the file; and each tensor's C-order bytes, but only when they are no more than its
// storage's: an expanded view (stride 0 over 2^31 elements of one float) would otherwise be
// materialised whole, 8 GiB from a 4-byte storage. Its storage's hash covers what it shows.
void emitChecks(const LoadPlan& plan, const std::vector<at::Tensor>& storages, const std::vector<at::Tensor>& views,
                const Emit& emit)
{
    auto expanded = [&plan](const TensorPlan& t) { return t.nbytes > plan.storages[t.storage].nbytes; };
    std::uint64_t total = plan.totalBytes;
    for (const auto& t : plan.tensors) {
        total += expanded(t) ? 0 : t.nbytes;
    }
    std::uint64_t finished = 0;  // bytes of the storages and tensors hashed before the current one
    EventPacer pacer;
    auto onChunk = [&](std::uint64_t done) {
        if (pacer.due()) {
            emit({{"event", "verify"}, {"bytes", finished + done}, {"total_bytes", total}});
        }
    };
    for (std::size_t s = 0; s < plan.storages.size(); ++s) {
        const auto& sp = plan.storages[s];
        emit({{"event", "storage_check"},
              {"storage", sp.key},
              {"bytes", sp.nbytes},
              {"sha256", shaOfFlat(storages[s], onChunk)}});
        finished += sp.nbytes;
    }
    for (std::size_t i = 0; i < plan.tensors.size(); ++i) {
        const auto& t = plan.tensors[i];
        json check = {{"event", "check"}, {"path", t.path}, {"storage", plan.storages[t.storage].key}};
        if (expanded(t)) {
            check["note"] = "expanded view: " + humanBytes(t.nbytes) + " in C order from a " +
                            humanBytes(plan.storages[t.storage].nbytes) +
                            " storage, not hashed; its storage is checked";
        } else {
            check["sha256"] = shaOfTensor(views[i], onChunk);
            finished += t.nbytes;
        }
        emit(check);
    }
}

bool isOutOfMemory(const std::string& what)
{
    return what.find("out of memory") != std::string::npos || what.find("can't allocate memory") != std::string::npos ||
           what.find("Out of memory") != std::string::npos;
}

}  // namespace

int runLoad(const LoadPlan& plan, const Emit& emit)
{
    at::Device dev(at::kCPU);
    std::string uuid;
    bool cudaBuild = false;
#ifdef CKPTSCOPE_HELPER_CUDA
    cudaBuild = true;
#endif
    emit({{"event", "start"},
          {"device", plan.device},
          {"total_bytes", plan.totalBytes},
          {"total_tensors", plan.tensors.size()},
          {"torch_version", TORCH_VERSION},
          {"cuda", cudaBuild}});
    try {
        if (auto failure = openDevice(plan.device, dev, uuid)) {
            emit({{"event", "error"}, {"code", failure->code}, {"message", failure->message}});
            return 1;
        }
        const std::uint64_t anonBefore = rssAnonBytes();
        std::vector<at::Tensor> storages(plan.storages.size());
        std::vector<at::Tensor> views(plan.tensors.size());
        std::uint64_t bytes = 0;
        std::uint64_t tensors = 0;
        const auto t0 = Clock::now();
        auto seconds = [&t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
        EventPacer pacer;
        auto emitProgress = [&](std::uint64_t loaded) {
            emit({{"event", "progress"},
                  {"bytes", loaded},
                  {"tensors", tensors},
                  {"total_bytes", plan.totalBytes},
                  {"seconds", seconds()}});
        };
#ifdef CKPTSCOPE_HELPER_CUDA
        std::optional<PinnedStager> stager;
        if (dev.is_cuda()) {
            stager.emplace();
        }
#endif
        for (std::size_t s = 0; s < plan.storages.size(); ++s) {
            const auto& sp = plan.storages[s];
            const auto onChunk = [&](std::uint64_t done) {
                if (pacer.due()) {
                    emitProgress(bytes + done);
                }
            };
            Expected<void> read;
            try {
                storages[s] =
                    at::empty({static_cast<std::int64_t>(sp.nbytes)}, at::TensorOptions().dtype(at::kByte).device(dev));
                std::int64_t offset = 0;
                read = sp.read([&](Bytes piece) {
                    if (dev.is_cpu()) {
                        copyToCpu(piece, storages[s], offset);
                    } else {
#ifdef CKPTSCOPE_HELPER_CUDA
                        stager->copy(piece, storages[s], offset);
#endif
                    }
                    offset += static_cast<std::int64_t>(piece.size());
                    onChunk(static_cast<std::uint64_t>(offset));
                    return true;
                });
            } catch (const std::exception& e) {
                if (!isOutOfMemory(e.what()) && dynamic_cast<const std::bad_alloc*>(&e) == nullptr) {
                    throw;
                }
                const std::string first = sp.tensors.empty() ? sp.key : plan.tensors[sp.tensors.front()].path;
                storages.clear();
                views.clear();
                emit({{"event", "error"},
                      {"code", "OutOfMemory"},
                      {"message", "out of memory on " + plan.device + " loading " + first + " (storage " + sp.key +
                                      "): it needs " + gib(sp.nbytes) + ", " + gib(freeBytesOn(dev)) + " free after " +
                                      gib(bytes) + " already loaded"}});
                return 1;
            }
            if (!read) {
                // The file (or a set's member) changed, vanished or is corrupt under the load.
                emit({{"event", "error"},
                      {"code", device::protocol::codeName(read.error().code)},
                      {"message", read.error().describe()}});
                return 1;
            }
            bytes += sp.nbytes;
            for (auto ti : sp.tensors) {
                views[ti] = makeView(storages[s], plan.tensors[ti]);
                ++tensors;
            }
            if (pacer.due() || s + 1 == plan.storages.size()) {
                emitProgress(bytes);
            }
        }
#ifdef CKPTSCOPE_HELPER_CUDA
        if (stager) {
            stager->finish();
        }
#endif
        const double elapsed = seconds();

        std::uint64_t peak = 0;
        std::string peakSource;
#ifdef CKPTSCOPE_HELPER_CUDA
        if (dev.is_cuda()) {
            const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev.index());
            // Index 0 is StatType::AGGREGATE in every LibTorch; the enum itself moved namespaces in 2.x.
            peak = static_cast<std::uint64_t>(stats.reserved_bytes[0].peak);
            peakSource = "cuda-allocator";
        }
#endif
        if (dev.is_cpu()) {
            const std::uint64_t after = rssAnonBytes();
            peak = after > anonBefore ? after - anonBefore : 0;
            peakSource = "rss-anon";
        }

        if (plan.verify) {
            emitChecks(plan, storages, views, emit);
        }
        views.clear();
        storages.clear();
#ifdef CKPTSCOPE_HELPER_CUDA
        if (dev.is_cuda()) {
            c10::cuda::CUDACachingAllocator::emptyCache();
        }
#endif
        json result = {{"event", "result"},
                       {"device", plan.device},
                       {"device_uuid", uuid},
                       {"tensors_loaded", tensors},
                       {"storages_loaded", plan.storages.size()},
                       {"bytes", bytes},
                       {"seconds", elapsed},
                       {"gb_per_s", elapsed > 0 ? static_cast<double>(bytes) / elapsed / 1e9 : 0.0},
                       {"peak_bytes", peak},
                       {"peak_source", peakSource}};
        emit(result);
        return 0;
    } catch (const std::exception& e) {
        std::string what = e.what();
        if (auto nl = what.find('\n'); nl != std::string::npos) {
            what.resize(nl);  // c10 appends a C++ backtrace
        }
        emit({{"event", "error"},
              {"code", isOutOfMemory(what) ? "OutOfMemory" : "LoadFailed"},
              {"message", "LibTorch: " + what}});
        return 1;
    }
}

}  // namespace ckpt::helper
