// A live replay of what N DistributedDataParallel ranks do when each calls torch.load(path)
// without map_location: every rank has a context on its own GPU (rank r on cuda:(r mod GPUs)),
// and every storage goes back to the device it was saved from, so a file saved from cuda:0 puts N
// contexts and N copies of the weights on GPU 0. N CUDA-engine processes do exactly that, hold it
// together while every GPU's memory is sampled, and release it; with a map_location each places its
// storages where that mapping sends them, which shows the fixed layout.
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
    std::map<std::string, std::string> uuids;  // every device it made a context on -> its UUID
    std::uint64_t contextBytes = 0;            // one context, on its own GPU
    // A rank that failed (out of memory on a device the others filled): why, and how far it got.
    std::string error;
    std::uint64_t bytesPlaced = 0;
    std::uint64_t totalBytes = 0;
};

struct ReplayDevice {
    std::string device;
    std::string uuid;
    std::uint64_t measuredPeakBytes = 0;  // the largest rise in the device's used memory (NVML)
    std::uint64_t expectedBytes = 0;      // contexts + weights the ranks placed there
    int contexts = 0;                     // processes with a context on it
    int weightCopies = 0;                 // ranks that put storages on it
};

struct ReplayReport {
    std::vector<ReplayRank> ranks;
    std::vector<ReplayDevice> devices;
    std::uint64_t weightBytes = 0;   // one rank's storage bytes
    std::uint64_t contextBytes = 0;  // one context (the largest a rank reported)
    std::string verdict;             // "cuda:0 peaks at 4 x (context 300 MiB + 3.1 GiB) = ..."
    int failedRanks = 0;             // ranks that could not load (each says why in ranks[].error)
    Timeline timeline;
};

// Progress: how many ranks have loaded so far. A rank that fails (out of memory) does not end the
// replay: the others hold what they loaded, every device is measured, and the report names the rank
// that failed and how far it got (failedRanks > 0). Errors are for what stops the replay itself: no
// GPU, no engine, a bad request, a silent rank (CKPTSCOPE_HELPER_TIMEOUT), cancel.
Expected<ReplayReport> ddpReplay(const ReplayRequest& request, const std::function<void(int loadedRanks)>& progress,
                                 std::stop_token stop = {}, std::shared_ptr<const Nvml> nvml = nullptr);

}  // namespace ckpt::device
