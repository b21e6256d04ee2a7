// The options of every subcommand as their CLI::App defines them, the one definition the command
// line parses with. The man page's synopsis and option lists, the bash completion and each
// --help come from it (tests/cli/tst_docs.cpp renders and checks them), and the command line
// reads it to tell input files from option values when it is given several inputs.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::cli {

struct OptionDef {
    std::vector<std::string> names;    // "-o", "--output"; a positional's own name ("FILE")
    std::string value;                 // what it takes ("OUT", "N", "FILE"); empty for a flag
    std::vector<std::string> choices;  // the only values it accepts (torch, safetensors, dcp), if a closed set
    std::string help;
    bool positional = false;
    bool required = false;
    bool repeatable = false;            // a positional taking several, or an option given several times
    std::vector<std::string> needs;     // options it goes with (their first names)
    std::vector<std::string> excludes;  // options it cannot go with
    [[nodiscard]] bool named(std::string_view name) const;
};

struct CommandDef {
    std::string name;     // "inspect"
    std::string summary;  // the line `ckptscope --help` gives it
    std::string description;
    std::string footer;              // the examples, environment and exit codes of its --help
    std::vector<OptionDef> options;  // positionals first, then options as --help lists them
    [[nodiscard]] const OptionDef* find(std::string_view name) const;
};

// The command's definition, read from the CLI::App it builds (nothing is parsed or run), or
// nothing for a name that is no subcommand.
[[nodiscard]] std::optional<CommandDef> describeCommand(std::string_view name);

// Every subcommand, in the order `ckptscope --help` lists them.
[[nodiscard]] std::vector<CommandDef> describeCommands();

}  // namespace ckpt::cli
