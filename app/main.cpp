// Dispatch only: a subcommand runs the Qt-free command line (no display needed, no Qt object
// created); anything else opens the window.
#include "cli/cli.h"

#include <iostream>
#include <string>
#include <vector>

#ifdef CKPTSCOPE_WITH_GUI
#include "mainapp.h"
#endif

int main(int argc, char** argv)
{
    std::vector<std::string> args(argv + 1, argv + argc);  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
    if (!args.empty() && ckpt::cli::isSubcommand(args.front())) {
        return ckpt::cli::run(args, std::cout, std::cerr);
    }
#ifdef CKPTSCOPE_WITH_GUI
    return ckpt::ui::runApplication(argc, argv);
#else
    std::cerr << "ckptscope: built without the window; use a subcommand (ckptscope --help)\n";
    return ckpt::cli::kExitBadInput;
#endif
}
