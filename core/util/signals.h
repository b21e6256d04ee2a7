// The signals a command ends on when a user stops it (Ctrl-C, `kill`, a closed terminal), and one way
// to handle them: the temporary-output remover (write/targets.h) and the progress line's eraser
// (app/cli/progress.h) both install their handler here.
#pragma once

#include <array>
#include <csignal>

namespace ckpt {

inline constexpr std::array<int, 3> kTerminationSignals{SIGINT, SIGTERM, SIGHUP};

// Installs `handler` for each termination signal, with all three blocked while it runs (so one
// handler never interrupts another). Where `previous` is given, the handlers it replaces are kept
// there, indexed by signal number, for `handler` to chain to.
void onTerminationSignals(void (*handler)(int), std::array<struct sigaction, 32>* previous = nullptr);

}  // namespace ckpt
