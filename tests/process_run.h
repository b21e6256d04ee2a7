// Runs a real executable the way a user's shell would, for the tests that need what QProcess does
// not give: peak memory (wait4's rusage), an exit status that keeps "killed by signal N" apart,
// signals sent mid-run, and a hard time limit that kills a hung child instead of hanging the suite.
#pragma once

#include <QByteArray>
#include <QElapsedTimer>

#include <algorithm>
#include <array>
#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;  // NOLINT(readability-redundant-declaration): posix_spawn hands it on

namespace ckpt::test {

struct ProcessResult {
    int rc = -1;            // exit status, or 128 + the signal that ended it, as a shell reports it
    bool timedOut = false;  // killed by the time limit
    QByteArray out;
    QByteArray err;
    long maxRssKiB = 0;  // of the process and every descendant it waited for
    qint64 ms = 0;
};

class Process {
public:
    Process() = default;
    Process(const Process&) = delete;
    Process& operator=(const Process&) = delete;
    ~Process()
    {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            wait(0);
        }
    }

    bool start(const std::vector<std::string>& args)
    {
        std::array<int, 2> out{-1, -1};
        std::array<int, 2> err{-1, -1};
        if (::pipe(out.data()) != 0 || ::pipe(err.data()) != 0) {
            return false;
        }
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&actions, out[1], 1);
        posix_spawn_file_actions_adddup2(&actions, err[1], 2);
        posix_spawn_file_actions_addclose(&actions, out[0]);
        posix_spawn_file_actions_addclose(&actions, err[0]);
        std::vector<std::string> copies = args;
        std::vector<char*> argv;
        for (auto& a : copies) {
            argv.push_back(a.data());
        }
        argv.push_back(nullptr);
        timer_.start();
        const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        ::close(out[1]);
        ::close(err[1]);
        outFd_ = out[0];
        errFd_ = err[0];
        if (rc != 0) {
            pid_ = -1;
            return false;
        }
        return true;
    }

    [[nodiscard]] pid_t pid() const { return pid_; }
    void signal(int sig) const { ::kill(pid_, sig); }

    // Reads both pipes until the child closes them and exits; kills it after `timeoutMs`.
    ProcessResult wait(int timeoutMs)
    {
        ProcessResult r;
        std::array<char, 65536> buf{};
        while (outFd_ >= 0 || errFd_ >= 0) {
            const qint64 left = timeoutMs - timer_.elapsed();
            if (left <= 0 && pid_ > 0 && !r.timedOut) {
                ::kill(pid_, SIGKILL);
                r.timedOut = true;
            }
            std::array<pollfd, 2> fds{pollfd{outFd_, POLLIN, 0}, pollfd{errFd_, POLLIN, 0}};
            ::poll(fds.data(), fds.size(), static_cast<int>(std::max<qint64>(1, std::min<qint64>(left, 100))));
            for (int i = 0; i < 2; ++i) {
                int& fd = i == 0 ? outFd_ : errFd_;
                if (fd < 0 || (fds.at(static_cast<std::size_t>(i)).revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
                    continue;
                }
                const ssize_t n = ::read(fd, buf.data(), buf.size());
                if (n > 0) {
                    (i == 0 ? r.out : r.err).append(buf.data(), n);
                } else {
                    ::close(fd);
                    fd = -1;
                }
            }
        }
        if (pid_ > 0) {
            int status = 0;
            rusage usage{};
            ::wait4(pid_, &status, 0, &usage);
            r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            r.maxRssKiB = usage.ru_maxrss;
            pid_ = -1;
        }
        r.ms = timer_.elapsed();
        return r;
    }

private:
    pid_t pid_ = -1;
    int outFd_ = -1;
    int errFd_ = -1;
    QElapsedTimer timer_;
};

inline ProcessResult runProcess(const std::vector<std::string>& args, int timeoutMs = 120000)
{
    Process p;
    if (!p.start(args)) {
        return {};
    }
    return p.wait(timeoutMs);
}

}  // namespace ckpt::test
