#include "device/testload.h"

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;  // NOLINT(readability-redundant-declaration): posix_spawn hands it on

namespace ckpt::device {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kHelperName = "ckptscope-torch-helper";
// A GPU whose used memory rises by less than this is treated as unmoved: NVML's figure jitters
// with other processes, while anything this process tree does there (a CUDA context alone) is
// hundreds of MiB.
constexpr std::uint64_t kTouchThreshold = 4ULL << 20;

bool isExecutable(const fs::path& p)
{
    std::error_code ec;
    return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
}

ErrorCode codeFromName(const std::string& name)
{
    static const std::pair<const char*, ErrorCode> kNames[] = {
        {"Io", ErrorCode::Io},
        {"NotCheckpoint", ErrorCode::NotCheckpoint},
        {"Truncated", ErrorCode::Truncated},
        {"Corrupt", ErrorCode::Corrupt},
        {"Unsupported", ErrorCode::Unsupported},
        {"Limit", ErrorCode::Limit},
        {"Usage", ErrorCode::Usage},
        {"Cancelled", ErrorCode::Cancelled},
        {"DeviceUnavailable", ErrorCode::DeviceUnavailable},
        {"OutOfMemory", ErrorCode::OutOfMemory},
        {"LoadFailed", ErrorCode::LoadFailed},
    };
    for (const auto& [n, c] : kNames) {
        if (name == n) {
            return c;
        }
    }
    return ErrorCode::LoadFailed;
}

Error fail(ErrorCode code, std::string message, const std::string& path = {})
{
    Error e = makeError(code, std::move(message));
    e.path = path;
    return e;
}

// The helper process: pipes to its stdin/stdout/stderr; killed and reaped when dropped.
class HelperProcess {
public:
    HelperProcess() = default;
    HelperProcess(const HelperProcess&) = delete;
    HelperProcess& operator=(const HelperProcess&) = delete;
    ~HelperProcess()
    {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            wait();
        }
        closeFd(in_);
        closeFd(out_);
        closeFd(err_);
    }

    Expected<void> spawn(const std::string& exe)
    {
        std::array<int, 2> inPipe{-1, -1};
        std::array<int, 2> outPipe{-1, -1};
        std::array<int, 2> errPipe{-1, -1};
        // stdin is a socket, not a pipe: writing to a helper that already died (a missing LibTorch
        // library) then fails with EPIPE under MSG_NOSIGNAL instead of killing us with SIGPIPE.
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, inPipe.data()) != 0 ||
            pipe2(outPipe.data(), O_CLOEXEC) != 0 || pipe2(errPipe.data(), O_CLOEXEC) != 0) {
            return fail(ErrorCode::Internal,
                        std::string("cannot create pipes for the helper: ") + systemErrorText(errno));
        }
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, inPipe[0], 0);
        posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1);
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2);
        std::string arg0 = exe;
        std::array<char*, 2> argv{arg0.data(), nullptr};
        const int rc = posix_spawn(&pid_, exe.c_str(), &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        close(inPipe[0]);
        close(outPipe[1]);
        close(errPipe[1]);
        in_ = inPipe[1];
        out_ = outPipe[0];
        err_ = errPipe[0];
        if (rc != 0) {
            pid_ = -1;
            return fail(ErrorCode::LoadFailed, "cannot start the test-load helper " + exe + ": " + systemErrorText(rc));
        }
        return {};
    }

    [[nodiscard]] pid_t pid() const { return pid_; }

    bool writeLine(const std::string& line)
    {
        std::string data = line + "\n";
        std::size_t done = 0;
        while (done < data.size()) {
            const ssize_t n = ::send(in_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                return false;
            }
            done += static_cast<std::size_t>(n);
        }
        closeFd(in_);  // one request per helper: EOF tells it nothing more comes
        return true;
    }

    // Waits up to timeoutMs for output. Appends complete stdout lines to `lines`; keeps stderr.
    // Returns false once both streams are closed.
    bool pump(int timeoutMs, std::vector<std::string>& lines)
    {
        std::array<pollfd, 2> fds{pollfd{out_, POLLIN, 0}, pollfd{err_, POLLIN, 0}};
        if (out_ < 0 && err_ < 0) {
            return false;
        }
        const int n = poll(fds.data(), fds.size(), timeoutMs);
        if (n <= 0) {
            return true;
        }
        std::array<char, 65536> buf{};
        if (out_ >= 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            const ssize_t r = ::read(out_, buf.data(), buf.size());
            if (r > 0) {
                outBuf_.append(buf.data(), static_cast<std::size_t>(r));
                for (std::size_t nl; (nl = outBuf_.find('\n')) != std::string::npos;) {
                    lines.push_back(outBuf_.substr(0, nl));
                    outBuf_.erase(0, nl + 1);
                }
            } else if (r == 0 || errno != EINTR) {
                closeFd(out_);
            }
        }
        if (err_ >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            const ssize_t r = ::read(err_, buf.data(), buf.size());
            if (r > 0) {
                errText_.append(buf.data(), static_cast<std::size_t>(r));
                if (errText_.size() > 65536) {
                    errText_.erase(0, errText_.size() - 65536);
                }
            } else if (r == 0 || errno != EINTR) {
                closeFd(err_);
            }
        }
        return out_ >= 0 || err_ >= 0;
    }

    void killNow()
    {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
        }
    }

    // Reaps the process; returns the wait status (or -1).
    int wait()
    {
        if (pid_ <= 0) {
            return status_;
        }
        int st = 0;
        while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
        }
        pid_ = -1;
        status_ = st;
        return st;
    }

    // The last non-empty line the helper wrote to stderr (LibTorch's abort message, a loader error).
    [[nodiscard]] std::string lastErrLine() const
    {
        std::string t = errText_;
        while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) {
            t.pop_back();
        }
        const auto nl = t.rfind('\n');
        return nl == std::string::npos ? t : t.substr(nl + 1);
    }

private:
    static void closeFd(int& fd)
    {
        if (fd >= 0) {
            close(fd);
            fd = -1;
        }
    }
    pid_t pid_ = -1;
    int status_ = -1;
    int in_ = -1;
    int out_ = -1;
    int err_ = -1;
    std::string outBuf_;
    std::string errText_;
};

std::string describeExit(int status)
{
    if (WIFSIGNALED(status)) {
        return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
    }
    if (WIFEXITED(status)) {
        return "exited with status " + std::to_string(WEXITSTATUS(status));
    }
    return "ended";
}

// Which timeline column is the chosen GPU: by UUID when the helper reported one (CUDA's device
// order may differ from NVML's), else by index.
int chosenColumn(const Timeline& t, const std::string& device, const std::string& uuid, const Nvml* nvml)
{
    if (device == "cpu") {
        return 0;
    }
    if (nvml && !uuid.empty()) {
        for (int i = 0; i < nvml->deviceCount(); ++i) {
            if (auto u = nvml->uuid(i); u && *u == uuid) {
                return t.column("cuda:" + std::to_string(i));
            }
        }
    }
    return t.column(device);
}

void fillFromResult(const json& ev, TestloadReport& r)
{
    r.tensorsLoaded = ev.value("tensors_loaded", std::uint64_t{0});
    r.storagesLoaded = ev.value("storages_loaded", std::uint64_t{0});
    r.bytes = ev.value("bytes", std::uint64_t{0});
    r.seconds = ev.value("seconds", 0.0);
    r.gbPerS = ev.value("gb_per_s", 0.0);
    r.peakBytes = ev.value("peak_bytes", std::uint64_t{0});
    r.peakSource = ev.value("peak_source", std::string());
    if (auto uuid = ev.value("device_uuid", std::string()); !uuid.empty()) {
        r.deviceUuid = uuid;
    }
    if (ev.contains("skipped")) {
        for (const auto& s : ev["skipped"]) {
            r.skipped.push_back({s.value("path", std::string()), s.value("reason", std::string())});
        }
    }
    if (ev.contains("checks")) {
        for (const auto& c : ev["checks"]) {
            r.checks.push_back({c.value("path", std::string()), c.value("sha256", std::string())});
        }
    }
}

}  // namespace

std::optional<std::string> parseDevice(const std::string& text)
{
    if (text == "cpu") {
        return text;
    }
    if (text == "cuda") {
        return std::string("cuda:0");
    }
    if (text.rfind("cuda:", 0) != 0 || text.size() == 5 || text.size() > 9) {
        return std::nullopt;
    }
    for (std::size_t i = 5; i < text.size(); ++i) {
        if (text[i] < '0' || text[i] > '9') {
            return std::nullopt;
        }
    }
    return "cuda:" + std::to_string(std::stoi(text.substr(5)));
}

Expected<std::string> findTorchHelper()
{
    if (const char* env = std::getenv("CKPTSCOPE_TORCH_HELPER"); env && *env) {
        if (isExecutable(env)) {
            return std::string(env);
        }
        return fail(ErrorCode::LoadFailed,
                    std::string("the test-load helper named by CKPTSCOPE_TORCH_HELPER is not an executable file: ") +
                        env);
    }
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    std::vector<fs::path> tried;
    if (!ec) {
        const fs::path dir = exe.parent_path();
        tried = {dir / ".." / "libexec" / "ckptscope" / kHelperName, dir / "torch-helper" / kHelperName,
                 dir / ".." / "app" / "torch-helper" / kHelperName,
                 dir / ".." / ".." / "app" / "torch-helper" / kHelperName};
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
    return fail(ErrorCode::LoadFailed, std::string("test-load needs the LibTorch helper ") + kHelperName +
                                           ", which is not installed (looked in " + where +
                                           "); build with -DCKPTSCOPE_WITH_TORCH=ON or set CKPTSCOPE_TORCH_HELPER");
}

Expected<TestloadReport> testLoad(const TestloadRequest& request, const ProgressFn& progress, std::stop_token stop,
                                  std::shared_ptr<const Nvml> nvml)
{
    const auto device = parseDevice(request.device);
    if (!device) {
        return fail(ErrorCode::Usage, "unknown device '" + request.device + "': use cpu or cuda:N");
    }
    std::string helper = request.helperPath;
    if (helper.empty()) {
        auto found = findTorchHelper();
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
    json req = {{"cmd", "testload"},
                {"path", request.path},
                {"device", *device},
                {"select", request.select},
                {"verify", request.verify}};
    const bool sent = proc.writeLine(req.dump());

    std::optional<Error> error;
    bool gotResult = false;
    TestloadProgress prog;
    std::vector<std::string> lines;
    while (true) {
        if (stop.stop_requested()) {
            proc.killNow();
            proc.wait();
            sampler.stop();
            return fail(ErrorCode::Cancelled, "test-load cancelled", request.path);
        }
        const bool open = proc.pump(50, lines);
        for (const auto& line : lines) {
            json ev = json::parse(line, nullptr, false);
            if (ev.is_discarded() || !ev.is_object()) {
                continue;  // LibTorch may print warnings to stdout; only our JSON lines count
            }
            const std::string kind = ev.value("event", std::string());
            if (kind == "start") {
                report.deviceUuid = ev.value("device_uuid", std::string());
                report.torchVersion = ev.value("torch_version", std::string());
                report.helperHasCuda = ev.value("cuda", false);
                prog.totalBytes = ev.value("total_bytes", std::uint64_t{0});
                prog.totalTensors = ev.value("total_tensors", std::uint64_t{0});
            } else if (kind == "progress") {
                prog.bytes = ev.value("bytes", std::uint64_t{0});
                prog.tensors = ev.value("tensors", std::uint64_t{0});
                prog.totalBytes = ev.value("total_bytes", prog.totalBytes);
                prog.seconds = ev.value("seconds", 0.0);
                prog.bytesPerSecond = prog.seconds > 0 ? static_cast<double>(prog.bytes) / prog.seconds : 0;
                if (progress) {
                    progress(prog);
                }
            } else if (kind == "result") {
                fillFromResult(ev, report);
                gotResult = true;
            } else if (kind == "error") {
                error = fail(codeFromName(ev.value("code", std::string())),
                             ev.value("message", std::string("unknown error")), request.path);
            }
        }
        lines.clear();
        if (!open) {
            break;
        }
    }
    const int status = proc.wait();
    report.helperSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sampler.stop();
    report.timeline = sampler.snapshot();

    if (error) {
        return *error;
    }
    if (!gotResult) {
        std::string why = "the test-load helper " + describeExit(status) + " without a result";
        if (!sent) {
            why += " (it did not read the request)";
        }
        if (auto last = proc.lastErrLine(); !last.empty()) {
            why += ": " + last;
        }
        return fail(ErrorCode::LoadFailed, why, request.path);
    }

    const int chosen = chosenColumn(report.timeline, report.device, report.deviceUuid, nvml.get());
    for (std::size_t c = 1; c < report.timeline.devices.size(); ++c) {
        if (static_cast<int>(c) == chosen) {
            continue;
        }
        std::uint64_t own = 0;
        for (const auto& s : report.timeline.samples) {
            own = std::max(own, s.ownBytes[c]);
        }
        const std::uint64_t rise = std::max(report.timeline.maxRise(c), own);
        if (rise >= kTouchThreshold || own > 0) {
            report.otherDevicesTouched = true;
            report.otherDevices.push_back({report.timeline.devices[c], rise});
        }
    }
    if (report.peakBytes == 0 && chosen > 0) {
        report.peakBytes = report.timeline.maxRise(static_cast<std::size_t>(chosen));
        report.peakSource = "nvml";
    }
    return report;
}

TorchLoadPlacement torchLoadPlacement(const std::vector<std::pair<std::string, std::uint64_t>>& bytesByLocation,
                                      int cudaDevices)
{
    TorchLoadPlacement out;
    for (const auto& [location, bytes] : bytesByLocation) {
        PlacementRow row{location, bytes, false, {}};
        if (location.rfind("cuda", 0) == 0) {
            const auto parsed = parseDevice(location);
            const int index = parsed ? std::stoi(parsed->substr(5)) : 0;
            if (cudaDevices <= 0) {
                row.fails = true;
                row.reason = "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
                             "False (no CUDA GPU here)";
            } else if (index >= cudaDevices) {
                row.fails = true;
                row.reason = "Attempting to deserialize object on CUDA device " + std::to_string(index) +
                             " but torch.cuda.device_count() is " + std::to_string(cudaDevices);
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
