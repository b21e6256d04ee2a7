// The headless command line: `ckptscope <subcommand> ...` runs here with no Qt object at all.
// Every subcommand writes only to the streams it is given, so tests run it in-process.
#pragma once

#include <iosfwd>
#include <span>
#include <string>
#include <vector>

namespace ckpt::cli {

// Exit codes everywhere: 0 success, 1 ran and found problems / failed, 2 bad input or usage.
inline constexpr int kExitOk = 0;
inline constexpr int kExitProblems = 1;
inline constexpr int kExitBadInput = 2;

// True when argv[1] names a subcommand (or --help/--version), i.e. no window is wanted.
[[nodiscard]] bool isSubcommand(const std::string& arg);

// The command list of --help: "  inspect   show the key tree, ..." a line each.
void printCommands(std::ostream& out);

// A subcommand: its name, its entry (args exclude the program's and the command's name) and the
// line --help gives it.
using CommandFn = int (*)(const std::vector<std::string>&, std::ostream&, std::ostream&);
struct CommandInfo {
    const char* name;
    CommandFn run;
    const char* summary;
};
// Every subcommand, in the order --help lists them.
[[nodiscard]] std::span<const CommandInfo> commands();

// args excludes the program name: {"inspect", "model.pt", "--json"}.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace ckpt::cli
