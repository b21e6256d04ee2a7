#include "cli/cli.h"

#include "checkpoint/extensions.h"
#include "cli/cmd_check.h"
#include "cli/cmd_convert.h"
#include "cli/cmd_diff.h"
#include "cli/cmd_inspect.h"
#include "cli/cmd_testload.h"
#include "cli/common.h"
#include "cli/json_out.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "util/printable.h"
#include "write/targets.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <glob.h>
#include <ostream>
#include <sstream>
#include <unistd.h>

namespace ckpt::cli {
namespace {

using Command = CommandFn;

const CommandInfo kCommands[] = {
    {"inspect", &cmdInspect, "show the key tree, tensors, storages and objects"},
    {"check", &cmdCheck, "find what will go wrong when the file is loaded, with fixes"},
    {"convert", &cmdConvert, "write a fixed copy (single-card, multi-card, remapped, safetensors)"},
    {"testload", &cmdTestload, "load every tensor onto a device and watch every GPU's memory"},
    {"diff", &cmdDiff, "compare two checkpoints: keys, renames, dtypes, shapes and values"},
};

void printUsage(std::ostream& out)
{
    out << "ckptscope " CKPTSCOPE_VERSION " - inspect, diagnose and fix PyTorch checkpoints without running them\n\n"
           "Usage:\n"
           "  ckptscope [FILE...]              open the window\n"
           "  ckptscope <command> [options]    run headless\n\n"
           "Commands:\n";
    printCommands(out);
    out << "\nOptions for every command: --quiet (-q) prints nothing but JSON and errors; inspect, check and\n"
           "convert take several files or globs (convert then writes into the directory given with -o).\n"
           "\nRun `ckptscope <command> --help` for a command's options and examples.\n"
           "Exit codes: 0 success, 1 the operation ran and found problems or failed, 2 bad input or usage.\n";
}

// Whether `opt` takes a value, from the command's own definition: needed to tell input files from
// option values when one command line names several inputs.
bool takesValue(const CommandDef& def, const std::string& opt)
{
    const OptionDef* o = def.find(opt);
    return o != nullptr && !o->positional && !o->value.empty();
}

struct Split {
    std::vector<std::string> inputs;
    std::vector<std::string> options;  // everything else, in order
    std::string output;                // convert's -o value
};

Split splitInputs(const std::string& cmd, const std::vector<std::string>& args)
{
    const auto def = describeCommand(cmd);
    Split s;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a.starts_with("-") && a != "-") {
            const auto eq = a.find('=');
            const std::string name = eq == std::string::npos ? a : a.substr(0, eq);
            if (cmd == "convert" && (name == "-o" || name == "--output")) {
                if (eq != std::string::npos) {
                    s.output = a.substr(eq + 1);
                } else if (i + 1 < args.size()) {
                    s.output = args[++i];
                }
                continue;
            }
            s.options.push_back(a);
            if (eq == std::string::npos && def && takesValue(*def, name) && i + 1 < args.size()) {
                s.options.push_back(args[++i]);
            }
        } else {
            s.inputs.push_back(a);
        }
    }
    s.inputs = expandInputs(s.inputs);
    return s;
}

// `check` and `convert` work on one file; several files (or a glob) run them once per file. JSON
// documents are gathered as {"schema": N, "files": [...]}, the exit code is the worst one, and
// convert writes each output into the directory given with -o.
int fanOut(Command run, const std::string& cmd, const std::vector<std::string>& args, std::ostream& out,
           std::ostream& err)
{
    const Split split = splitInputs(cmd, args);
    const bool json = std::find(split.options.begin(), split.options.end(), "--json") != split.options.end();
    const bool help = std::find_if(split.options.begin(), split.options.end(), [](const std::string& o) {
                          return o == "--help" || o == "-h";
                      }) != split.options.end();
    if (split.inputs.size() <= 1 || help) {
        return run(args, out, err);
    }
    std::vector<std::string> targets;
    if (cmd == "convert") {
        std::error_code ec;
        if (split.output.empty() || !std::filesystem::is_directory(split.output, ec)) {
            err << "ckptscope convert: with several inputs, -o must name an existing directory\n";
            return kExitBadInput;
        }
        // Every output is planned and checked before the first is written: one input's conversion
        // must never replace another input, or an output written a moment earlier.
        const bool safetensors =
            std::find(split.options.begin(), split.options.end(), "safetensors") != split.options.end();
        std::vector<write::Conversion> batch;
        for (const auto& input : split.inputs) {
            std::filesystem::path target =
                std::filesystem::path(split.output) / std::filesystem::path(input).filename();
            if (safetensors) {
                target.replace_extension(".safetensors");
            }
            targets.push_back(target.string());
            batch.push_back({input, target.string()});
        }
        if (auto ok = write::checkConversions(batch); !ok) {
            printError(err, ok.error());
            return kExitBadInput;
        }
    }
    int worst = kExitOk;
    bool first = true;
    if (json) {
        out << "{\"schema\": " << kJsonSchema << ", \"files\": [\n";
    }
    for (std::size_t i = 0; i < split.inputs.size(); ++i) {
        std::vector<std::string> one{split.inputs[i]};
        if (cmd == "convert") {
            one.insert(one.end(), {"-o", targets[i]});
        }
        one.insert(one.end(), split.options.begin(), split.options.end());
        std::ostringstream doc;
        const int rc = run(one, doc, err);
        worst = std::max(worst, rc);
        std::string text = doc.str();
        if (json) {
            while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
                text.pop_back();
            }
            if (text.empty()) {
                continue;  // the error went to stderr
            }
            out << (first ? "" : ",\n") << text;
        } else {
            out << (first ? "" : "\n") << text;
        }
        first = false;
    }
    if (json) {
        out << "\n]}\n";
    }
    return worst;
}

// Drops --quiet/-q: human-readable output then goes nowhere (JSON still prints, errors still go to
// stderr, exit codes are unchanged), which is what scripts that only test the exit code want.
bool takeQuiet(std::vector<std::string>& args)
{
    const auto before = args.size();
    std::erase_if(args, [](const std::string& a) { return a == "--quiet" || a == "-q"; });
    return args.size() != before && std::find(args.begin(), args.end(), "--json") == args.end();
}

}  // namespace

std::span<const CommandInfo> commands()
{
    return kCommands;
}

void printCommands(std::ostream& out)
{
    for (const auto& c : kCommands) {
        out << "  " << c.name << std::string(10 - std::string(c.name).size(), ' ') << c.summary << '\n';
    }
}

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
            std::vector<std::string> rest(args.begin() + 1, args.end());
            std::ostringstream discarded;
            const bool quiet = takeQuiet(rest);
            std::ostream& sink = quiet ? discarded : out;
            const QuietProgress noProgress(quiet);
            const std::string name = c.name;
            if (name == "check" || name == "convert") {
                return fanOut(c.run, name, rest, sink, err);
            }
            return c.run(rest, sink, err);
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
        // glob() is not thread-safe; the command line runs on one thread.
        if (::glob(p.c_str(), 0, nullptr, &g) == 0) {  // NOLINT(concurrency-mt-unsafe)
            for (std::size_t i = 0; i < g.gl_pathc; ++i) {
                files.emplace_back(g.gl_pathv[i]);
            }
        } else {
            files.push_back(p);
        }
        ::globfree(&g);
    }
    return files;
}

void printError(std::ostream& err, const Error& e, const std::string& file)
{
    if (e.path.empty() && !file.empty()) {
        Error named = e;
        named.path = file;
        err << "ckptscope: " << named.describe() << '\n';
        return;
    }
    err << "ckptscope: " << e.describe() << '\n';
}

namespace {

// Whatever escapes (a bug, an allocation failure on a worker thread): one line and exit 2, never an
// abort with a core dump, and no temporary output left behind.
[[noreturn]] void lastResort()
{
    std::string what = "unknown error";
    if (auto e = std::current_exception()) {
        try {
            std::rethrow_exception(e);
        } catch (const std::bad_alloc&) {
            what = "out of memory";
        } catch (const std::exception& ex) {
            what = ex.what();
        } catch (...) {
        }
    }
    write::detail::removeRegisteredTemps();
    eraseProgressLine();
    const std::string line = "ckptscope: internal error: " + displayText(what) + " (please report it)\n";
    [[maybe_unused]] const auto n = ::write(STDERR_FILENO, line.data(), line.size());
    ::_exit(kExitBadInput);
}

}  // namespace

void installProcessHandlers()
{
    std::set_terminate(&lastResort);
    write::removeTempsOnSignals();
    clearProgressOnSignals();  // runs first: the line is erased, then the temporaries go
}

std::string inputKindsHelp()
{
    std::string exts;
    for (const auto ext : kCheckpointFileExtensions) {
        exts += (exts.empty() ? "" : " ") + std::string(ext);
    }
    return "a checkpoint file (" + exts +
           "), a multi-file set (its folder, index or one of its files), a folder holding one model beside a "
           "run's state (accelerate save_state, a PEFT adapter, a Trainer checkpoint-N), or any of these remote: an "
           "http:// or https:// URL, hf://ORG/REPO[@REVISION][/PATH], s3://BUCKET/KEY or s3://BUCKET/PREFIX/";
}

}  // namespace ckpt::cli
