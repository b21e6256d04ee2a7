#include "device/ddp_replay.h"

#include "device/gpu_map.h"
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

Error onFile(ErrorCode code, std::string message, const std::string& path)
{
    Error e = makeError(code, std::move(message));
    e.path = path;
    return e;
}

struct Rank {
    std::unique_ptr<HelperProcess> proc;
    ReplayRank info;
    bool started = false;  // its contexts exist; it waits for "load"
    bool loaded = false;
    bool done = false;
    bool failed = false;  // it reported an error or stopped early: done, and not loaded
    Clock::time_point lastEvent = Clock::now();
};

void takeCounts(const json& ev, const char* key, std::map<std::string, std::uint64_t>& out)
{
    if (auto it = ev.find(key); it != ev.end() && it->is_object()) {
        for (const auto& [device, bytes] : it->items()) {
            if (bytes.is_number_unsigned()) {
                out[device] = bytes.get<std::uint64_t>();
            }
        }
    }
}

void takeUuids(const json& ev, std::map<std::string, std::string>& out)
{
    if (auto it = ev.find("uuids"); it != ev.end() && it->is_object()) {
        for (const auto& [device, uuid] : it->items()) {
            if (uuid.is_string()) {
                out[device] = uuid.get<std::string>();
            }
        }
    }
}

void failRank(Rank& r, std::string why)
{
    r.failed = true;
    r.done = true;
    r.info.error = std::move(why);
}

void take(Rank& r, const std::string& line)
{
    const json ev = json::parse(line, nullptr, false);
    if (ev.is_discarded() || !ev.is_object()) {
        return;
    }
    r.lastEvent = Clock::now();
    const std::string kind = ev.value("event", std::string());
    if (kind == "start") {
        r.started = true;
        r.info.contextBytes = ev.value("context_bytes", std::uint64_t{0});
        if (auto it = ev.find("contexts"); it != ev.end() && it->is_object()) {
            for (const auto& [device, c] : it->items()) {
                if (c.is_object()) {
                    r.info.contextsByDevice[device] = c.value("bytes", std::uint64_t{0});
                    r.info.contextSources[device] = c.value("source", std::string("unknown"));
                }
            }
        }
        takeUuids(ev, r.info.uuids);
    } else if (kind == "loaded") {
        r.loaded = true;
        takeCounts(ev, "bytes_by_device", r.info.bytesByDevice);
        takeCounts(ev, "torch_reserved_by_device", r.info.torchReservedByDevice);
        takeUuids(ev, r.info.uuids);
    } else if (kind == "result") {
        r.done = true;
    } else if (kind == "error") {
        takeCounts(ev, "bytes_by_device", r.info.bytesByDevice);
        takeUuids(ev, r.info.uuids);
        r.info.bytesPlaced = ev.value("bytes_placed", std::uint64_t{0});
        r.info.totalBytes = ev.value("total_bytes", std::uint64_t{0});
        r.info.errorCode = protocol::codeFromName(ev.value("code", std::string()));
        failRank(r, detail::printable(ev.value("message", std::string("failed")), 400));
    }
}

// Reads what every rank wrote. A rank that fails or dies is marked failed and the others go on; what
// ends the replay is a rank that floods its output or says nothing for `silence` (it heartbeats
// every second while it holds).
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
        if (r.done) {
            continue;
        }
        if (state == HelperProcess::Pump::Overflow) {
            return makeError(ErrorCode::LoadFailed,
                             "rank " + std::to_string(r.info.rank) + "'s engine " + engine + " " + r.proc->overflow());
        }
        if (state == HelperProcess::Pump::Closed) {
            std::string why = "its engine stopped early";
            if (auto last = r.proc->lastErrLine(); !last.empty()) {
                why += ": " + last;
            }
            failRank(r, why);
            continue;
        }
        if (Clock::now() - r.lastEvent >= silence) {
            return makeError(ErrorCode::LoadFailed, "rank " + std::to_string(r.info.rank) + "'s engine " + engine +
                                                        " said nothing for " +
                                                        std::to_string(silence.count() / 1000.0).substr(0, 6) +
                                                        " s; killed every rank (CKPTSCOPE_HELPER_TIMEOUT sets the "
                                                        "limit in seconds)");
        }
    }
    return std::nullopt;
}

std::string times(int n, std::uint64_t context, std::uint64_t weights)
{
    std::string s = std::to_string(n) + " x (context " + humanBytes(context);
    if (weights > 0) {
        s += " + " + humanBytes(weights);
    }
    return s + ")";
}

// The timeline column of a device a rank named: by the UUID it reported (the identity), else by label.
int columnOf(const Timeline& t, const std::string& device, const std::string& uuid)
{
    for (std::size_t c = 1; c < t.uuids.size(); ++c) {
        if (!uuid.empty() && uuidKey(t.uuids[c]) == uuidKey(uuid)) {
            return static_cast<int>(c);
        }
    }
    return t.column(device);
}

// One context on each device, measured with every rank's contexts there and nothing else allocated
// (the ranks wait for "load"): the device's rise from the first sample to `after`, shared among them.
std::map<std::string, std::uint64_t> contextShares(const std::vector<Rank>& ranks, const Timeline& t,
                                                   const Sample& after)
{
    std::map<std::string, int> count;
    std::map<std::string, std::string> uuids;
    for (const auto& r : ranks) {
        if (r.started && !r.failed) {
            for (const auto& [device, bytes] : r.info.contextsByDevice) {
                count[device] += 1;
                if (auto u = r.info.uuids.find(device); u != r.info.uuids.end()) {
                    uuids[device] = u->second;
                }
            }
        }
    }
    std::map<std::string, std::uint64_t> out;
    if (t.samples.empty()) {
        return out;
    }
    for (const auto& [device, n] : count) {
        const int c = columnOf(t, device, uuids.contains(device) ? uuids.at(device) : std::string());
        if (c <= 0 || static_cast<std::size_t>(c) >= after.usedBytes.size()) {
            continue;
        }
        const std::uint64_t base = t.samples.front().usedBytes[static_cast<std::size_t>(c)];
        const std::uint64_t now = after.usedBytes[static_cast<std::size_t>(c)];
        if (now > base) {
            out[device] = (now - base) / static_cast<std::uint64_t>(n);
        }
    }
    return out;
}

// Each rank's contexts: its own NVML row where NVML showed one, else the device's share.
void resolveContexts(std::vector<Rank>& ranks, const std::map<std::string, std::uint64_t>& shares)
{
    for (auto& r : ranks) {
        for (auto& [device, bytes] : r.info.contextsByDevice) {
            if (r.info.contextSources[device] != "nvml-process" && shares.contains(device)) {
                bytes = shares.at(device);
            }
        }
        if (auto own = r.info.contextsByDevice.find(r.info.device); own != r.info.contextsByDevice.end()) {
            r.info.contextBytes = own->second;
        }
    }
}

// The expected layout per device, from what each rank placed, and the sentence a user acts on.
void summarise(ReplayReport& report, const ReplayRequest& request, const std::map<std::string, std::uint64_t>& shares)
{
    std::map<std::string, ReplayDevice> byDevice;
    std::map<std::string, std::string> uuids;
    std::map<std::string, std::uint64_t> contextSum;
    std::map<std::string, std::set<std::string>> sources;
    for (const auto& r : report.ranks) {
        uuids.insert(r.uuids.begin(), r.uuids.end());
        std::uint64_t weights = 0;
        for (const auto& [device, bytes] : r.bytesByDevice) {
            weights += bytes;
            if (device != "cpu") {
                byDevice[device].weightCopies += 1;
                const auto torch = r.torchReservedByDevice.find(device);
                byDevice[device].expectedBytes += torch != r.torchReservedByDevice.end() ? torch->second : bytes;
            }
        }
        report.weightBytes = std::max(report.weightBytes, weights);
        // The contexts it made; a rank that failed before saying so had at least its own.
        auto contexts = r.contextsByDevice;
        if (contexts.empty()) {
            contexts[r.device] = r.contextBytes;
        }
        for (const auto& [device, bytes] : contexts) {
            byDevice[device].contexts += 1;
            contextSum[device] += bytes;
            const auto source = r.contextSources.find(device);
            sources[device].insert(source == r.contextSources.end() || source->second != "nvml-process"
                                       ? (shares.contains(device) ? "device-rise" : "engine")
                                       : "nvml-process");
        }
    }
    for (auto& [device, d] : byDevice) {
        d.device = device;
        d.uuid = uuids.contains(device) ? uuids.at(device) : std::string();
        d.expectedBytes += contextSum[device];
        d.contextBytes = d.contexts > 0 ? contextSum[device] / static_cast<std::uint64_t>(d.contexts) : 0;
        d.contextSource = sources[device].size() == 1 ? *sources[device].begin() : std::string("mixed");
        const int column = columnOf(report.timeline, device, d.uuid);
        d.measuredPeakBytes = column > 0 ? report.timeline.maxRise(static_cast<std::size_t>(column)) : 0;
        report.devices.push_back(d);
    }
    if (report.devices.empty()) {
        return;
    }
    const auto worst = std::max_element(
        report.devices.begin(), report.devices.end(),
        [](const ReplayDevice& a, const ReplayDevice& b) { return a.expectedBytes < b.expectedBytes; });
    report.contextBytes = worst->contextBytes;
    const std::uint64_t contexts = contextSum[worst->device];
    const std::uint64_t perCopy = worst->weightCopies > 0
                                      ? (worst->expectedBytes - std::min(worst->expectedBytes, contexts)) /
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
    for (const auto& r : report.ranks) {
        if (!r.error.empty()) {
            v += "; rank " + std::to_string(r.rank) + " (" + r.device + ") failed after placing " +
                 humanBytes(r.bytesPlaced) + (r.totalBytes > 0 ? " of " + humanBytes(r.totalBytes) : std::string()) +
                 ": " + r.error;
        }
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
    // Rank r uses cuda:(r mod torch.cuda.device_count()): CUDA's count in this environment.
    const GpuMap map = GpuMap::query(nvml);
    const int gpus = map.cudaCount();
    if (gpus == 0) {
        return onFile(ErrorCode::DeviceUnavailable,
                      "no NVIDIA GPU here (" +
                          (map.cudaNote().empty() ? std::string("the driver sees none") : map.cudaNote()) +
                          "): a DDP replay needs at least one",
                      request.path);
    }
    const auto silence = helperSilenceTimeout(request.silenceTimeout);
    if (!silence) {
        return silence.error();
    }

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
        if (request.set) {
            req["set"] = true;
        }
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
    // Every rank makes its contexts and waits; they are measured; every rank loads; then all hold
    // together while the sampler sees the pile-up.
    int loaded = 0;
    std::optional<Clock::time_point> allLoaded;
    bool released = false;
    std::optional<std::size_t> contextSample;  // the sample to measure the contexts by, once asked for
    std::map<std::string, std::uint64_t> shares;
    bool loadSent = false;
    while (true) {
        if (stop.stop_requested()) {
            killAll();
            return onFile(ErrorCode::Cancelled, "DDP replay cancelled", request.path);
        }
        if (auto failed = pumpAll(ranks, *silence, engine)) {
            killAll();
            failed->path = request.path;
            return *failed;
        }
        if (!loadSent && std::all_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.started || r.failed; })) {
            // A sample begun after the last context appeared (the ranks allocate nothing while they
            // wait), then "load". The first sample pushed from now on may have been begun before; the
            // second was not.
            if (!contextSample) {
                contextSample = sampler.snapshot().samples.size();
            }
            if (const Timeline later = sampler.snapshot(*contextSample); later.samples.size() >= 2) {
                shares = contextShares(ranks, sampler.snapshot(0), later.samples[1]);
                for (auto& r : ranks) {
                    if (!r.failed) {
                        r.proc->writeLine("load", true);
                    }
                }
                loadSent = true;
            }
        }
        // A failed rank is as far as it gets: the others hold theirs for the measurement.
        const int now = static_cast<int>(
            std::count_if(ranks.begin(), ranks.end(), [](const Rank& r) { return r.loaded || r.failed; }));
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
                if (!r.failed) {
                    r.proc->writeLine("release");
                }
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
    // torch.load cannot put this file on this machine at all (a storage saved on a GPU it does not
    // have): every rank said so, in torch's words, and that is the answer, not a table of nothing.
    if (std::all_of(ranks.begin(), ranks.end(),
                    [](const Rank& r) { return r.failed && r.info.errorCode == ErrorCode::DeviceUnavailable; })) {
        return onFile(ErrorCode::DeviceUnavailable, ranks.front().info.error, request.path);
    }
    resolveContexts(ranks, shares);
    ReplayReport report;
    report.timeline = sampler.snapshot();
    for (const auto& r : ranks) {
        report.ranks.push_back(r.info);
        report.failedRanks += r.failed ? 1 : 0;
    }
    summarise(report, request, shares);
    return report;
}

}  // namespace ckpt::device
