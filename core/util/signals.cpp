#include "util/signals.h"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <fcntl.h>
#include <unistd.h>

namespace ckpt {

void onTerminationSignals(void (*handler)(int), std::array<struct sigaction, 32>* previous)
{
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    for (const int sig : kTerminationSignals) {
        sigaddset(&sa.sa_mask, sig);
    }
    for (const int sig : kTerminationSignals) {
        ::sigaction(sig, &sa, previous != nullptr ? &previous->at(static_cast<std::size_t>(sig)) : nullptr);
    }
}

namespace {

std::atomic<int> g_stopSignal{0};
std::atomic<int> g_stopPipe{-1};
std::array<struct sigaction, 32> g_beforeStop{};

// Async-signal-safe: an atomic, write(), and the previous handler for a second signal.
void requestStop(int sig)
{
    int none = 0;
    if (g_stopSignal.compare_exchange_strong(none, sig)) {
        const char byte = 1;
        const int fd = g_stopPipe.load();
        if (fd >= 0) {
            [[maybe_unused]] const auto n = ::write(fd, &byte, 1);
        }
        return;
    }
    const auto& previous = g_beforeStop.at(static_cast<std::size_t>(sig));
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler != nullptr) {
        previous.sa_handler(sig);
        return;
    }
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}

}  // namespace

StopOnTerminationSignal::StopOnTerminationSignal()
{
    g_stopSignal.store(0);
    if (::pipe2(pipe_.data(), O_CLOEXEC) != 0) {
        pipe_ = {-1, -1};
    }
    g_stopPipe.store(pipe_[1]);
    const int readEnd = pipe_[0];
    watcher_ = std::jthread([this, readEnd] {
        char byte = 0;
        ssize_t n = 0;
        do {
            n = ::read(readEnd, &byte, 1);
        } while (n < 0 && errno == EINTR);
        if (n == 1 && byte == 1) {
            stop_.request_stop();
        }
    });
    onTerminationSignals(&requestStop, &g_beforeStop);
}

StopOnTerminationSignal::~StopOnTerminationSignal()
{
    restore();
}

void StopOnTerminationSignal::restore()
{
    if (restored_) {
        return;
    }
    restored_ = true;
    for (const int sig : kTerminationSignals) {
        ::sigaction(sig, &g_beforeStop.at(static_cast<std::size_t>(sig)), nullptr);
    }
    g_stopPipe.store(-1);
    if (pipe_[1] >= 0) {
        const char done = 0;
        [[maybe_unused]] const auto n = ::write(pipe_[1], &done, 1);  // ends the watcher
    }
    if (watcher_.joinable()) {
        watcher_.join();
    }
    for (int& fd : pipe_) {
        if (fd >= 0) {
            ::close(fd);
            fd = -1;
        }
    }
}

int StopOnTerminationSignal::signal()
{
    return g_stopSignal.load();
}

void StopOnTerminationSignal::raiseAgain()
{
    const int sig = g_stopSignal.load();
    restore();
    if (sig != 0) {
        ::raise(sig);
    }
}

}  // namespace ckpt
