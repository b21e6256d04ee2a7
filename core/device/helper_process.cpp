#include "device/helper_process.h"

#include "util/bytes.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;  // NOLINT(readability-redundant-declaration): posix_spawn hands it on

namespace ckpt::device::detail {
namespace {

// What a helper may write before it counts as a runaway. Its events are a few hundred bytes (a key
// path, a sha256), at most two per tensor, so 64 MiB holds --verify's events for ~200k tensors;
// stderr only carries LibTorch's warnings. Memory stays at one line plus the report.
constexpr std::size_t kMaxLineBytes = 1U << 20;
constexpr std::uint64_t kMaxStdoutBytes = 64ULL << 20;
constexpr std::uint64_t kMaxStderrBytes = 64ULL << 20;
constexpr std::size_t kStderrTailBytes = 64U << 10;
// How long a helper killed with SIGKILL may take to be gone before it is taken to be stuck in the
// kernel (the NVIDIA driver after a device error): its memory is being freed, which takes a moment
// for a large one, never this long.
constexpr std::chrono::milliseconds kReapWait{5000};

// Every stdout line of a helper is a JSON object with an "event" (testload.h); the helpers keep
// anything else their libraries print off stdout (protocol::emit), so a line that is not one means
// the process is not speaking the protocol and nothing it says after can be trusted.
bool isEventLine(std::string_view line)
{
    const auto ev = nlohmann::json::parse(line, nullptr, false);
    return ev.is_object() && ev.contains("event");
}

}  // namespace

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

HelperProcess::~HelperProcess()
{
    if (pid_ > 0) {
        killGroup();
        reap();
    }
    closeFd(in_);
    closeFd(out_);
    closeFd(err_);
}

Expected<void> HelperProcess::spawn(const std::string& exe)
{
    std::array<int, 2> inPipe{-1, -1};
    std::array<int, 2> outPipe{-1, -1};
    std::array<int, 2> errPipe{-1, -1};
    // stdin is a socket, not a pipe: writing to a helper that already died (a missing LibTorch
    // library) then fails with EPIPE under MSG_NOSIGNAL instead of killing us with SIGPIPE.
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, inPipe.data()) != 0 ||
        pipe2(outPipe.data(), O_CLOEXEC) != 0 || pipe2(errPipe.data(), O_CLOEXEC) != 0) {
        return makeError(ErrorCode::Internal,
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
        return makeError(ErrorCode::LoadFailed,
                         "cannot start the test-load helper " + exe + ": " + systemErrorText(rc));
    }
    return {};
}

bool HelperProcess::writeLine(const std::string& line, bool more)
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
    if (!more) {
        closeFd(in_);
    }
    return true;
}

HelperProcess::Pump HelperProcess::pump(int timeoutMs, std::vector<std::string>& lines)
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

bool HelperProcess::exited() const
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

void HelperProcess::killGroup()  // NOLINT(readability-make-member-function-const): it kills the helper
{
    if (pid_ > 0) {
        kill(-pid_, SIGKILL);
    }
}

int HelperProcess::finish(std::chrono::milliseconds grace)
{
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!exited() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    killGroup();
    return reap();
}

std::string HelperProcess::lastErrLine() const
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

void HelperProcess::closeFd(int& fd)
{
    if (fd >= 0) {
        close(fd);
        fd = -1;
    }
}

std::size_t HelperProcess::readSome(int& fd, std::array<char, 65536>& buf)
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

void HelperProcess::readStdout(std::vector<std::string>& lines)
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
        const std::string_view line(outBuf_.data() + start, nl - start);
        if (!isEventLine(line)) {
            overflow_ =
                "wrote something that is not its protocol to stdout: '" + printable(line, kMessageExcerpt) + "'";
            return;
        }
        lines.emplace_back(line);
    }
    outBuf_.erase(0, start);
    if (outBuf_.size() > kMaxLineBytes && outBuf_.find('\n') > kMaxLineBytes) {
        overflow_ = "wrote a line longer than " + humanBytes(kMaxLineBytes) + " to stdout";
    }
}

void HelperProcess::readStderr()
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

int HelperProcess::reap()
{
    if (pid_ <= 0) {
        return status_;
    }
    const auto deadline = std::chrono::steady_clock::now() + kReapWait;
    int st = 0;
    while (true) {
        const pid_t r = waitpid(pid_, &st, WNOHANG);
        if (r == pid_ || (r < 0 && errno != EINTR)) {
            pid_ = -1;
            status_ = r > 0 ? st : -1;
            return status_;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // Whoever gets it back, it is not us now: a thread of its own waits, so it never stays a zombie.
    std::thread([pid = pid_] {
        int ignored = 0;
        while (waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
        }
    }).detach();
    stuck_ = true;
    pid_ = -1;
    status_ = -1;
    return status_;
}

}  // namespace ckpt::device::detail
