// The one way every subcommand parses its arguments with CLI11: --help prints the command's help
// (exit 0), a usage error prints one line pointing at --help (exit 2). Every command builds its
// CLI::App and then calls parseCommand before it does anything else, so the App is the one
// definition of its options (cli/options.h reads it from here).
#pragma once

#include "cli/cli.h"
#include "util/printable.h"

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::cli {

namespace detail {
// Set by describeCommand (cli/options.cpp) while it runs a command: parseCommand hands it the
// finished App and ends the command, which then neither parses nor does anything.
using AppInspector = std::function<void(CLI::App&)>;
inline thread_local const AppInspector* tlInspector = nullptr;
}  // namespace detail

// Returns the exit code when parsing already ended the command, nothing when it should run.
inline std::optional<int> parseCommand(CLI::App& app, const std::vector<std::string>& args, std::string_view name,
                                       std::ostream& out, std::ostream& err)
{
    // Every command takes it; cli::run acts on it (and takes it out) before the command runs.
    app.add_flag("-q,--quiet")->description("print nothing but JSON and errors; the exit code is the same");
    if (detail::tlInspector != nullptr) {
        (*detail::tlInspector)(app);
        return kExitOk;
    }
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
    try {
        app.parse(reversed);
    } catch (const CLI::CallForHelp&) {
        out << app.help();
        return kExitOk;
    } catch (const CLI::ParseError& e) {
        err << "ckptscope " << name << ": " << displayText(e.what()) << " (see ckptscope " << name << " --help)\n";
        return kExitBadInput;
    }
    return std::nullopt;
}

}  // namespace ckpt::cli
