// ckptscope-cuda-engine: test-loads a checkpoint onto an NVIDIA GPU with nothing but the driver.
// It links neither LibTorch nor Qt and opens libcuda.so.1 at run time, so it ships in the main
// package and works wherever the NVIDIA driver is installed. It speaks the helpers' protocol
// (core/device/testload.h) on stdin and stdout:
//   {"cmd":"testload","path":..,"device":"cuda:N","select":..,"verify":bool[,"set":true]}
//       one load onto cuda:N, then start/progress/storage_check/skipped/result or error events;
//   {"cmd":"replay","path":..,"rank":r,"device":"cuda:R","map_location":"" | SPEC,"select":..}
//       one DDP rank of a replay: a context on its own GPU and on every GPU its storages go to, then
//       a "start" event with each context's cost ("contexts"), then it waits for a "load" line
//       (saying "waiting" every second): the client measures the contexts while no rank allocates
//       anything else. Then every storage where torch.load(map_location=SPEC) (or none) puts it; a
//       "loaded" event (with what torch would reserve there, "torch_reserved_by_device"), then it
//       holds all of it until a "release" line (or end of input), so the ranks' memory piles up
//       together, saying "holding" every second so the client knows it is alive. A rank that fails
//       (out of memory) says how far it got in its error event: "bytes_placed", "bytes_by_device".
// Until its start event it says {"event":"starting","stage":...} at once and every second: reading a
// large set, cuInit on a machine of many GPUs and creating a context each can take longer than the
// client waits for a word. cuda:N is CUDA's ordinal in this process's environment
// (CUDA_VISIBLE_DEVICES), as in torch.
#include "checkpoint/checkpoint.h"
#include "cuda_load.h"
#include "device/helper_protocol.h"
#include "sharded/set_view.h"
#include "transform/options.h"
#include "util/device_name.h"

#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <iostream>
#include <mutex>
#include <poll.h>
#include <stop_token>
#include <sys/prctl.h>
#include <thread>
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

constexpr auto kHeartbeat = std::chrono::milliseconds(1000);

// Says {"event":"starting","stage":...} at once and every second until stop(): the client kills an
// engine that says nothing for its silence limit, and start-up is where an engine can be slow
// without being stuck.
class StartupBeat {
public:
    StartupBeat()
        : thread_([this](const std::stop_token& stop) {
              std::unique_lock lock(mutex_);
              while (!stop.stop_requested()) {
                  protocol::emit({{"event", "starting"}, {"stage", stage_}});
                  wake_.wait_for(lock, stop, kHeartbeat, [] { return false; });
              }
          })
    {
    }
    void stage(std::string what)
    {
        const std::lock_guard lock(mutex_);
        stage_ = std::move(what);
    }
    // Before the start event: nothing of the beat's comes after it.
    void stop()
    {
        thread_.request_stop();
        if (thread_.joinable()) {
            thread_.join();
        }
    }

private:
    std::mutex mutex_;
    std::condition_variable_any wake_;
    std::string stage_ = "reading the checkpoint";
    std::jthread thread_;
};

// Waits for a line saying `word` on stdin, saying {"event":`saying`,"rank":r} every second: a rank
// waiting on the others must not look silent to the client. False at the end of input (the client
// is gone or done with us) or when another word came instead ("release" before "load").
bool awaitWord(std::string_view word, std::string_view saying, int rank)
{
    static std::string pending;
    std::array<char, 256> buf{};
    while (true) {
        if (const auto nl = pending.find('\n'); nl != std::string::npos) {
            const std::string line = pending.substr(0, nl);
            pending.erase(0, nl + 1);
            return line.find(word) != std::string::npos;
        }
        pollfd in{STDIN_FILENO, POLLIN, 0};
        const int ready = ::poll(&in, 1, static_cast<int>(kHeartbeat.count()));
        if (ready == 0) {
            protocol::emit({{"event", saying}, {"rank", rank}});
            continue;
        }
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        const ssize_t n = ready > 0 ? ::read(STDIN_FILENO, buf.data(), buf.size()) : -1;
        if (n <= 0) {
            return false;
        }
        pending.append(buf.data(), static_cast<std::size_t>(n));
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
                                 "torch.load fails here: " + cudaDeviceCountText(*ordinal, deviceCount) + " (storage " +
                                     ck.storages[sel.storages[i].storage].key +
                                     " was saved on cuda:" + std::to_string(*ordinal) + ")");
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
             const TorchAllocatorConfig& allocator, const json& req, StartupBeat& beat)
{
    const auto ordinal = cudaOrdinal(req.value("device", std::string()), 0);
    if (!ordinal) {
        beat.stop();
        return protocol::emitError(ErrorCode::Usage, std::string(kName) + " loads onto cuda:N, not '" +
                                                         req.value("device", std::string()) + "'");
    }
    CudaLoad load(cu, std::move(nvml), ck, sel, protocol::emit, allocator);
    beat.stage("creating a CUDA context on cuda:" + std::to_string(*ordinal));
    if (auto ok = load.openContext(*ordinal); !ok) {
        beat.stop();
        return fail(ok.error());
    }
    beat.stop();
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
           const TorchAllocatorConfig& allocator, const json& req, StartupBeat& beat)
{
    const int rank = req.value("rank", 0);
    const auto own = cudaOrdinal(req.value("device", std::string()), 0);
    if (!own) {
        beat.stop();
        return protocol::emitError(ErrorCode::Usage, "a replay rank needs its own cuda:N");
    }
    transform::LocationMap map;
    if (const std::string spec = req.value("map_location", std::string()); !spec.empty()) {
        auto parsed = transform::LocationMap::parse(spec);
        if (!parsed) {
            beat.stop();
            return fail(parsed.error());
        }
        map = *parsed;
    }
    CudaLoad load(cu, std::move(nvml), ck, sel, protocol::emit, allocator);
    // A rank that fails says how far it got, so the client can still show every device's table.
    auto failRank = [&](const Error& e) {
        beat.stop();
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
    auto placements = placementsFor(ck, sel, map, *own, cu.deviceCount());
    beat.stage("creating a CUDA context on cuda:" + std::to_string(*own));
    if (auto ok = load.openContext(*own); !ok) {
        return failRank(ok.error());
    }
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
    beat.stop();
    json start = load.startEvent();
    start["rank"] = rank;
    json contexts = json::object();
    for (const auto& [device, c] : load.contexts()) {
        contexts[device] = {{"bytes", c.bytes}, {"source", c.source}};
    }
    start["contexts"] = contexts;
    protocol::emit(start);
    // Every rank's contexts exist before any rank allocates: the client measures them now.
    if (!awaitWord("load", "waiting", rank)) {
        return 0;
    }
    if (auto ok = load.load(*placements); !ok) {
        return failRank(ok.error());
    }
    json loaded = {{"event", "loaded"},
                   {"rank", rank},
                   {"bytes_by_device", load.bytesByDevice()},
                   {"torch_reserved_by_device", load.torchReservedByDevice()},
                   {"uuids", load.touchedUuids()}};
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
    awaitWord("release", "holding", rank);
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
    StartupBeat beat;
    auto failed = [&beat](const Error& e) {
        beat.stop();
        return fail(e);
    };
    auto opened = sharded::openInput(protocol::textField(*req, "path"), req->value("set", false));
    if (!opened) {
        return failed(opened.error());
    }
    auto sel = selectForLoad(**opened, protocol::textField(*req, "select"));
    if (!sel) {
        return failed(sel.error());
    }
    beat.stage("starting the CUDA driver (cuInit)");
    auto cu = CudaDriver::load();
    if (!cu) {
        return failed(cu.error());
    }
    std::shared_ptr<const Nvml> nvml;
    if (auto loaded = Nvml::load()) {
        nvml = *loaded;
    }
    // torch would refuse a malformed PYTORCH_ALLOC_CONF at its first allocation; so does the model.
    auto allocator = TorchAllocatorConfig::fromEnvironment();
    if (!allocator) {
        return failed(allocator.error());
    }
    const bool isReplay = req->value("cmd", std::string()) == "replay";
    return isReplay ? replay(**opened, *sel, **cu, nvml, *allocator, *req, beat)
                    : testload(**opened, *sel, **cu, nvml, *allocator, *req, beat);
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
