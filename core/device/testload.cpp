#include "device/testload.h"

#include "device/gpu_map.h"
#include "device/helper_process.h"
#include "device/helper_protocol.h"
#include "util/bytes.h"
#include "util/device_name.h"
#include "util/printable.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace ckpt::device {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using detail::describeExit;
using detail::HelperProcess;
using detail::kMessageExcerpt;
using detail::printable;

constexpr const char* kHelperName = "ckptscope-torch-helper";
// A GPU whose used memory rises by less than this is treated as unmoved: NVML's figure jitters
// with other processes, while anything this process tree does there (a CUDA context alone) is
// hundreds of MiB.
constexpr std::uint64_t kTouchThreshold = 4ULL << 20;
constexpr std::chrono::milliseconds kDefaultSilence{30000};
// How long the output of a helper that exited may stay open (held by a child it left behind).
constexpr std::chrono::milliseconds kDrainAfterExit{500};
// How long a helper that reported an error has to exit (a CUDA engine releases its context).
constexpr std::chrono::milliseconds kAfterError{2000};

bool isExecutable(const fs::path& p)
{
    std::error_code ec;
    return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
}

Error fail(ErrorCode code, std::string message, const std::string& path = {})
{
    Error e = makeError(code, std::move(message));
    e.path = path;
    return e;
}

// Which timeline column is the chosen GPU: the one with the UUID the helper reported (the client
// and the helper number GPUs alike, but the UUID is the identity), else by label.
int chosenColumn(const Timeline& t, const std::string& device, const std::string& uuid)
{
    if (device == "cpu") {
        return 0;
    }
    if (const std::string hex = uuidKey(uuid); !hex.empty()) {
        for (std::size_t c = 1; c < t.uuids.size(); ++c) {
            if (uuidKey(t.uuids[c]) == hex) {
                return static_cast<int>(c);
            }
        }
    }
    return t.column(device);
}

// A byte or item count from an event. Anything but a non-negative number in range is a malformed
// event: a float beyond 2^64 would be undefined behaviour to convert.
std::uint64_t countField(const json& ev, const char* key)
{
    const auto it = ev.find(key);
    if (it == ev.end()) {
        return 0;
    }
    if (it->is_number_unsigned()) {
        return it->get<std::uint64_t>();
    }
    if (it->is_number_integer() && it->get<std::int64_t>() >= 0) {
        return static_cast<std::uint64_t>(it->get<std::int64_t>());
    }
    if (it->is_number_float()) {
        const double v = it->get<double>();
        if (v >= 0 && v < 1.8e19) {
            return static_cast<std::uint64_t>(v);
        }
    }
    throw std::invalid_argument(std::string("\"") + key + "\" is not a count");
}

// The helper's stdout lines, turned into the report. Each is an event: HelperProcess ends a helper
// that writes anything else. An event whose fields have the wrong types is an error, never an
// exception out of here.
class EventReader {
public:
    EventReader(TestloadReport& report, const ProgressFn& progress) : report_(report), progress_(progress) {}

    // True when the line was an event: the helper is alive and speaking the protocol.
    Expected<bool> take(const std::string& line)
    {
        const json ev = json::parse(line, nullptr, false);
        if (!ev.is_object()) {
            return false;
        }
        try {
            apply(ev);
        } catch (const std::exception& e) {
            return makeError(ErrorCode::LoadFailed, "the test-load helper " + report_.helperPath +
                                                        " sent a malformed event (" + printable(e.what(), 200) +
                                                        "): " + printable(line, kMessageExcerpt));
        }
        return true;
    }

    [[nodiscard]] bool gotResult() const { return gotResult_; }
    [[nodiscard]] const std::optional<Error>& helperError() const { return error_; }

private:
    void apply(const json& ev)
    {
        const std::string kind = ev.value("event", std::string());
        if (kind == "start") {
            report_.deviceUuid = ev.value("device_uuid", std::string());
            report_.torchVersion = ev.value("torch_version", std::string());
            report_.helperHasCuda = ev.value("cuda", false);
            report_.deviceName = ev.value("device_name", std::string());
            prog_.totalBytes = countField(ev, "total_bytes");
            prog_.totalTensors = countField(ev, "total_tensors");
        } else if (kind == "progress") {
            prog_.bytes = countField(ev, "bytes");
            prog_.tensors = countField(ev, "tensors");
            if (ev.contains("total_bytes")) {
                prog_.totalBytes = countField(ev, "total_bytes");
            }
            prog_.seconds = ev.value("seconds", 0.0);
            prog_.bytesPerSecond = prog_.seconds > 0 ? static_cast<double>(prog_.bytes) / prog_.seconds : 0;
            if (progress_) {
                progress_(prog_);
            }
        } else if (kind == "check") {
            report_.checks.push_back({ev.value("path", std::string()), ev.value("storage", std::string()),
                                      ev.value("sha256", std::string()), ev.value("note", std::string())});
        } else if (kind == "storage_check") {
            report_.storageChecks.push_back({ev.value("storage", std::string()), countField(ev, "bytes"),
                                             ev.value("sha256", std::string()), false});
        } else if (kind == "skipped") {
            report_.skipped.push_back({ev.value("path", std::string()), ev.value("reason", std::string())});
        } else if (kind == "result") {
            fillFromResult(ev);
            gotResult_ = true;
        } else if (kind == "error") {
            error_ = makeError(protocol::codeFromName(ev.value("code", std::string())),
                               ev.value("message", std::string("unknown error")));
        }
        // "verify" and kinds a newer helper adds only say that it is alive.
    }

    void fillFromResult(const json& ev)
    {
        report_.tensorsLoaded = countField(ev, "tensors_loaded");
        report_.storagesLoaded = countField(ev, "storages_loaded");
        report_.bytes = countField(ev, "bytes");
        report_.seconds = ev.value("seconds", 0.0);
        report_.gbPerS = ev.value("gb_per_s", 0.0);
        report_.peakBytes = countField(ev, "peak_bytes");
        report_.peakSource = ev.value("peak_source", std::string());
        report_.engine = ev.value("engine", std::string("torch"));
        report_.peakNote = ev.value("peak_note", std::string());
        report_.contextBytes = countField(ev, "context_bytes");
        report_.contextSource = ev.value("context_source", std::string());
        report_.pidHidden = ev.value("pid_hidden", false);
        report_.torchPeakBytes = countField(ev, "torch_peak_bytes");
        report_.torchReservedBytes = countField(ev, "torch_reserved_bytes");
        report_.torchAllocConf = ev.value("torch_alloc_conf", std::string());
        if (auto uuid = ev.value("device_uuid", std::string()); !uuid.empty()) {
            report_.deviceUuid = uuid;
        }
    }

    TestloadReport& report_;
    const ProgressFn& progress_;
    TestloadProgress prog_;
    bool gotResult_ = false;
    std::optional<Error> error_;
};

}  // namespace

Expected<std::chrono::milliseconds> helperSilenceTimeout(const std::optional<std::chrono::milliseconds>& requested)
{
    if (requested) {
        return std::max(*requested, std::chrono::milliseconds(1));
    }
    const char* env = std::getenv("CKPTSCOPE_HELPER_TIMEOUT");
    if (env == nullptr || *env == '\0') {
        return kDefaultSilence;
    }
    char* end = nullptr;
    const double seconds = std::strtod(env, &end);
    // Up to a year: beyond that the milliseconds would overflow, and nobody waits that long.
    if (end == env || *end != '\0' || !(seconds > 0) || seconds > 365.0 * 24 * 3600) {
        return makeError(ErrorCode::Usage,
                         "CKPTSCOPE_HELPER_TIMEOUT='" + printable(env, 40) + "' is not a number of seconds above 0");
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000)));
}

namespace {

std::string secondsText(std::chrono::milliseconds d)
{
    std::ostringstream s;
    s << static_cast<double>(d.count()) / 1000 << " s";
    return s.str();
}

// The helper's hash of each storage as it sits on the device against the file's own bytes, which
// the caller reads: a load that changed, dropped or skipped a byte fails.
Expected<void> compareWithFile(TestloadReport& report, const TestloadRequest& request)
{
    if (report.storageChecks.size() != report.storagesLoaded) {
        return fail(ErrorCode::LoadFailed,
                    "the test-load helper " + report.helperPath + " hashed " +
                        std::to_string(report.storageChecks.size()) + " of the " +
                        std::to_string(report.storagesLoaded) + " storages it loaded",
                    request.path);
    }
    if (!request.fileStorageSha256) {
        return {};
    }
    for (auto& c : report.storageChecks) {
        auto expected = request.fileStorageSha256(c.storage);
        if (!expected) {
            return expected.error();
        }
        if (*expected != c.sha256) {
            return fail(ErrorCode::LoadFailed,
                        "storage " + printable(c.storage, 80) + " differs from the file after loading to " +
                            report.device + " (sha256 " + printable(c.sha256, 64) + ", the file's " + *expected + ")",
                        request.path);
        }
        c.matchesFile = true;
    }
    return {};
}

// Every other GPU that moved, and by whom. NVML's process lists tell our processes from another
// job's on a shared node; where they cannot (our PIDs are not the ones NVML reports), a rise is a
// doubt to report, never a finding against this load.
void noteOtherDevices(TestloadReport& report)
{
    const Timeline& t = report.timeline;
    const int chosen = chosenColumn(t, report.device, report.deviceUuid);
    std::uint64_t ownOnChosen = 0;
    for (const auto& s : t.samples) {
        ownOnChosen = chosen > 0 ? std::max(ownOnChosen, s.ownBytes[static_cast<std::size_t>(chosen)]) : 0;
    }
    // The engine found itself in NVML's list (or its figure shows in ours): PIDs can be trusted.
    const bool pidsWork = !report.pidHidden && (chosen <= 0 || ownOnChosen > 0 || report.peakSource == "nvml-process");
    std::string doubt;
    for (std::size_t c = 1; c < t.devices.size(); ++c) {
        if (static_cast<int>(c) == chosen) {
            continue;
        }
        std::uint64_t own = 0;
        for (const auto& s : t.samples) {
            own = std::max(own, s.ownBytes[c]);
        }
        const std::uint64_t rise = std::max(t.maxRise(c), own);
        if (own == 0 && rise < kTouchThreshold) {
            continue;
        }
        DeviceDelta d{t.devices[c], c < t.uuids.size() ? t.uuids[c] : std::string(), rise, own, {}};
        if (own > 0) {
            d.by = "this load";
            report.otherDevicesTouched = true;
        } else if (pidsWork) {
            d.by = "other processes";
        } else {
            d.by = "unknown";
            doubt += (doubt.empty() ? "" : "; ") + d.device + " rose by " + humanBytes(rise);
        }
        report.otherDevices.push_back(std::move(d));
    }
    if (!doubt.empty()) {
        report.otherDevicesDoubt = doubt + " during the load, and NVML cannot say whether by this load or by another "
                                           "process (it lists host PIDs, which differ from ours in a container)";
    }
    if (report.peakBytes == 0 && chosen > 0) {
        report.peakBytes = t.maxRise(static_cast<std::size_t>(chosen));
        report.peakSource = "nvml-device";
        report.peakNote = "the whole device's rise: the helper measured no peak of its own";
    }
}

// Reads the helper's events until it closes its output. Returns why the client stopped listening
// early, if it did: a cancel, a helper silent for `silence`, one that floods its output or speaks
// something else than the protocol.
std::optional<Error> listen(HelperProcess& proc, EventReader& events, std::chrono::milliseconds silence,
                            const std::string& helper, const std::stop_token& stop)
{
    using Clock = std::chrono::steady_clock;
    auto lastEvent = Clock::now();
    std::optional<Clock::time_point> exitedAt;
    std::vector<std::string> lines;
    while (true) {
        if (stop.stop_requested()) {
            return makeError(ErrorCode::Cancelled, "test-load cancelled");
        }
        const auto state = proc.pump(50, lines);
        for (const auto& line : lines) {
            auto isEvent = events.take(line);
            if (!isEvent) {
                return isEvent.error();
            }
            if (*isEvent) {
                lastEvent = Clock::now();
            }
        }
        lines.clear();
        if (events.helperError()) {
            return std::nullopt;  // its last word
        }
        if (state == HelperProcess::Pump::Overflow) {
            return makeError(ErrorCode::LoadFailed,
                             "the test-load helper " + helper + " " + proc.overflow() + "; killed it");
        }
        if (state == HelperProcess::Pump::Closed) {
            return std::nullopt;
        }
        const auto now = Clock::now();
        if (now - lastEvent >= silence) {
            return makeError(ErrorCode::LoadFailed,
                             "the test-load helper " + helper + " said nothing for " + secondsText(silence) +
                                 "; killed it (CKPTSCOPE_HELPER_TIMEOUT sets the limit in seconds)");
        }
        // A child the helper left behind can hold its pipes open after it exited; what the helper
        // wrote is in them by now.
        if (!exitedAt && proc.exited()) {
            exitedAt = now;
        }
        if (exitedAt && now - *exitedAt >= kDrainAfterExit) {
            return std::nullopt;
        }
    }
}

}  // namespace

std::optional<std::string> parseDevice(const std::string& text)
{
    const auto name = parseDeviceName(text);
    if (!name) {
        return std::nullopt;
    }
    if (name->type == "cpu" && !name->index) {
        return name->type;
    }
    if (name->type == "cuda") {
        return DeviceName{name->type, name->index.value_or(0)}.text();  // "cuda" is the current device: 0
    }
    return std::nullopt;
}

std::string_view engineName(Engine e)
{
    switch (e) {
    case Engine::Cuda:
        return "cuda";
    case Engine::Torch:
        return "torch";
    default:
        return "auto";
    }
}

Engine engineFor(Engine requested, const std::string& device)
{
    if (requested != Engine::Auto) {
        return requested;
    }
    return device.starts_with("cuda") ? Engine::Cuda : Engine::Torch;
}

Expected<std::string> findHelper(Engine engine)
{
    struct Where {
        const char* name;
        const char* env;
        const char* dir;
        const char* provides;
    };
    const Where w = engine == Engine::Cuda
                        ? Where{"ckptscope-cuda-engine", "CKPTSCOPE_CUDA_ENGINE", "cuda-engine",
                                "it is part of the ckptscope package; reinstall it or set CKPTSCOPE_CUDA_ENGINE"}
                        : Where{kHelperName, "CKPTSCOPE_TORCH_HELPER", "torch-helper",
                                "install the ckptscope-torch package, build with -DCKPTSCOPE_WITH_TORCH=ON, or set "
                                "CKPTSCOPE_TORCH_HELPER"};
    if (const char* env = std::getenv(w.env); env && *env) {
        if (isExecutable(env)) {
            return std::string(env);
        }
        return fail(ErrorCode::LoadFailed,
                    std::string("the test-load helper named by ") + w.env + " is not an executable file: " + env);
    }
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    std::vector<fs::path> tried;
    if (!ec) {
        const fs::path dir = exe.parent_path();
        tried = {dir / ".." / "libexec" / "ckptscope" / w.name, dir / w.dir / w.name,
                 dir / ".." / "app" / w.dir / w.name, dir / ".." / ".." / "app" / w.dir / w.name};
        for (const auto& p : tried) {
            if (isExecutable(p)) {
                return fs::weakly_canonical(p, ec).string();
            }
        }
    }
    std::string where;
    for (const auto& p : tried) {
        where += (where.empty() ? "" : ", ") + p.lexically_normal().string();
    }
    return fail(ErrorCode::LoadFailed, std::string("test-load needs ") + w.name +
                                           ", which is not installed (looked in " + where + "): " + w.provides);
}

Expected<std::string> findTorchHelper()
{
    return findHelper(Engine::Torch);
}

Expected<TestloadReport> testLoad(const TestloadRequest& request, const ProgressFn& progress, std::stop_token stop,
                                  std::shared_ptr<const Nvml> nvml)
{
    const auto device = parseDevice(request.device);
    if (!device) {
        return fail(ErrorCode::Usage, "unknown device '" + request.device + "': use cpu or cuda:N");
    }
    const auto silence = helperSilenceTimeout(request.silenceTimeout);
    if (!silence) {
        return silence.error();
    }
    const Engine engine = engineFor(request.engine, *device);
    std::string helper = request.helperPath;
    if (helper.empty()) {
        auto found = findHelper(engine);
        if (!found) {
            return found.error();
        }
        helper = *found;
    } else if (!isExecutable(helper)) {
        return fail(ErrorCode::LoadFailed, "the test-load helper " + helper + " is not an executable file");
    }
    if (!nvml) {
        if (auto loaded = Nvml::load()) {
            nvml = *loaded;
        }
    }

    TestloadReport report;
    report.device = *device;
    report.helperPath = helper;

    Sampler sampler(nvml);
    sampler.start({request.interval, {}});
    const auto t0 = std::chrono::steady_clock::now();

    HelperProcess proc;
    if (auto spawned = proc.spawn(helper); !spawned) {
        return spawned.error();
    }
    sampler.trackPid(proc.pid());
    if (request.onHelperStarted) {
        request.onHelperStarted(proc.pid());
    }
    json req = {{"cmd", "testload"}, {"device", *device}, {"verify", request.verify}};
    if (request.set) {
        req["set"] = true;
    }
    protocol::setTextField(req, "path", request.path);
    protocol::setTextField(req, "select", request.select);
    const bool sent = proc.writeLine(req.dump());

    EventReader events(report, progress);
    std::optional<Error> stopped = listen(proc, events, *silence, helper, stop);
    if (stopped) {
        proc.killGroup();
    }
    // A helper that reported an error has said all it will; one still there shortly after is killed.
    const auto grace = stopped ? std::chrono::milliseconds(0) : events.helperError() ? kAfterError : *silence;
    const int status = proc.finish(grace);
    report.helperSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sampler.stop();
    report.timeline = sampler.snapshot();

    const std::string stuck = proc.stuck() ? " (the helper did not exit after SIGKILL: a process stuck in the GPU "
                                             "driver after a device error; it is left behind)"
                                           : std::string();
    if (events.helperError() && !(stopped && stopped->code == ErrorCode::Cancelled)) {
        Error e = *events.helperError();
        e.message += stuck;
        e.path = request.path;
        return e;
    }
    if (stopped) {
        stopped->message += stuck;
        stopped->path = request.path;
        return *stopped;
    }
    if (!events.gotResult()) {
        std::string why = "the test-load helper " + helper + " " + describeExit(status) + " without a result";
        if (!sent) {
            why += " (it did not read the request)";
        }
        if (auto last = proc.lastErrLine(); !last.empty()) {
            why += ": " + last;
        }
        return fail(ErrorCode::LoadFailed, why, request.path);
    }
    if (request.verify) {
        if (auto same = compareWithFile(report, request); !same) {
            return same.error();
        }
    }
    noteOtherDevices(report);
    return report;
}

TorchLoadPlacement torchLoadPlacement(const std::vector<std::pair<std::string, std::uint64_t>>& bytesByLocation,
                                      int cudaDevices)
{
    TorchLoadPlacement out;
    for (const auto& [location, bytes] : bytesByLocation) {
        PlacementRow row{location, bytes, false, {}};
        if (location.rfind("cuda", 0) == 0) {  // torch's CUDA deserializer takes every tag starting so
            const auto name = parseDeviceName(location);
            const std::int64_t index = name && name->type == "cuda" ? name->index.value_or(0) : 0;
            if (cudaDevices <= 0) {
                row.fails = true;
                row.reason = cudaUnavailableText();
            } else if (index >= cudaDevices) {
                row.fails = true;
                row.reason = cudaDeviceCountText(index, cudaDevices);
            }
        } else if (location != "cpu" && location.rfind("cpu", 0) != 0) {
            // mps, xla, meta ... : torch needs that backend present; we can only tell for the CPU and CUDA.
            if (location != "meta") {
                row.reason = "needs the '" + location + "' backend at load time";
            }
        }
        out.wouldFail = out.wouldFail || row.fails;
        out.rows.push_back(std::move(row));
    }
    return out;
}

}  // namespace ckpt::device
