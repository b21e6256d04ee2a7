// The one way every subcommand parses its arguments with CLI11: --help prints the command's help
// (exit 0), a usage error prints one line pointing at --help (exit 2).
#pragma once

#include "cli/cli.h"
#include "util/printable.h"

#include <CLI/CLI.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::cli {

// Returns the exit code when parsing already ended the command, nothing when it should run.
inline std::optional<int> parseCommand(CLI::App& app, const std::vector<std::string>& args, std::string_view name,
                                       std::ostream& out, std::ostream& err)
{
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
