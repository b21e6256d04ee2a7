// Test-load: prove that a checkpoint loads on a chosen device, and measure what it costs there.
//
// LibTorch lives in a helper process (docs/design.md): this client finds `ckptscope-torch-helper`,
// starts it, sends one JSON request line on its stdin and reads JSON event lines from its stdout
// while a Sampler watches every GPU. Cancel kills the helper; when it exits its CUDA context is
// gone, so "did any other GPU move" is measured cleanly.
//
// Helper protocol (one request line in, event lines out; every line a few hundred bytes at most
// apart from key paths, so a line over 1 MiB or more than 64 MiB in all means a runaway helper):
//   -> {"cmd":"testload","path":"/x.pt","device":"cpu"|"cuda:N","select":"model","verify":false}
//      ("set":true: the path names a multi-file set, which the engine opens as one checkpoint whose
//      storages it reads from the member files, sharded::openInput; nothing is consolidated first)
//   <- {"event":"start","device":"cuda:0","total_bytes":N,"total_tensors":N,
//       "torch_version":"1.13.1","cuda":false}
//   <- {"event":"progress","bytes":N,"tensors":N,"total_bytes":N,"seconds":S}   (repeated, also
//       within one storage's copy)
//   <- {"event":"verify","bytes":N,"total_bytes":N}                  (repeated while hashing)
//   <- {"event":"storage_check","storage":KEY,"bytes":N,"sha256":..}   (verify; one per storage)
//   <- {"event":"check","path":..,"storage":KEY,"sha256":..}    (verify; one per tensor; instead of
//       "sha256" a "note" when its C-order bytes outnumber its storage's: an expanded view)
//   <- {"event":"skipped","path":..,"reason":..}                       (one per tensor not placed)
//   <- {"event":"result","device":..,"device_uuid":"GPU-..." (CUDA builds),"tensors_loaded":N,
//       "storages_loaded":N,"bytes":N,"seconds":S,"gb_per_s":R,"peak_bytes":N,
//       "peak_source":"cuda-allocator"|"rss-anon"}
//   <- {"event":"error","code":"DeviceUnavailable"|"OutOfMemory"|"LoadFailed"|...,"message":"..."}
// A helper that sends no event for the silence timeout is killed with its whole process group.
#pragma once

#include "device/nvml.h"
#include "device/sampler.h"
#include "util/error.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace ckpt::device {

// Which process materialises the tensors. Auto: the CUDA engine for cuda:N (it needs only the
// NVIDIA driver), the LibTorch helper for the CPU.
enum class Engine { Auto, Cuda, Torch };
[[nodiscard]] std::string_view engineName(Engine e);  // "auto", "cuda", "torch"

struct TestloadRequest {
    Engine engine = Engine::Auto;
    std::string path;                        // the checkpoint
    bool set = false;                        // `path` names a set: the engine reads it in place (openInput)
    std::string device = "cpu";              // "cpu" or "cuda:N"
    std::string select;                      // key path: only tensors at or under it ("" = all)
    bool verify = false;                     // the helper hashes what landed (StorageCheck, TensorCheck)
    std::chrono::milliseconds interval{20};  // sampler interval
    std::string helperPath;                  // "" = findHelper(engine)
    // The helper is killed once it sends no event for this long. Unset: CKPTSCOPE_HELPER_TIMEOUT
    // (seconds, fractions allowed) or 30 s.
    std::optional<std::chrono::milliseconds> silenceTimeout;
    // With verify: the sha256 of a storage's bytes as the file holds them, by storage key. Every
    // storage hash from the helper must equal it, or the test-load fails. Unset: not compared.
    std::function<Expected<std::string>(const std::string& storageKey)> fileStorageSha256;
    // Called on the calling thread as soon as the helper process exists, before it loads anything:
    // a caller with a sampler of its own tracks the pid there (the window's live chart).
    std::function<void(pid_t)> onHelperStarted;
};

struct TestloadProgress {
    std::uint64_t bytes = 0;  // materialised so far
    std::uint64_t tensors = 0;
    std::uint64_t totalBytes = 0;
    std::uint64_t totalTensors = 0;
    double seconds = 0;  // since the helper started loading
    double bytesPerSecond = 0;
};

struct DeviceDelta {
    std::string device;           // "cuda:1"
    std::string uuid;             // "GPU-..."
    std::uint64_t riseBytes = 0;  // largest rise above its memory before the load
    std::uint64_t ownBytes = 0;   // the largest share NVML gave our processes there
    // Who moved it: "this load" (NVML lists our processes there), "other processes" (NVML sees
    // ours elsewhere but not there: another job's allocation) or "unknown" (NVML cannot tell ours
    // from others', as in a container's PID namespace).
    std::string by;
};

struct TensorCheck {
    std::string path;
    std::string storage;  // its storage's key
    std::string sha256;   // of the tensor's C-order bytes as materialised; "" when not hashed
    std::string note;     // why not hashed: an expanded view (stride 0) bigger than its storage
};

struct StorageCheck {
    std::string storage;  // key
    std::uint64_t bytes = 0;
    std::string sha256;        // of its bytes as they sit on the device
    bool matchesFile = false;  // equal to fileStorageSha256's (false when that was not given)
};

struct SkippedTensor {
    std::string path;
    std::string reason;  // e.g. "sparse tensors are not test-loaded"
};

struct TestloadReport {
    std::string device;      // as requested ("cuda:0")
    std::string deviceUuid;  // from the helper when built with CUDA
    std::uint64_t tensorsLoaded = 0;
    std::uint64_t storagesLoaded = 0;
    std::uint64_t bytes = 0;      // storage bytes copied to the device
    double seconds = 0;           // the helper's load time (excludes its start-up)
    double gbPerS = 0;            // bytes / seconds / 1e9
    std::uint64_t peakBytes = 0;  // the device's peak memory for this load
    // "nvml-process", "driver-meminfo", "engine-allocations" (CUDA engine), "cuda-allocator",
    // "rss-anon" (LibTorch helper), "nvml-device" (the device's rise, when the helper gave none)
    std::string peakSource;
    std::string peakNote;    // what was doubtful about the peak, or ""
    std::string engine;      // "cuda" or "torch": which one loaded
    std::string deviceName;  // "NVIDIA H100 80GB HBM3" (CUDA engine)
    // The CUDA engine: what the context took on the device before the first copy, and what
    // torch.load(map_location=device) would hold there (context + its caching allocator's segments).
    std::uint64_t contextBytes = 0;
    std::string contextSource;  // "nvml-process", "nvml-device" or "unknown"
    std::uint64_t torchPeakBytes = 0;
    std::uint64_t torchReservedBytes = 0;
    std::string torchAllocConf;  // the allocator settings the prediction models (PYTORCH_ALLOC_CONF)
    // NVML lists processes on the device but never the engine: a PID namespace hides ours.
    bool pidHidden = false;
    bool otherDevicesTouched = false;       // this load put memory on a GPU other than the chosen one
    std::vector<DeviceDelta> otherDevices;  // every other GPU that moved, by whom, and by how much
    std::string otherDevicesDoubt;          // a GPU moved and NVML cannot say by whom, in a sentence
    Timeline timeline;                      // every device, over the whole helper run
    std::vector<SkippedTensor> skipped;
    std::vector<TensorCheck> checks;          // only when verify was asked
    std::vector<StorageCheck> storageChecks;  // only when verify was asked
    std::string helperPath;
    std::string torchVersion;
    bool helperHasCuda = false;
    double helperSeconds = 0;  // wall time of the helper process, start-up included
};

using ProgressFn = std::function<void(const TestloadProgress&)>;

// The engine's executable: env CKPTSCOPE_TORCH_HELPER / CKPTSCOPE_CUDA_ENGINE, else
// <exe dir>/../libexec/ckptscope/<name> (installed), else the build tree's app/<dir>/<name>. The
// error says where it looked and what provides it. `engine` Auto means Torch here.
Expected<std::string> findHelper(Engine engine);
Expected<std::string> findTorchHelper();
// Auto resolved for a device: cuda:N -> Cuda, cpu -> Torch.
[[nodiscard]] Engine engineFor(Engine requested, const std::string& device);

// The request's timeout, else CKPTSCOPE_HELPER_TIMEOUT (seconds, fractions allowed), else 30 s;
// a malformed variable is a Usage error naming it. The DDP replay honours it too.
Expected<std::chrono::milliseconds> helperSilenceTimeout(const std::optional<std::chrono::milliseconds>& requested);

// Runs one test-load. Blocks; call it off the GUI thread. `progress` runs on the calling thread.
// Cancellation (stop requested) kills the helper and returns ErrorCode::Cancelled. Error codes:
// DeviceUnavailable (no such device, LibTorch without CUDA), OutOfMemory (names the tensor and
// free vs needed), LoadFailed (also a helper that crashed, went silent, flooded its output or
// sent something that is not the protocol), Io/NotCheckpoint/... (the file), Usage (a bad device
// or CKPTSCOPE_HELPER_TIMEOUT), Cancelled.
// `nvml` may be null (it is loaded here if possible).
Expected<TestloadReport> testLoad(const TestloadRequest& request, const ProgressFn& progress = {},
                                  std::stop_token stop = {}, std::shared_ptr<const Nvml> nvml = nullptr);

// What plain torch.load (no map_location) would do with this file's storages here: each storage
// goes back to the device it was saved from.
struct PlacementRow {
    std::string location;  // as saved: "cpu", "cuda:3", "mps"
    std::uint64_t bytes = 0;
    bool fails = false;  // torch.load would raise here
    std::string reason;  // torch's complaint (util/device_name.h), e.g. "Attempting to deserialize
                         // object on CUDA device 3 but torch.cuda.device_count() is 1. Please use ..."
};
struct TorchLoadPlacement {
    std::vector<PlacementRow> rows;
    bool wouldFail = false;
};
// `bytesByLocation` is Checkpoint::bytesByLocation(); `cudaDevices` what torch.cuda.device_count()
// says here (Inventory::cudaCount(), CUDA's count in this environment, not NVML's).
[[nodiscard]] TorchLoadPlacement
torchLoadPlacement(const std::vector<std::pair<std::string, std::uint64_t>>& bytesByLocation, int cudaDevices);

// Parses "cpu", "cuda", "cuda:N" (N >= 0); nullopt for anything else. Returns the normalised id.
[[nodiscard]] std::optional<std::string> parseDevice(const std::string& text);

}  // namespace ckpt::device
