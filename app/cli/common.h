// Pieces every subcommand shares: input expansion, the one-line error (progress: cli/progress.h).
#pragma once

#include "util/error.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace ckpt::cli {

// Expands glob patterns that the shell left alone (quoted, or from scripts); a pattern that
// matches nothing is kept as given so the open error names it.
[[nodiscard]] std::vector<std::string> expandInputs(const std::vector<std::string>& patterns);

// "ckptscope: <path>: <message>" on one line; `file` names the input when the error itself names
// no file, so every error line says which file it is about.
void printError(std::ostream& err, const Error& e, const std::string& file = {});

// For the executables: an exception nothing caught prints one line and exits 2 (no abort), and
// SIGINT/SIGTERM/SIGHUP remove temporary outputs before exiting 130/143/129.
void installProcessHandlers();

// What a command's input may be, for its --help: every checkpoint file extension
// (checkpoint/extensions.h, the list the window's dialogs use), a set, or a folder holding one model.
[[nodiscard]] std::string inputKindsHelp();

}  // namespace ckpt::cli
