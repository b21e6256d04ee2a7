// A live replay of what N DistributedDataParallel ranks do when each calls torch.load(path)
// without map_location: every rank has a context on its own GPU (rank r on cuda:(r mod GPUs)),
// and every storage goes back to the device it was saved from, so a file saved from cuda:0 puts N
// contexts and N copies of the weights on GPU 0. N CUDA-engine processes do exactly that, hold it
// together while every GPU's memory is sampled, and release it; with a map_location each places its
// storages where that mapping sends them, which shows the fixed layout.
//
// The ranks create their contexts at the same moment, as DDP's do, so a rank that measures its own
// context as the device's rise (a container, a MIG instance: NVML cannot name it) counts the others'
// too. So every rank creates its contexts and waits; the client measures each device's rise with
// every context there and nothing else, divides it among them, and only then lets the ranks load.
// What a device is expected to hold is what N torch.load calls would: the contexts plus what torch's
// caching allocator would reserve for each rank's storages there (torch_allocator.h).
#pragma once

#include "device/sampler.h"
#include "device/testload.h"
#include "util/error.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

namespace ckpt::device {

struct ReplayRequest {
    std::string path;
    bool set = false;  // `path` names a set, read in place by each rank (TestloadRequest::set)
    int ranks = 2;
    std::string mapLocation;  // "" = none, as plain torch.load; else a --map-location spec
    std::string select;
    std::chrono::milliseconds interval{20};
    std::chrono::milliseconds hold{800};  // how long every rank holds its memory, for the chart
    std::optional<std::chrono::milliseconds> silenceTimeout;
    std::string enginePath;  // "" = findHelper(Engine::Cuda)
};

struct ReplayRank {
    int rank = 0;
    std::string device;  // its own GPU: cuda:(rank mod torch.cuda.device_count()), CUDA's numbering here
    std::map<std::string, std::uint64_t> bytesByDevice;
    // What torch's caching allocator would reserve for those storages on each GPU.
    std::map<std::string, std::uint64_t> torchReservedByDevice;
    std::map<std::string, std::string> uuids;  // every device it made a context on -> its UUID
    std::uint64_t contextBytes = 0;            // one context, on its own GPU
    // Every context it made: what it took (its own NVML figure, else the device's share: see
    // ReplayDevice::contextSource) and how the rank itself measured it.
    std::map<std::string, std::uint64_t> contextsByDevice;
    std::map<std::string, std::string> contextSources;
    // A rank that failed (out of memory on a device the others filled): why, and how far it got.
    std::string error;
    ErrorCode errorCode = ErrorCode::LoadFailed;
    std::uint64_t bytesPlaced = 0;
    std::uint64_t totalBytes = 0;
};

struct ReplayDevice {
    std::string device;
    std::string uuid;
    std::uint64_t measuredPeakBytes = 0;  // the largest rise in the device's used memory (NVML)
    // What N torch.load calls would hold there: the contexts plus what torch's caching allocator
    // reserves for each rank's storages.
    std::uint64_t expectedBytes = 0;
    int contexts = 0;                // processes with a context on it
    int weightCopies = 0;            // ranks that put storages on it
    std::uint64_t contextBytes = 0;  // one context there
    // "nvml-process" (each rank's own row in NVML's list), "device-rise" (the device's rise while
    // every context there existed and nothing else was allocated, divided among them) or
    // "engine" (what the ranks measured themselves, around creating each: others may be counted).
    std::string contextSource;
};

struct ReplayReport {
    std::vector<ReplayRank> ranks;
    std::vector<ReplayDevice> devices;
    std::uint64_t weightBytes = 0;   // one rank's storage bytes
    std::uint64_t contextBytes = 0;  // one context on the device the verdict names
    std::string verdict;             // "cuda:0 peaks at 4 x (context 300 MiB + 3.1 GiB) = ..."
    int failedRanks = 0;             // ranks that could not load (each says why in ranks[].error)
    Timeline timeline;
};

// Progress: how many ranks have loaded so far. A rank that fails (out of memory) does not end the
// replay: the others hold what they loaded, every device is measured, and the report names the rank
// that failed and how far it got (failedRanks > 0). Errors are for what stops the replay itself: no
// GPU, no engine, a bad request, a silent rank (CKPTSCOPE_HELPER_TIMEOUT), cancel, and a file that
// torch.load cannot put on this machine at all (saved on cuda:1 where torch sees one GPU: every rank
// says so, and that is the error, DeviceUnavailable, in torch's words).
Expected<ReplayReport> ddpReplay(const ReplayRequest& request, const std::function<void(int loadedRanks)>& progress,
                                 std::stop_token stop = {}, std::shared_ptr<const Nvml> nvml = nullptr);

}  // namespace ckpt::device
