// What the man page and the bash completion say about the command line, rendered from its one
// definition of the options (cli/options.h, read from each command's CLI::App): tst_docs checks
// that packaging/ holds exactly this, and writes it there when CKPTSCOPE_UPDATE_DOCS=1.
#pragma once

#include "checkpoint/extensions.h"
#include "cli/options.h"
#include "transform/options.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ckpt::test::docs {

// Where the generated parts of the man page start and end.
inline const std::string kSynopsisBegin =
    ".\\\" BEGIN SYNOPSIS generated from the option definitions (tests/cli/tst_docs.cpp)";
inline const std::string kSynopsisEnd = ".\\\" END SYNOPSIS";
inline const std::string kOptionsBegin =
    ".\\\" BEGIN OPTIONS generated from the option definitions (tests/cli/tst_docs.cpp)";
inline const std::string kOptionsEnd = ".\\\" END OPTIONS";

// Text as roff reads it: a backslash printed, every hyphen a real minus (options are typed), and a
// line that would start with a control character made plain.
inline std::string roff(const std::string& text)
{
    std::string out;
    for (const char c : text) {
        if (c == '\\') {
            out += "\\e";
        } else if (c == '-') {
            out += "\\-";
        } else {
            out += c;
        }
    }
    if (!out.empty() && (out.front() == '.' || out.front() == '\'')) {
        out.insert(0, "\\&");
    }
    return out;
}

inline std::string bold(const std::string& s)
{
    return "\\fB" + roff(s) + "\\fR";
}

inline std::string italic(const std::string& s)
{
    return "\\fI" + roff(s) + "\\fR";
}

// What follows an option's name: " torch|safetensors|dcp" for a closed set, " OUT", or nothing.
inline std::string valueText(const cli::OptionDef& o)
{
    if (!o.choices.empty()) {
        std::string alternatives;
        for (const auto& c : o.choices) {
            alternatives += (alternatives.empty() ? "" : "|") + bold(c);
        }
        return " " + alternatives;
    }
    return o.value.empty() ? std::string() : " " + italic(o.value);
}

// "-o OUT", "--format torch|safetensors|dcp", "FILE...": how an option is written in a synopsis.
inline std::string usage(const cli::OptionDef& o)
{
    if (o.positional) {
        const std::string name = italic(o.names.front()) + (o.repeatable ? "..." : "");
        return o.required ? name : "[" + name + "]";
    }
    return "[" + bold(o.names.front()) + valueText(o) + "]" + (o.repeatable ? "..." : "");
}

inline std::string manSynopsis(const std::vector<cli::CommandDef>& commands)
{
    // No hyphenation: an option cut in two is not what one types.
    std::string s = kSynopsisBegin + "\n.nh\n.B ckptscope\n.RI [ FILE ...]\n";
    for (const auto& c : commands) {
        s += ".br\n.B ckptscope " + c.name + "\n";
        std::string line;
        for (const auto& o : c.options) {
            line += (line.empty() ? "" : " ") + usage(o);
        }
        s += line + "\n";
    }
    return s + ".hy\n" + kSynopsisEnd + "\n";
}

inline std::string joined(const std::vector<std::string>& names)
{
    std::string s;
    for (const auto& n : names) {
        s += (s.empty() ? "" : ", ") + bold(n);
    }
    return s;
}

inline std::string manOptions(const std::vector<cli::CommandDef>& commands)
{
    std::string s = kOptionsBegin + "\n";
    for (const auto& c : commands) {
        s += ".SS ckptscope " + c.name + "\n";
        for (const auto& o : c.options) {
            s += ".TP\n";
            if (o.positional) {
                s += italic(o.names.front()) + (o.repeatable ? "..." : "") + "\n";
            } else {
                s += joined(o.names) + valueText(o) + "\n";
            }
            std::string help = roff(o.help);
            if (!o.needs.empty()) {
                help += " (with " + joined(o.needs) + ")";
            }
            if (!o.excludes.empty()) {
                help += " (not with " + joined(o.excludes) + ")";
            }
            s += help + (help.ends_with(".") ? "" : ".") + "\n";
        }
    }
    return s + kOptionsEnd + "\n";
}

// Replaces what lies between `begin` and `end` (both lines kept) with `generated`, which carries
// them; false when the markers are not there.
inline bool replaceRegion(std::string& text, const std::string& begin, const std::string& end,
                          const std::string& generated)
{
    const auto from = text.find(begin);
    const auto to = text.find(end, from == std::string::npos ? 0 : from);
    if (from == std::string::npos || to == std::string::npos) {
        return false;
    }
    const auto stop = text.find('\n', to);
    text.replace(from, (stop == std::string::npos ? text.size() : stop + 1) - from, generated);
    return true;
}

inline std::string region(const std::string& text, const std::string& begin, const std::string& end)
{
    const auto from = text.find(begin);
    const auto to = text.find(end, from == std::string::npos ? 0 : from);
    if (from == std::string::npos || to == std::string::npos) {
        return {};
    }
    const auto stop = text.find('\n', to);
    return text.substr(from, (stop == std::string::npos ? text.size() : stop + 1) - from);
}

// What bash offers for an option's value, by what the value is.
inline std::string completeValue(const cli::OptionDef& o)
{
    auto words = [](const std::vector<std::string>& w) {
        std::string s;
        for (const auto& x : w) {
            s += (s.empty() ? "" : " ") + x;
        }
        return "COMPREPLY=($(compgen -W \"" + s + "\" -- \"$cur\")); return";
    };
    if (!o.choices.empty()) {
        return words(o.choices);
    }
    if (o.value == "OUT" || o.value == "REF") {
        return "_filedir; return";
    }
    if (o.value == "DEVICE") {
        std::vector<std::string> d{"cpu"};
        for (int i = 0; i < 8; ++i) {
            d.push_back("cuda:" + std::to_string(i));
        }
        return words(d);
    }
    if (o.value == "SPEC") {
        return words({"cpu", "cuda:0", "cuda:1", "cuda:0=cpu", "cuda:0=cuda:1"});
    }
    if (o.value == "PREFIX") {
        std::vector<std::string> p;
        for (const auto& w : transform::kWrapperSegments) {
            p.push_back(std::string(w.name) + ".");
        }
        p.insert(p.begin() + 1, "module.module.");
        p.emplace_back("model.");
        return words(p);
    }
    return "return";  // free text: nothing to offer
}

inline std::string bashCompletion(const std::vector<cli::CommandDef>& commands)
{
    std::string exts;
    for (const auto e : kCheckpointFileExtensions) {
        exts += (exts.empty() ? "" : "|") + std::string(e.substr(1));
    }
    std::string names;
    for (const auto& c : commands) {
        names += c.name + " ";
    }
    std::string s =
        "# bash completion for ckptscope. Generated from the command line's own option definitions by\n"
        "# tests/cli/tst_docs.cpp, which fails when this file differs from what it renders; to rewrite it:\n"
        "# CKPTSCOPE_UPDATE_DOCS=1 build/tests/cli/tst_docs\n"
        "_ckptscope()\n"
        "{\n"
        "    local cur prev words cword\n"
        "    _init_completion || return\n"
        "    local cmds=\"" +
        names +
        "help\"\n"
        "    if ((cword == 1)); then\n"
        "        COMPREPLY=($(compgen -W \"$cmds --help --version\" -- \"$cur\"))\n"
        "        [[ $cur != -* ]] && _filedir '@(" +
        exts +
        ")'\n"
        "        return\n"
        "    fi\n"
        "    local cmd=${words[1]} opts=\"\"\n"
        "    case $cmd in\n";
    for (const auto& c : commands) {
        std::string opts;
        for (const auto& o : c.options) {
            if (!o.positional) {
                for (const auto& n : o.names) {
                    opts += (opts.empty() ? "" : " ") + n;
                }
            }
        }
        s += "        " + c.name + ") opts=\"" + opts + "\" ;;\n";
    }
    s += "        help) COMPREPLY=($(compgen -W \"$cmds\" -- \"$cur\")); return ;;\n"
         "    esac\n"
         "    case \"$cmd $prev\" in\n";
    // One branch per way of completing a value, naming every command and option that completes so.
    std::map<std::string, std::vector<std::string>> byAction;
    for (const auto& c : commands) {
        for (const auto& o : c.options) {
            if (o.positional || o.value.empty()) {
                continue;
            }
            for (const auto& n : o.names) {
                byAction[completeValue(o)].push_back("\"" + c.name + " " + n + "\"");
            }
        }
    }
    for (const auto& [action, labels] : byAction) {
        std::string l;
        for (const auto& x : labels) {
            l += (l.empty() ? "" : "|") + x;
        }
        s += "        " + l + ") " + action + " ;;\n";
    }
    s += "    esac\n"
         "    if [[ $cur == -* ]]; then\n"
         "        COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
         "    else\n"
         "        _filedir '@(" +
         exts +
         ")'\n"
         "    fi\n"
         "}\n"
         "complete -F _ckptscope ckptscope\n";
    return s;
}

}  // namespace ckpt::test::docs
