// ckptscope-cuda-engine: test-loads a checkpoint onto an NVIDIA GPU with nothing but the driver.
// It links neither LibTorch nor Qt and opens libcuda.so.1 at run time, so it ships in the main
// package and works wherever the NVIDIA driver is installed. It speaks the helpers' protocol
// (core/device/testload.h) on stdin and stdout:
//   {"cmd":"testload","path":..,"device":"cuda:N","select":..,"verify":bool[,"set":true]}
//       one load onto cuda:N, then start/progress/storage_check/skipped/result or error events;
//   {"cmd":"replay","path":..,"rank":r,"device":"cuda:R","map_location":"" | SPEC,"select":..}
//       one DDP rank of a replay: a context on its own GPU, then every storage where
//       torch.load(map_location=SPEC) (or none) puts it; a "loaded" event, then it holds all of it
//       until a "release" line (or end of input), so the ranks' memory piles up together, saying
//       "holding" every second so the client knows it is alive. A rank that fails (out of memory)
//       says how far it got in its error event: "bytes_placed", "bytes_by_device".
// cuda:N is CUDA's ordinal in this process's environment (CUDA_VISIBLE_DEVICES), as in torch.
#include "checkpoint/checkpoint.h"
#include "cuda_load.h"
#include "device/helper_protocol.h"
#include "sharded/set_view.h"
#include "transform/options.h"

#include <array>
#include <cerrno>
#include <csignal>
#include <iostream>
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace {

using namespace ckpt;
using namespace ckpt::device;
using nlohmann::json;

constexpr std::string_view kName = "ckptscope-cuda-engine";

int fail(const Error& e)
{
    return protocol::emitError(e.code, e.describe());
}

constexpr int kHeartbeatMs = 1000;

// Waits for "release" (or the end of input) on stdin, saying "holding" every second: a rank
// waiting on the others must not look silent to the client.
void holdUntilReleased(int rank)
{
    std::string pending;
    std::array<char, 256> buf{};
    while (true) {
        pollfd in{STDIN_FILENO, POLLIN, 0};
        const int ready = ::poll(&in, 1, kHeartbeatMs);
        if (ready == 0) {
            protocol::emit({{"event", "holding"}, {"rank", rank}});
            continue;
        }
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        const ssize_t n = ready > 0 ? ::read(STDIN_FILENO, buf.data(), buf.size()) : -1;
        if (n <= 0) {
            return;  // end of input or an error: the client is gone or done with us
        }
        pending.append(buf.data(), static_cast<std::size_t>(n));
        if (pending.find("release") != std::string::npos) {
            return;
        }
    }
}

// "cuda", "cuda:3" -> ordinal (`current` for a bare "cuda", as torch uses the current device).
std::optional<int> cudaOrdinal(const std::string& location, int current)
{
    if (location == "cuda") {
        return current;
    }
    if (!location.starts_with("cuda:") || location.size() == 5 || location.size() > 10) {
        return std::nullopt;
    }
    int n = 0;
    for (std::size_t i = 5; i < location.size(); ++i) {
        if (location[i] < '0' || location[i] > '9') {
            return std::nullopt;
        }
        n = n * 10 + (location[i] - '0');
    }
    return n;
}

// Where torch.load puts each storage for a rank whose current device is `own`: its saved tag,
// through map_location. A CUDA index the machine lacks fails as torch fails.
Expected<std::vector<Placement>> placementsFor(const Checkpoint& ck, const LoadSelection& sel,
                                               const transform::LocationMap& map, int own, int deviceCount)
{
    std::vector<Placement> out;
    for (std::uint32_t i = 0; i < sel.storages.size(); ++i) {
        const std::string location = map.apply(sel.storages[i].location);
        int device = -1;
        if (location.starts_with("cuda")) {
            const auto ordinal = cudaOrdinal(location, own);
            if (!ordinal) {
                return makeError(ErrorCode::Usage, "storage " + ck.storages[sel.storages[i].storage].key +
                                                       " is placed on '" + location + "', not a CUDA device");
            }
            if (*ordinal >= deviceCount) {
                return makeError(ErrorCode::DeviceUnavailable,
                                 "Attempting to deserialize object on CUDA device " + std::to_string(*ordinal) +
                                     " but torch.cuda.device_count() is " + std::to_string(deviceCount) + " (storage " +
                                     ck.storages[sel.storages[i].storage].key + ")");
            }
            device = *ordinal;
        }
        out.push_back({i, device});
    }
    return out;
}

void emitSkipped(const LoadSelection& sel)
{
    for (const auto& s : sel.skipped) {
        protocol::emit({{"event", "skipped"}, {"path", s.path}, {"reason", s.reason}});
    }
}

int testload(const Checkpoint& ck, const LoadSelection& sel, const CudaDriver& cu, std::shared_ptr<const Nvml> nvml,
             const TorchAllocatorConfig& allocator, const json& req)
{
    const auto ordinal = cudaOrdinal(req.value("device", std::string()), 0);
    if (!ordinal) {
        return protocol::emitError(ErrorCode::Usage, std::string(kName) + " loads onto cuda:N, not '" +
                                                         req.value("device", std::string()) + "'");
    }
    CudaLoad load(cu, std::move(nvml), ck, sel, protocol::emit, allocator);
    if (auto ok = load.openContext(*ordinal); !ok) {
        return fail(ok.error());
    }
    protocol::emit(load.startEvent());
    std::vector<Placement> all;
    for (std::uint32_t i = 0; i < sel.storages.size(); ++i) {
        all.push_back({i, *ordinal});
    }
    if (auto ok = load.load(all); !ok) {
        return fail(ok.error());
    }
    if (req.value("verify", false)) {
        if (auto ok = load.verify(); !ok) {
            return fail(ok.error());
        }
    }
    emitSkipped(sel);
    protocol::emit(load.resultEvent());
    return 0;
}

int replay(const Checkpoint& ck, const LoadSelection& sel, const CudaDriver& cu, std::shared_ptr<const Nvml> nvml,
           const TorchAllocatorConfig& allocator, const json& req)
{
    const int rank = req.value("rank", 0);
    const auto own = cudaOrdinal(req.value("device", std::string()), 0);
    if (!own) {
        return protocol::emitError(ErrorCode::Usage, "a replay rank needs its own cuda:N");
    }
    transform::LocationMap map;
    if (const std::string spec = req.value("map_location", std::string()); !spec.empty()) {
        auto parsed = transform::LocationMap::parse(spec);
        if (!parsed) {
            return fail(parsed.error());
        }
        map = *parsed;
    }
    CudaLoad load(cu, std::move(nvml), ck, sel, protocol::emit, allocator);
    // A rank that fails says how far it got, so the client can still show every device's table.
    auto failRank = [&](const Error& e) {
        json ev = {{"event", "error"},
                   {"code", std::string(protocol::codeName(e.code))},
                   {"message", e.describe()},
                   {"rank", rank},
                   {"bytes_placed", load.bytesPlaced()},
                   {"total_bytes", sel.totalBytes},
                   {"bytes_by_device", load.bytesByDevice()},
                   {"uuids", load.touchedUuids()}};
        protocol::emit(ev);
        return e.code == ErrorCode::Usage ? 2 : 1;
    };
    // DDP's set_device(rank) and process group come first: the rank's own context.
    if (auto ok = load.openContext(*own); !ok) {
        return failRank(ok.error());
    }
    auto placements = placementsFor(ck, sel, map, *own, cu.deviceCount());
    if (!placements) {
        return failRank(placements.error());
    }
    for (const auto& p : *placements) {
        if (p.device >= 0) {
            if (auto ok = load.openContext(p.device); !ok) {
                return failRank(ok.error());
            }
        }
    }
    json start = load.startEvent();
    start["rank"] = rank;
    protocol::emit(start);
    if (auto ok = load.load(*placements); !ok) {
        return failRank(ok.error());
    }
    json loaded = {
        {"event", "loaded"}, {"rank", rank}, {"bytes_by_device", load.bytesByDevice()}, {"uuids", load.touchedUuids()}};
    json peaks = json::object();
    for (const auto& [device, uuid] : load.touchedUuids()) {
        if (auto ordinal = cudaOrdinal(device, *own)) {
            const auto peak = load.peakOn(*ordinal);
            peaks[device] = {{"peak_bytes", peak.bytes}, {"source", peak.source}};
        }
    }
    loaded["peaks"] = peaks;
    protocol::emit(loaded);
    // Hold everything until the client has seen every rank loaded (or gave up on us).
    holdUntilReleased(rank);
    json result = load.resultEvent();
    result["rank"] = rank;
    protocol::emit(result);
    return 0;
}

int run()
{
    // The client starts us in a process group of our own; die with it rather than hold GPU memory.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    auto req = protocol::readRequest(kName, "testload,replay");
    if (!req) {
        return 2;
    }
    auto opened = sharded::openInput(protocol::textField(*req, "path"), req->value("set", false));
    if (!opened) {
        return fail(opened.error());
    }
    auto sel = selectForLoad(**opened, protocol::textField(*req, "select"));
    if (!sel) {
        return fail(sel.error());
    }
    auto cu = CudaDriver::load();
    if (!cu) {
        return fail(cu.error());
    }
    std::shared_ptr<const Nvml> nvml;
    if (auto loaded = Nvml::load()) {
        nvml = *loaded;
    }
    // torch would refuse a malformed PYTORCH_ALLOC_CONF at its first allocation; so does the model.
    auto allocator = TorchAllocatorConfig::fromEnvironment();
    if (!allocator) {
        return fail(allocator.error());
    }
    const bool isReplay = req->value("cmd", std::string()) == "replay";
    return isReplay ? replay(**opened, *sel, **cu, nvml, *allocator, *req)
                    : testload(**opened, *sel, **cu, nvml, *allocator, *req);
}

}  // namespace

int main()
{
    // A request field of the wrong type (json::type_error) or a failed allocation must still end in
    // an error event the client can report, not in std::terminate.
    try {
        return run();
    } catch (const std::exception& e) {
        return protocol::emitError(ErrorCode::Internal, std::string("ckptscope-cuda-engine: ") + e.what());
    }
}
