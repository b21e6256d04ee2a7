#include "cli/cli.h"

#include "cli/cmd_inspect.h"
#include "cli/common.h"

#include <glob.h>
#include <ostream>
#include <unistd.h>

#ifdef CKPTSCOPE_HAVE_CMD_CHECK
#include "cli/cmd_check.h"
#endif
#ifdef CKPTSCOPE_HAVE_CMD_CONVERT
#include "cli/cmd_convert.h"
#endif
#ifdef CKPTSCOPE_HAVE_CMD_TESTLOAD
#include "cli/cmd_testload.h"
#endif

namespace ckpt::cli {
namespace {

using Command = int (*)(const std::vector<std::string>&, std::ostream&, std::ostream&);

struct Entry {
    const char* name;
    Command run;
    const char* summary;
};

// NOLINTNEXTLINE(cert-err58-cpp)
const Entry kCommands[] = {
    {"inspect", &cmdInspect, "show the key tree, tensors, storages and objects"},
#ifdef CKPTSCOPE_HAVE_CMD_CHECK
    {"check", &cmdCheck, "find what will go wrong when the file is loaded, with fixes"},
#endif
#ifdef CKPTSCOPE_HAVE_CMD_CONVERT
    {"convert", &cmdConvert, "write a fixed copy (single-card, multi-card, remapped, safetensors)"},
#endif
#ifdef CKPTSCOPE_HAVE_CMD_TESTLOAD
    {"testload", &cmdTestload, "load every tensor onto a device and watch every GPU's memory"},
#endif
};

void printUsage(std::ostream& out)
{
    out << "ckptscope " CKPTSCOPE_VERSION " - inspect, diagnose and fix PyTorch checkpoints without running them\n\n"
           "Usage:\n"
           "  ckptscope [FILE...]              open the window\n"
           "  ckptscope <command> [options]    run headless\n\n"
           "Commands:\n";
    for (const auto& c : kCommands) {
        out << "  " << c.name << std::string(10 - std::string(c.name).size(), ' ') << c.summary << '\n';
    }
    out << "\nRun `ckptscope <command> --help` for a command's options and examples.\n"
           "Exit codes: 0 success, 1 the operation ran and found problems or failed, 2 bad input or usage.\n";
}

}  // namespace

bool isSubcommand(const std::string& arg)
{
    if (arg == "--help" || arg == "-h" || arg == "--version" || arg == "help") {
        return true;
    }
    for (const auto& c : kCommands) {
        if (arg == c.name) {
            return true;
        }
    }
    // Known commands of a fuller build are still headless: say they are missing rather than open a window.
    return arg == "check" || arg == "convert" || arg == "testload";
}

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)
{
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
        printUsage(out);
        return kExitOk;
    }
    if (args[0] == "--version") {
        out << "ckptscope " CKPTSCOPE_VERSION "\n";
        return kExitOk;
    }
    if (args[0] == "help") {
        if (args.size() > 1) {
            return run({args[1], "--help"}, out, err);
        }
        printUsage(out);
        return kExitOk;
    }
    for (const auto& c : kCommands) {
        if (args[0] == c.name) {
            return c.run(std::vector<std::string>(args.begin() + 1, args.end()), out, err);
        }
    }
    err << "ckptscope: '" << args[0] << "' is not available in this build\n";
    return kExitBadInput;
}

std::vector<std::string> expandInputs(const std::vector<std::string>& patterns)
{
    std::vector<std::string> files;
    for (const auto& p : patterns) {
        if (p.find_first_of("*?[") == std::string::npos) {
            files.push_back(p);
            continue;
        }
        glob_t g{};
        if (::glob(p.c_str(), 0, nullptr, &g) == 0) {
            for (std::size_t i = 0; i < g.gl_pathc; ++i) {
                files.emplace_back(g.gl_pathv[i]);  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
            }
        } else {
            files.push_back(p);
        }
        ::globfree(&g);
    }
    return files;
}

void printError(std::ostream& err, const Error& e)
{
    err << "ckptscope: " << e.describe() << '\n';
}

bool stderrIsTerminal()
{
    return ::isatty(STDERR_FILENO) == 1;
}

}  // namespace ckpt::cli
