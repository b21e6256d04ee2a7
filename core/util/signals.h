// The signals a command ends on when a user stops it (Ctrl-C, `kill`, a closed terminal), and one way
// to handle them: the temporary-output remover (write/targets.h), the progress line's eraser
// (app/cli/progress.h) and StopOnTerminationSignal (an S3 upload's abort) install their handler here.
#pragma once

#include <array>
#include <csignal>
#include <stop_token>
#include <thread>

namespace ckpt {

inline constexpr std::array<int, 3> kTerminationSignals{SIGINT, SIGTERM, SIGHUP};

// Installs `handler` for each termination signal, with all three blocked while it runs (so one
// handler never interrupts another). Where `previous` is given, the handlers it replaces are kept
// there, indexed by signal number, for `handler` to chain to.
void onTerminationSignals(void (*handler)(int), std::array<struct sigaction, 32>* previous = nullptr);

// While one lives, the first termination signal does not end the process: it requests a stop on
// token() and is remembered (signal()), so work that must undo something before the process ends
// (abort an S3 upload: a request, which no signal handler can send) sees the stop, undoes it, and
// then ends the process as the signal would have (raiseAgain()). A second signal goes on to the
// handlers installed before (the process ends at once). One at a time; the handler only writes to
// a pipe, which a thread of its own reads.
class StopOnTerminationSignal {
public:
    StopOnTerminationSignal();
    StopOnTerminationSignal(const StopOnTerminationSignal&) = delete;
    StopOnTerminationSignal& operator=(const StopOnTerminationSignal&) = delete;
    StopOnTerminationSignal(StopOnTerminationSignal&&) = delete;
    StopOnTerminationSignal& operator=(StopOnTerminationSignal&&) = delete;
    // Puts the handlers it replaced back.
    ~StopOnTerminationSignal();

    [[nodiscard]] std::stop_token token() const { return stop_.get_token(); }
    // The signal that came, 0 when none did.
    [[nodiscard]] static int signal();
    // Puts the handlers back and raises the signal that came again, for them (the process then ends
    // with 128 + it); nothing when none came.
    void raiseAgain();

private:
    std::stop_source stop_;
    std::array<int, 2> pipe_{-1, -1};
    std::jthread watcher_;
    bool restored_ = false;
    void restore();
};

}  // namespace ckpt
