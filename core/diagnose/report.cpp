#include "diagnose/report.h"

#include "diagnose/rules.h"
#include "util/json_text.h"
#include "util/printable.h"

#include <nlohmann/json.hpp>

namespace ckpt::diagnose {
namespace {

constexpr std::size_t kWidth = 100;
constexpr std::size_t kPathsShown = 5;

std::string shellQuote(const std::string& s)
{
    const bool plain = !s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                         "0123456789._-/:=,+@%") == std::string::npos;
    if (plain) {
        return s;
    }
    std::string out = "'";
    for (char c : s) {
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return out + "'";
}

// `file`'s extension ("" when none), the dot included.
std::string extensionOf(const std::string& file)
{
    const auto slash = file.rfind('/');
    const auto dot = file.rfind('.');
    const bool hasExt =
        dot != std::string::npos && (slash == std::string::npos || dot > slash) && dot > 0 && file[dot - 1] != '/';
    return hasExt ? file.substr(dot) : std::string();
}

std::string fixedName(std::string file, bool safetensors)
{
    // convert writes a compressed or tarred input's checkpoint uncompressed: `ckpt.pt.gz` becomes
    // `ckpt.fixed.pt` and AllenNLP's `model.tar.gz` `model.fixed.pt`, never a `.gz` name on a zip.
    for (const std::string_view wrapper : {".gz", ".tgz", ".zst", ".xz", ".bz2", ".tar"}) {
        if (extensionOf(file) == wrapper) {
            file.resize(file.size() - wrapper.size());
        }
    }
    const std::string ext = extensionOf(file);
    const std::string stem = file.substr(0, file.size() - ext.size());
    return stem + ".fixed" + (safetensors ? std::string(".safetensors") : ext.empty() ? std::string(".pt") : ext);
}

// Wraps at word boundaries, every line indented.
std::string wrap(const std::string& text, std::size_t indent)
{
    std::string out;
    std::string line(indent, ' ');
    std::size_t at = 0;
    while (at < text.size()) {
        auto end = text.find(' ', at);
        if (end == std::string::npos) {
            end = text.size();
        }
        const auto word = text.substr(at, end - at);
        if (line.size() > indent && line.size() + 1 + word.size() > kWidth) {
            out += line + "\n";
            line.assign(indent, ' ');
        }
        if (line.size() > indent) {
            line += ' ';
        }
        line += word;
        at = end + 1;
    }
    if (line.size() > indent) {
        out += line + "\n";
    }
    return out;
}

std::string upper(std::string_view s)
{
    std::string out(s);
    for (auto& c : out) {
        c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
    }
    return out;
}

}  // namespace

std::string fixFlags(const transform::Options& fix)
{
    std::string cmd;
    if (fix.select) {
        cmd += " --select " + shellQuote(*fix.select);
    }
    if (fix.unwrapModules) {
        cmd += " --unwrap";
    }
    for (const auto& p : fix.stripPrefixes) {
        cmd += " --strip-prefix " + shellQuote(p);
    }
    if (fix.addPrefix) {
        cmd += " --add-prefix " + shellQuote(*fix.addPrefix);
    }
    if (fix.singleModulePrefix) {
        cmd += " --multi-card";
    }
    for (const auto& d : fix.drop) {
        cmd += " --drop " + shellQuote(d);
    }
    if (fix.dropExtraState) {
        cmd += " --drop-extra-state";
    }
    if (!fix.mapLocation.empty()) {
        cmd += " --map-location " + shellQuote(fix.mapLocation.spec());
    }
    if (fix.weightsOnly) {
        cmd += " --weights-only";
    }
    if (fix.compact) {
        cmd += " --compact";
    }
    if (fix.format == transform::OutputFormat::Safetensors) {
        cmd += " --format safetensors";
    }
    if (fix.dequantize) {
        cmd += " --dequantize " + std::string(fix.dequantize == DType::BFloat16 ? "bf16" : dtypeName(*fix.dequantize));
    }
    return cmd.empty() ? cmd : cmd.substr(1);
}

std::string fixCommandLine(const transform::Options& fix, const std::string& file)
{
    const bool st = fix.format == transform::OutputFormat::Safetensors;
    const std::string flags = fixFlags(fix);
    return "ckptscope convert " + shellQuote(file) + " -o " + shellQuote(fixedName(file, st)) +
           (flags.empty() ? "" : " " + flags);
}

std::string renderText(const std::vector<Finding>& findings, const std::string& file)
{
    std::size_t counts[3] = {0, 0, 0};
    for (const auto& f : findings) {
        ++counts[static_cast<int>(f.severity)];
    }
    // Titles, details and paths quote names from the file: escaped, so each stays on its lines and
    // no escape sequence reaches the terminal (an ESC[J there could erase the findings above).
    std::string out = displayText(file) + ": ";
    if (findings.empty()) {
        return out + "no findings\n";
    }
    out += plural(counts[2], "error", "errors") + ", " + plural(counts[1], "warning", "warnings") + ", " +
           withCommas(counts[0]) + " info\n";
    for (const auto& f : findings) {
        out += "\n" + upper(severityName(f.severity)) + " [" + f.code + "] " + displayText(f.title) + "\n";
        out += wrap(displayText(f.detail), 4);
        std::size_t shown = 0;
        std::string at;
        for (const auto& p : f.paths) {
            if (shown == kPathsShown) {
                at += ", ... (" + withCommas(f.paths.size()) + " in all)";
                break;
            }
            at += (shown ? ", " : "") + (p.empty() ? std::string("(root)") : displayText(p));
            ++shown;
        }
        if (!at.empty()) {
            out += "    at: " + at + "\n";
        }
        if (f.fix) {
            out += "    fix: " + displayText(fixCommandLine(*f.fix, file)) + "\n";
        }
    }
    return out;
}

std::string renderJson(const std::vector<Finding>& findings, const std::string& file)
{
    nlohmann::ordered_json j;
    j["schema"] = kJsonSchema;
    j["file"] = file;
    j["findings"] = nlohmann::ordered_json::array();
    for (const auto& f : findings) {
        j["findings"].push_back(nlohmann::ordered_json::parse(findingToJson(f)));
    }
    return dumpJson(j, 2) + "\n";
}

int findingsExitCode(const std::vector<Finding>& findings)
{
    for (const auto& f : findings) {
        if (f.severity != Severity::Info) {
            return 1;
        }
    }
    return 0;
}

}  // namespace ckpt::diagnose
