#include "device/testload.h"

#include "util/bytes.h"
#include "util/printable.h"

#include <array>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <spawn.h>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
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
// What a helper may write before it counts as a runaway. Its events are a few hundred bytes (a key
// path, a sha256), at most two per tensor, so 64 MiB holds --verify's events for ~200k tensors;
// stderr only carries LibTorch's warnings. Memory stays at one line plus the report.
constexpr std::size_t kMaxLineBytes = 1U << 20;
constexpr std::uint64_t kMaxStdoutBytes = 64ULL << 20;
constexpr std::uint64_t kMaxStderrBytes = 64ULL << 20;
constexpr std::size_t kStderrTailBytes = 64U << 10;
constexpr std::size_t kMessageExcerpt = 300;  // characters of helper output quoted in an error
constexpr std::chrono::milliseconds kDefaultSilence{30000};
// How long the output of a helper that exited may stay open (held by a child it left behind).
constexpr std::chrono::milliseconds kDrainAfterExit{500};

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

// Text from the helper's raw streams ends up in a one-line message shown on a terminal and in
// JSON: control bytes (escape sequences, newlines) and non-ASCII bytes (C1 controls, invalid UTF-8
// that the JSON writer would reject) become \xNN, and it is cut after `limit` characters.
std::string printable(std::string_view raw, std::size_t limit)
{
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (const char ch : raw) {
        if (out.size() >= limit) {
            out += "...";
            break;
        }
        const auto c = static_cast<unsigned char>(ch);
        if (c >= 0x20 && c < 0x7f) {
            out += ch;
        } else {
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 15];
        }
    }
    return out;
}

// The helper process: pipes to its stdin/stdout/stderr, bounded buffers, its own process group
// (so whatever it started dies with it); killed and reaped when dropped.
class HelperProcess {
public:
    enum class Pump { Open, Closed, Overflow };

    HelperProcess() = default;
    HelperProcess(const HelperProcess&) = delete;
    HelperProcess& operator=(const HelperProcess&) = delete;
    ~HelperProcess()
    {
        if (pid_ > 0) {
            killGroup();
            reap();
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
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup(&attr, 0);
        std::string arg0 = exe;
        std::array<char*, 2> argv{arg0.data(), nullptr};
        const int rc = posix_spawn(&pid_, exe.c_str(), &actions, &attr, argv.data(), environ);
        posix_spawnattr_destroy(&attr);
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

    // Waits up to timeoutMs for output. Appends complete stdout lines to `lines`; keeps the tail of
    // stderr. Overflow (see overflow()) once the helper wrote more than the caps allow.
    Pump pump(int timeoutMs, std::vector<std::string>& lines)
    {
        if (out_ < 0 && err_ < 0) {
            return Pump::Closed;
        }
        std::array<pollfd, 2> fds{pollfd{out_, POLLIN, 0}, pollfd{err_, POLLIN, 0}};
        if (poll(fds.data(), fds.size(), timeoutMs) <= 0) {
            return Pump::Open;
        }
        if (out_ >= 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            readStdout(lines);
        }
        if (err_ >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            readStderr();
        }
        if (!overflow_.empty()) {
            return Pump::Overflow;
        }
        return out_ >= 0 || err_ >= 0 ? Pump::Open : Pump::Closed;
    }

    // What the helper exceeded ("wrote a line longer than 1.0 MiB to stdout").
    [[nodiscard]] const std::string& overflow() const { return overflow_; }

    // True once the helper itself has exited. It is left a zombie, so its process group id cannot
    // be reused before reap() and killGroup() can still reach what it left behind.
    bool exited() const
    {
        if (pid_ <= 0) {
            return true;
        }
        siginfo_t info{};
        if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
            return errno != EINTR;
        }
        return info.si_pid == pid_;
    }

    void killGroup()  // NOLINT(readability-make-member-function-const): it kills the helper
    {
        if (pid_ > 0) {
            kill(-pid_, SIGKILL);
        }
    }

    // Gives the helper up to `grace` to exit, kills whatever is left of its process group (the
    // helper too when it overstayed) and reaps it. Returns the wait status.
    int finish(std::chrono::milliseconds grace)
    {
        const auto deadline = std::chrono::steady_clock::now() + grace;
        while (!exited() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        killGroup();
        return reap();
    }

    // The last non-empty line the helper wrote to stderr (LibTorch's abort message, a loader
    // error), made printable.
    [[nodiscard]] std::string lastErrLine() const
    {
        std::string_view t = errText_;
        while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) {
            t.remove_suffix(1);
        }
        if (const auto nl = t.rfind('\n'); nl != std::string_view::npos) {
            t.remove_prefix(nl + 1);
        }
        return printable(t, kMessageExcerpt);
    }

private:
    static void closeFd(int& fd)
    {
        if (fd >= 0) {
            close(fd);
            fd = -1;
        }
    }

    // Returns the bytes read into `buf`, or 0 after closing `fd` at its end.
    static std::size_t readSome(int& fd, std::array<char, 65536>& buf)
    {
        ssize_t r = 0;
        do {
            r = ::read(fd, buf.data(), buf.size());
        } while (r < 0 && errno == EINTR);
        if (r <= 0) {
            closeFd(fd);
            return 0;
        }
        return static_cast<std::size_t>(r);
    }

    void readStdout(std::vector<std::string>& lines)
    {
        const std::size_t n = readSome(out_, buf_);
        outTotal_ += n;
        if (outTotal_ > kMaxStdoutBytes) {
            overflow_ = "wrote more than " + humanBytes(kMaxStdoutBytes) + " to stdout";
            return;
        }
        outBuf_.append(buf_.data(), n);
        std::size_t start = 0;
        for (std::size_t nl = 0; (nl = outBuf_.find('\n', start)) != std::string::npos; start = nl + 1) {
            if (nl - start > kMaxLineBytes) {
                break;
            }
            lines.emplace_back(outBuf_, start, nl - start);
        }
        outBuf_.erase(0, start);
        if (outBuf_.size() > kMaxLineBytes && outBuf_.find('\n') > kMaxLineBytes) {
            overflow_ = "wrote a line longer than " + humanBytes(kMaxLineBytes) + " to stdout";
        }
    }

    void readStderr()
    {
        const std::size_t n = readSome(err_, buf_);
        errTotal_ += n;
        if (errTotal_ > kMaxStderrBytes) {
            overflow_ = "wrote more than " + humanBytes(kMaxStderrBytes) + " to stderr";
            return;
        }
        errText_.append(buf_.data(), n);
        if (errText_.size() > 2 * kStderrTailBytes) {  // trimmed in steps: no copy per read
            errText_.erase(0, errText_.size() - kStderrTailBytes);
        }
    }

    int reap()
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

    pid_t pid_ = -1;
    int status_ = -1;
    int in_ = -1;
    int out_ = -1;
    int err_ = -1;
    std::uint64_t outTotal_ = 0;
    std::uint64_t errTotal_ = 0;
    std::string outBuf_;  // one partial line, at most kMaxLineBytes plus one read
    std::string errText_;
    std::string overflow_;
    std::array<char, 65536> buf_{};
};

std::string describeExit(int status)
{
    if (WIFSIGNALED(status)) {
        // For every signal it knows glibc's strsignal returns a constant string; only an unknown
        // number is formatted into a buffer.
        return std::string("was killed by signal ") + strsignal(WTERMSIG(status));  // NOLINT(concurrency-mt-unsafe)
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

// The helper's stdout lines, turned into the report. A line that is not a JSON object with an
// "event" is counted and otherwise ignored (LibTorch may print to stdout); an event whose fields
// have the wrong types is an error, never an exception out of here.
class EventReader {
public:
    EventReader(TestloadReport& report, const ProgressFn& progress) : report_(report), progress_(progress) {}

    // True when the line was an event: the helper is alive and speaking the protocol.
    Expected<bool> take(const std::string& line)
    {
        const json ev = json::parse(line, nullptr, false);
        if (ev.is_discarded() || !ev.is_object() || !ev.contains("event")) {
            if (otherLines_++ == 0) {
                firstOther_ = printable(line, kMessageExcerpt);
            }
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
    // "; it wrote 3 lines that are not protocol events, the first: ..." or "".
    [[nodiscard]] std::string otherLinesNote() const
    {
        if (otherLines_ == 0) {
            return {};
        }
        return "; its stdout had " + std::to_string(otherLines_) + (otherLines_ == 1 ? " line" : " lines") +
               " that are not protocol events, the first: '" + firstOther_ + "'";
    }

private:
    void apply(const json& ev)
    {
        const std::string kind = ev.value("event", std::string());
        if (kind == "start") {
            report_.deviceUuid = ev.value("device_uuid", std::string());
            report_.torchVersion = ev.value("torch_version", std::string());
            report_.helperHasCuda = ev.value("cuda", false);
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
            error_ = makeError(codeFromName(ev.value("code", std::string())),
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
        if (auto uuid = ev.value("device_uuid", std::string()); !uuid.empty()) {
            report_.deviceUuid = uuid;
        }
    }

    TestloadReport& report_;
    const ProgressFn& progress_;
    TestloadProgress prog_;
    bool gotResult_ = false;
    std::optional<Error> error_;
    std::uint64_t otherLines_ = 0;
    std::string firstOther_;
};

// The request's timeout, else CKPTSCOPE_HELPER_TIMEOUT (seconds), else 30 s.
Expected<std::chrono::milliseconds> silenceTimeoutFor(const TestloadRequest& request)
{
    if (request.silenceTimeout) {
        return std::max(*request.silenceTimeout, std::chrono::milliseconds(1));
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

void noteOtherDevices(TestloadReport& report, const Nvml* nvml)
{
    const int chosen = chosenColumn(report.timeline, report.device, report.deviceUuid, nvml);
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
    const auto silence = silenceTimeoutFor(request);
    if (!silence) {
        return silence.error();
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
    json req = {{"cmd", "testload"}, {"device", *device}, {"verify", request.verify}};
    // A path or key that is not UTF-8 cannot be a JSON string; it travels as hex, bytes intact.
    for (const auto& [field, text] : {std::pair<const char*, const std::string&>{"path", request.path},
                                      std::pair<const char*, const std::string&>{"select", request.select}}) {
        if (isValidUtf8(text)) {
            req[field] = text;
        } else {
            req[std::string(field) + "_hex"] = toHex(text);
        }
    }
    const bool sent = proc.writeLine(req.dump());

    EventReader events(report, progress);
    std::optional<Error> stopped = listen(proc, events, *silence, helper, stop);
    if (stopped) {
        proc.killGroup();
    }
    const int status = proc.finish(stopped ? std::chrono::milliseconds(0) : *silence);
    report.helperSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sampler.stop();
    report.timeline = sampler.snapshot();

    if (stopped) {
        stopped->path = request.path;
        return *stopped;
    }
    if (events.helperError()) {
        Error e = *events.helperError();
        e.path = request.path;
        return e;
    }
    if (!events.gotResult()) {
        std::string why = "the test-load helper " + helper + " " + describeExit(status) + " without a result";
        if (!sent) {
            why += " (it did not read the request)";
        }
        if (auto last = proc.lastErrLine(); !last.empty()) {
            why += ": " + last;
        }
        return fail(ErrorCode::LoadFailed, why + events.otherLinesNote(), request.path);
    }
    if (request.verify) {
        if (auto same = compareWithFile(report, request); !same) {
            return same.error();
        }
    }
    noteOtherDevices(report, nvml.get());
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
