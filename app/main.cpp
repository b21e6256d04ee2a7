// Dispatch only. A subcommand runs the Qt-free command line: no Qt library is even loaded (they
// cost ~22 ms of start-up, a third of `inspect` on a 1 GiB file). Anything else replaces this
// process with the window, `ckptscope-gui`, found beside this binary (build tree) or under
// libexec (installed), or named by $CKPTSCOPE_GUI.
#include "cli/cli.h"
#include "cli/common.h"
#include "util/printable.h"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace {

std::filesystem::path findGui()
{
    if (const char* env = std::getenv("CKPTSCOPE_GUI"); env != nullptr && *env != '\0') {
        return env;
    }
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) {
        return {};
    }
    const auto dir = self.parent_path();
    for (const auto& candidate : {dir / "ckptscope-gui", dir / ".." / "libexec" / "ckptscope" / "ckptscope-gui"}) {
        if (::access(candidate.c_str(), X_OK) == 0) {
            return candidate;
        }
    }
    return {};
}

// A window needs an X or Wayland display, or a Qt platform named explicitly (offscreen, vnc...).
bool hasDisplay()
{
    const auto set = [](const char* var) {
        const char* v = std::getenv(var);
        return v != nullptr && *v != '\0';
    };
    return set("DISPLAY") || set("WAYLAND_DISPLAY") || set("QT_QPA_PLATFORM");
}

}  // namespace

int main(int argc, char** argv)
{
    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && ckpt::cli::isSubcommand(args.front())) {
        ckpt::cli::installProcessHandlers();
        const int rc = ckpt::cli::run(args, std::cout, std::cerr);
        std::cout.flush();
        return rc;
    }
    // Before Qt is even loaded: a typo for a subcommand, or no display to open a window on, would
    // otherwise end in Qt's "could not load the Qt platform plugin" and SIGABRT.
    if (!args.empty() && !args.front().starts_with("-")) {
        std::error_code ec;
        if (!std::filesystem::exists(args.front(), ec)) {
            std::cerr << "ckptscope: '" << ckpt::displayText(args.front())
                      << "' is neither a command nor an existing file\n";
            ckpt::cli::printCommands(std::cerr);
            return ckpt::cli::kExitBadInput;
        }
    }
    if (!hasDisplay()) {
        std::cerr << "ckptscope: no display: use `ckptscope inspect`/`check`/`convert`, or set DISPLAY\n";
        return ckpt::cli::kExitBadInput;
    }
    const auto gui = findGui();
    if (gui.empty()) {
        std::cerr << "ckptscope: the window (ckptscope-gui) is not installed; use a subcommand (ckptscope --help)\n";
        return ckpt::cli::kExitBadInput;
    }
    ::execv(gui.c_str(), argv);  // keeps argv[0] and the arguments
    std::cerr << "ckptscope: cannot start " << gui.string() << ": " << std::generic_category().message(errno) << '\n';
    return ckpt::cli::kExitProblems;
}
