#include "cli/options.h"

#include "cli/cli.h"
#include "cli/parse.h"

#include <algorithm>
#include <sstream>

namespace ckpt::cli {
namespace {

std::string firstName(const CLI::Option& o)
{
    if (!o.get_lnames().empty()) {
        return "--" + o.get_lnames().front();
    }
    if (!o.get_snames().empty()) {
        return "-" + o.get_snames().front();
    }
    return o.get_name();
}

// The descriptions of an option's validators: "{torch,safetensors,dcp}" for a closed set.
std::vector<std::string> validatorDescriptions(CLI::Option& o)
{
    std::vector<std::string> all;
    for (int i = 0;; ++i) {
        try {
            all.push_back(o.get_validator(i)->get_description());
        } catch (const CLI::OptionNotFound&) {
            break;  // CLI11 says how many there are only by refusing the next index
        }
    }
    return all;
}

// CLI11's type name is the value's name followed by ":<description>" of each validator
// ("FORMAT:{torch,safetensors,dcp}", "X:X >= 0"); a closed set of choices is a description in braces.
OptionDef describe(CLI::Option& o)
{
    OptionDef d;
    d.positional = !o.nonpositional();
    if (d.positional) {
        d.names.push_back(o.get_name());
    }
    for (const auto& s : o.get_snames()) {
        d.names.push_back("-" + s);
    }
    for (const auto& l : o.get_lnames()) {
        d.names.push_back("--" + l);
    }
    std::string type = o.get_type_name();
    for (const auto& v : validatorDescriptions(o)) {
        if (!v.empty() && type.ends_with(":" + v)) {
            type.resize(type.size() - v.size() - 1);
        }
        if (v.size() > 2 && v.front() == '{' && v.back() == '}') {
            std::istringstream items(v.substr(1, v.size() - 2));
            for (std::string item; std::getline(items, item, ',');) {
                d.choices.push_back(item);
            }
        }
    }
    if (o.get_items_expected_max() > 0) {
        d.value = d.positional ? o.get_name() : type;
    }
    d.help = o.get_description();
    d.required = o.get_required();
    d.repeatable = o.get_items_expected_max() > 1 || o.get_multi_option_policy() == CLI::MultiOptionPolicy::TakeAll;
    for (const auto* n : o.get_needs()) {
        d.needs.push_back(firstName(*n));
    }
    for (const auto* x : o.get_excludes()) {
        d.excludes.push_back(firstName(*x));
    }
    std::sort(d.needs.begin(), d.needs.end());
    std::sort(d.excludes.begin(), d.excludes.end());
    return d;
}

CommandDef describe(const CommandInfo& c)
{
    CommandDef def;
    def.name = c.name;
    def.summary = c.summary;
    const detail::AppInspector inspector = [&def](CLI::App& app) {
        def.description = app.get_description();
        def.footer = app.get_footer();
        // Positionals first, as the usage line names them.
        for (const bool positionals : {true, false}) {
            for (auto* o : app.get_options()) {
                if (o->nonpositional() != positionals) {
                    def.options.push_back(describe(*o));
                }
            }
        }
    };
    detail::tlInspector = &inspector;
    std::ostringstream out;
    std::ostringstream err;
    c.run({}, out, err);
    detail::tlInspector = nullptr;
    return def;
}

}  // namespace

bool OptionDef::named(std::string_view name) const
{
    return std::find(names.begin(), names.end(), name) != names.end();
}

const OptionDef* CommandDef::find(std::string_view name) const
{
    const auto it = std::find_if(options.begin(), options.end(), [&](const OptionDef& o) { return o.named(name); });
    return it == options.end() ? nullptr : &*it;
}

std::optional<CommandDef> describeCommand(std::string_view name)
{
    for (const auto& c : commands()) {
        if (name == c.name) {
            return describe(c);
        }
    }
    return std::nullopt;
}

std::vector<CommandDef> describeCommands()
{
    std::vector<CommandDef> all;
    for (const auto& c : commands()) {
        all.push_back(describe(c));
    }
    return all;
}

}  // namespace ckpt::cli
