// Runs the `ckptscope` command line in-process, as main() does for a subcommand, with its streams
// captured: the exit code, stdout and stderr the command-line suites assert on.
#pragma once

#include "cli/cli.h"

#include <sstream>
#include <string>
#include <vector>

namespace ckpt::test {

struct CliRun {
    int rc = -1;
    std::string out;
    std::string err;
};

// Runs `command` (cli::run, or one subcommand's entry such as cli::cmdConvert) on `args`.
template <class Command> CliRun capture(const Command& command, const std::vector<std::string>& args)
{
    std::ostringstream out;
    std::ostringstream err;
    CliRun r;
    r.rc = command(args, out, err);
    r.out = out.str();
    r.err = err.str();
    return r;
}

// The whole command line; args excludes the program name: {"inspect", "model.pt", "--json"}.
inline CliRun ckptscope(const std::vector<std::string>& args)
{
    return capture(ckpt::cli::run, args);
}

}  // namespace ckpt::test
