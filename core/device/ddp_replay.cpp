#include "device/ddp_replay.h"

#include "device/cuda_driver.h"
#include "device/helper_process.h"
#include "device/helper_protocol.h"
#include "util/bytes.h"
#include "util/printable.h"

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

namespace ckpt::device {
namespace {

using detail::HelperProcess;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kDefaultSilence = std::chrono::seconds(30);

Error onFile(ErrorCode code, std::string message, const std::string& path)
{
    Error e = makeError(code, std::move(message));
    e.path = path;
    return e;
}

struct Rank {
    std::unique_ptr<HelperProcess> proc;
    ReplayRank info;
    bool loaded = false;
    bool done = false;
    std::optional<Error> error;
    Clock::time_point lastEvent = Clock::now();
};

void take(Rank& r, const std::string& line)
{
    const json ev = json::parse(line, nullptr, false);
    if (ev.is_discarded() || !ev.is_object()) {
        return;
    }
    r.lastEvent = Clock::now();
    const std::string kind = ev.value("event", std::string());
    if (kind == "start") {
        r.info.contextBytes = ev.value("context_bytes", std::uint64_t{0});
    } else if (kind == "loaded") {
        r.loaded = true;
        if (auto it = ev.find("bytes_by_device"); it != ev.end() && it->is_object()) {
            for (const auto& [device, bytes] : it->items()) {
                if (bytes.is_number_unsigned()) {
                    r.info.bytesByDevice[device] = bytes.get<std::uint64_t>();
                }
            }
        }
    } else if (kind == "result") {
        r.done = true;
    } else if (kind == "error") {
        r.error = makeError(protocol::codeFromName(ev.value("code", std::string())),
                            "rank " + std::to_string(r.info.rank) + ": " + ev.value("message", std::string()));
    }
}

// Reads what every rank wrote; an error from a silent, dead or failing rank.
std::optional<Error> pumpAll(std::vector<Rank>& ranks, std::chrono::milliseconds silence, const std::string& engine)
{
    std::vector<std::string> lines;
    for (auto& r : ranks) {
        if (r.done) {
            continue;
        }
        const auto state = r.proc->pump(5, lines);
        for (const auto& line : lines) {
            take(r, line);
        }
        lines.clear();
        if (r.error) {
            return r.error;
        }
        if (state == HelperProcess::Pump::Overflow) {
            return makeError(ErrorCode::LoadFailed,
                             "rank " + std::to_string(r.info.rank) + "'s engine " + engine + " " + r.proc->overflow());
        }
        if (state == HelperProcess::Pump::Closed && !r.done) {
            std::string why = "rank " + std::to_string(r.info.rank) + "'s engine " + engine + " stopped early";
            if (auto last = r.proc->lastErrLine(); !last.empty()) {
                why += ": " + last;
            }
            return makeError(ErrorCode::LoadFailed, why);
        }
        if (Clock::now() - r.lastEvent >= silence) {
            return makeError(ErrorCode::LoadFailed, "rank " + std::to_string(r.info.rank) + "'s engine " + engine +
                                                        " said nothing for too long; killed every rank");
        }
    }
    return std::nullopt;
}

int gpuCount(const std::shared_ptr<const Nvml>& nvml)
{
    if (nvml && nvml->deviceCount() > 0) {
        return nvml->deviceCount();
    }
    auto cu = CudaDriver::load();  // initialises the driver; creates no context
    return cu ? (*cu)->deviceCount() : 0;
}

std::string times(int n, std::uint64_t context, std::uint64_t weights)
{
    std::string s = std::to_string(n) + " x (context " + humanBytes(context);
    if (weights > 0) {
        s += " + " + humanBytes(weights);
    }
    return s + ")";
}

// The expected layout per device, from what each rank placed, and the sentence a user acts on.
void summarise(ReplayReport& report, const ReplayRequest& request)
{
    std::map<std::string, ReplayDevice> byDevice;
    for (const auto& r : report.ranks) {
        report.contextBytes = std::max(report.contextBytes, r.contextBytes);
        std::uint64_t weights = 0;
        std::set<std::string> touched{r.device};
        for (const auto& [device, bytes] : r.bytesByDevice) {
            weights += bytes;
            if (device != "cpu") {
                touched.insert(device);
                byDevice[device].weightCopies += 1;
                byDevice[device].expectedBytes += bytes;
            }
        }
        report.weightBytes = std::max(report.weightBytes, weights);
        for (const auto& d : touched) {
            byDevice[d].contexts += 1;
        }
    }
    for (auto& [device, d] : byDevice) {
        d.device = device;
        d.expectedBytes += static_cast<std::uint64_t>(d.contexts) * report.contextBytes;
        const int column = report.timeline.column(device);
        d.measuredPeakBytes = column > 0 ? report.timeline.maxRise(static_cast<std::size_t>(column)) : 0;
        report.devices.push_back(d);
    }
    if (report.devices.empty()) {
        return;
    }
    const auto worst = std::max_element(
        report.devices.begin(), report.devices.end(),
        [](const ReplayDevice& a, const ReplayDevice& b) { return a.expectedBytes < b.expectedBytes; });
    const std::uint64_t perCopy =
        worst->weightCopies > 0
            ? (worst->expectedBytes - static_cast<std::uint64_t>(worst->contexts) * report.contextBytes) /
                  static_cast<std::uint64_t>(worst->weightCopies)
            : 0;
    std::string v = worst->device + " peaks at ";
    if (worst->contexts == worst->weightCopies && worst->weightCopies > 0) {
        v += times(worst->weightCopies, report.contextBytes, perCopy);
    } else {
        v += std::to_string(worst->contexts) + " x context " + humanBytes(report.contextBytes);
        if (worst->weightCopies > 0) {
            v += " + " + std::to_string(worst->weightCopies) + " x " + humanBytes(perCopy);
        }
    }
    v += " = " + humanBytes(worst->expectedBytes);
    if (worst->measuredPeakBytes > 0) {
        v += " (measured " + humanBytes(worst->measuredPeakBytes) + ")";
    }
    if (request.mapLocation.empty()) {
        v += "; with map_location=cpu each GPU holds only the contexts of the ranks it runs, the weights go to "
             "host memory, and model.to(rank) then puts 1 x " +
             humanBytes(report.weightBytes) + " on each rank's own GPU";
    } else {
        v += " with map_location=" + request.mapLocation;
    }
    report.verdict = v;
}

}  // namespace

Expected<ReplayReport> ddpReplay(const ReplayRequest& request, const std::function<void(int)>& progress,
                                 std::stop_token stop, std::shared_ptr<const Nvml> nvml)
{
    if (request.ranks < 1 || request.ranks > 64) {
        return makeError(ErrorCode::Usage, "--ddp-ranks takes 1 to 64 ranks");
    }
    std::string engine = request.enginePath;
    if (engine.empty()) {
        auto found = findHelper(Engine::Cuda);
        if (!found) {
            return found.error();
        }
        engine = *found;
    }
    if (!nvml) {
        if (auto loaded = Nvml::load()) {
            nvml = *loaded;
        }
    }
    const int gpus = gpuCount(nvml);
    if (gpus == 0) {
        return onFile(ErrorCode::DeviceUnavailable,
                      "no NVIDIA GPU here (no driver, or it sees no device): a DDP replay needs at least one",
                      request.path);
    }
    const auto silence = request.silenceTimeout.value_or(kDefaultSilence);

    Sampler sampler(nvml);
    sampler.start({request.interval, {}});
    std::vector<Rank> ranks(static_cast<std::size_t>(request.ranks));
    for (int r = 0; r < request.ranks; ++r) {
        Rank& rank = ranks[static_cast<std::size_t>(r)];
        rank.info.rank = r;
        rank.info.device = "cuda:" + std::to_string(r % gpus);
        rank.proc = std::make_unique<HelperProcess>();
        if (auto spawned = rank.proc->spawn(engine); !spawned) {
            return spawned.error();
        }
        sampler.trackPid(rank.proc->pid());
        json req = {
            {"cmd", "replay"}, {"rank", r}, {"device", rank.info.device}, {"map_location", request.mapLocation}};
        protocol::setTextField(req, "path", request.path);
        protocol::setTextField(req, "select", request.select);
        rank.proc->writeLine(req.dump(), true);
    }
    auto killAll = [&ranks] {
        for (auto& r : ranks) {
            r.proc->killGroup();
            r.proc->finish(std::chrono::milliseconds(0));
        }
    };
    // Every rank loads; then all hold together while the sampler sees the pile-up.
    int loaded = 0;
    std::optional<Clock::time_point> allLoaded;
    bool released = false;
    while (true) {
        if (stop.stop_requested()) {
            killAll();
            return onFile(ErrorCode::Cancelled, "DDP replay cancelled", request.path);
        }
        if (auto failed = pumpAll(ranks, silence, engine)) {
            killAll();
            failed->path = request.path;
            return *failed;
        }
        const int now =
            static_cast<int>(std::count_if(ranks.begin(), ranks.end(), [](const Rank& r) { return r.loaded; }));
        if (now != loaded) {
            loaded = now;
            if (progress) {
                progress(loaded);
            }
        }
        if (loaded == request.ranks && !allLoaded) {
            allLoaded = Clock::now();
        }
        if (allLoaded && !released && Clock::now() - *allLoaded >= request.hold) {
            for (auto& r : ranks) {
                r.proc->writeLine("release");
            }
            released = true;
        }
        if (std::all_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.done; })) {
            break;
        }
    }
    for (auto& r : ranks) {
        r.proc->finish(std::chrono::milliseconds(2000));
    }
    sampler.stop();
    ReplayReport report;
    report.timeline = sampler.snapshot();
    for (const auto& r : ranks) {
        report.ranks.push_back(r.info);
    }
    summarise(report, request);
    return report;
}

}  // namespace ckpt::device
