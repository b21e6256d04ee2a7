#include "checkpoint/script_classes.h"

#include <algorithm>

namespace ckpt {
namespace {

constexpr std::string_view kCodeDir = "code/";
constexpr std::string_view kSourceSuffix = ".py";

bool isIdentifierChar(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

// The quoted names of a printed list, `["weight", "bias", ]`; the printer quotes with '"', a
// hand-edited file may use '\''.
std::vector<std::string> quotedNames(std::string_view list)
{
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < list.size()) {
        const char quote = list[i];
        if (quote != '"' && quote != '\'') {
            ++i;
            continue;
        }
        const std::size_t end = list.find(quote, i + 1);
        if (end == std::string_view::npos) {
            break;
        }
        out.emplace_back(list.substr(i + 1, end - i - 1));
        i = end + 1;
    }
    return out;
}

// `  __parameters__ = [...]` in a class body (the printer indents by two): the list after `=`.
bool listLine(std::string_view line, std::string_view field, std::vector<std::string>& out)
{
    const std::size_t start = line.find_first_not_of(' ');
    if (start != 2 || line.substr(start, field.size()) != field) {
        return false;
    }
    std::string_view rest = line.substr(start + field.size());
    rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
    if (rest.empty() || rest.front() != '=') {
        return false;
    }
    out = quotedNames(rest.substr(1));
    return true;
}

// `class Name(Base):` at column 0: the name and whether Base is `Module`.
bool classLine(std::string_view line, std::string& name, bool& module)
{
    constexpr std::string_view kClass = "class ";
    if (line.substr(0, kClass.size()) != kClass) {
        return false;
    }
    std::size_t i = kClass.size();
    const std::size_t begin = i;
    while (i < line.size() && isIdentifierChar(line[i])) {
        ++i;
    }
    if (i == begin) {
        return false;
    }
    name = std::string(line.substr(begin, i - begin));
    const std::string_view rest = line.substr(i);
    module = rest.substr(0, 8) == "(Module)";
    return true;
}

}  // namespace

std::string scriptModuleOfRecord(std::string_view relName)
{
    if (relName.substr(0, kCodeDir.size()) != kCodeDir || relName.size() <= kCodeDir.size() + kSourceSuffix.size() ||
        relName.substr(relName.size() - kSourceSuffix.size()) != kSourceSuffix) {
        return {};
    }
    std::string module(relName.substr(kCodeDir.size(), relName.size() - kCodeDir.size() - kSourceSuffix.size()));
    std::replace(module.begin(), module.end(), '/', '.');
    return module;
}

void parseScriptSource(std::string_view moduleName, std::string_view source, ScriptClasses& out)
{
    ScriptClass* current = nullptr;
    std::size_t pos = 0;
    while (pos < source.size()) {
        std::size_t end = source.find('\n', pos);
        if (end == std::string_view::npos) {
            end = source.size();
        }
        std::string_view line = source.substr(pos, end - pos);
        if (!line.empty() && line.back() == '\r') {
            line.remove_suffix(1);
        }
        pos = end + 1;
        std::string name;
        bool module = false;
        if (classLine(line, name, module)) {
            current = &out[std::string(moduleName) + "." + name];
            *current = ScriptClass{};
            current->module = module;
            continue;
        }
        if (!line.empty() && line.front() != ' ') {
            current = nullptr;  // a top-level statement ends the class body
            continue;
        }
        if (current != nullptr && !listLine(line, "__parameters__", current->parameters)) {
            listLine(line, "__buffers__", current->buffers);
        }
    }
}

}  // namespace ckpt
