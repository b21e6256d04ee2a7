#include "transform/options.h"

#include "util/device_name.h"
#include "util/json_text.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace ckpt::transform {

namespace {

// A location tag as torch writes and map_location accepts it: a device name whose type is a
// backend's (`cpu`, `cuda:1`, `mps`, `meta`, `xpu`, a privateuse1 name such as `npu`).
bool validDevice(std::string_view s)
{
    const auto d = parseDeviceName(s);
    return d && isBackendName(d->type);
}

std::string trim(std::string_view s)
{
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) {
        s.remove_prefix(1);
    }
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) {
        s.remove_suffix(1);
    }
    return std::string(s);
}

Error badDevice(std::string_view spec, std::string_view device)
{
    return makeError(ErrorCode::Usage, "map location '" + std::string(spec) + "': '" + std::string(device) +
                                           "' is not a device (expected cpu, cuda:N, mps, meta, ...)");
}

void appendUnique(std::vector<std::string>& to, const std::vector<std::string>& from)
{
    for (const auto& s : from) {
        if (std::find(to.begin(), to.end(), s) == to.end()) {
            to.push_back(s);
        }
    }
}

// Wrapper prefixes a single-card copy loses: those of kWrapperSegments it strips, each alone and
// every two of them nested (`module.module.`, `_orig_mod.module.`, `_module.module.`, ...). Strips run
// as passes in list order, longest first, so the two-level combinations come before their parts.
std::vector<std::string> wrapperPrefixes()
{
    std::vector<std::string_view> names;
    for (const auto& w : kWrapperSegments) {
        if (w.singleCard) {
            names.push_back(w.name);
        }
    }
    std::vector<std::string> out;
    for (auto outer : names) {
        for (auto inner : names) {
            out.push_back(std::string(outer) + "." + std::string(inner) + ".");
        }
    }
    for (auto n : names) {
        out.push_back(std::string(n) + ".");
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    return out;
}

}  // namespace

const WrapperSegment* wrapperSegmentAt(std::string_view key, std::size_t at)
{
    for (const auto& s : kWrapperSegments) {
        if (key.size() > at + s.name.size() && key.substr(at, s.name.size()) == s.name &&
            key[at + s.name.size()] == '.') {
            return &s;
        }
    }
    return nullptr;
}

std::string LocationMap::apply(const std::string& location) const
{
    if (all) {
        return *all;
    }
    for (const auto& [from, to] : pairs) {
        if (from == location) {
            return to;
        }
    }
    return location;
}

std::string LocationMap::spec() const
{
    if (all) {
        return *all;
    }
    std::string s;
    for (const auto& [from, to] : pairs) {
        if (!s.empty()) {
            s += ',';
        }
        s += from;
        s += '=';
        s += to;
    }
    return s;
}

Expected<LocationMap> LocationMap::parse(const std::string& spec)
{
    const std::string whole = trim(spec);
    if (whole.empty()) {
        return makeError(ErrorCode::Usage, "map location is empty (expected cpu, cuda:N or pairs cuda:0=cpu,...)");
    }
    LocationMap map;
    if (whole.find('=') == std::string::npos) {
        if (!validDevice(whole)) {
            return badDevice(spec, whole);
        }
        map.all = whole;
        return map;
    }
    std::size_t start = 0;
    while (start <= whole.size()) {
        const std::size_t comma = std::min(whole.find(',', start), whole.size());
        const std::string item = trim(std::string_view(whole).substr(start, comma - start));
        const auto eq = item.find('=');
        if (eq == std::string::npos) {
            return makeError(ErrorCode::Usage,
                             "map location '" + spec + "': '" + item +
                                 "' is not a pair FROM=TO (a single device cannot be mixed with pairs)");
        }
        const std::string from = trim(std::string_view(item).substr(0, eq));
        const std::string to = trim(std::string_view(item).substr(eq + 1));
        if (!validDevice(from)) {
            return badDevice(spec, from);
        }
        if (!validDevice(to)) {
            return badDevice(spec, to);
        }
        const bool repeated =
            std::any_of(map.pairs.begin(), map.pairs.end(), [&](const auto& p) { return p.first == from; });
        if (repeated) {
            return makeError(ErrorCode::Usage, "map location '" + spec + "': '" + from + "' is mapped twice");
        }
        map.pairs.emplace_back(from, to);
        start = comma + 1;
    }
    return map;
}

Options::KeyEdit Options::keyEdit(std::string_view key, std::vector<bool>* stripsUsed) const
{
    KeyEdit e;
    std::size_t kept = 0;  // where the part of `key` that stays begins
    for (std::size_t i = 0; i < stripPrefixes.size(); ++i) {
        const std::string& p = stripPrefixes[i];
        if (!p.empty() && key.substr(kept).starts_with(p)) {
            kept += p.size();
            if (stripsUsed != nullptr) {
                (*stripsUsed)[i] = true;
            }
        }
    }
    if (singleModulePrefix) {
        while (key.substr(kept).starts_with(kDataParallelPrefix)) {
            kept += kDataParallelPrefix.size();
        }
        e.added = kDataParallelPrefix;
    }
    if (addPrefix) {
        e.added.insert(0, *addPrefix);
    }
    e.removed = key.substr(0, kept);
    return e;
}

std::string Options::renamedKey(const std::string& key) const
{
    const KeyEdit e = keyEdit(key);
    return e.added + key.substr(e.removed.size());
}

std::string Options::toJson() const
{
    // Only what differs from the defaults, so a finding's fix reads as what it changes.
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    if (stripPrefixes.size() == 1) {
        j["strip_prefix"] = stripPrefixes.front();
    } else if (!stripPrefixes.empty()) {
        j["strip_prefix"] = stripPrefixes;
    }
    if (addPrefix) {
        j["add_prefix"] = *addPrefix;
    }
    if (select) {
        j["select"] = *select;
    }
    if (!drop.empty()) {
        j["drop"] = drop;
    }
    if (!mapLocation.empty()) {
        j["map_location"] = mapLocation.spec();
    }
    if (unwrapModules) {
        j["unwrap"] = true;
    }
    if (weightsOnly) {
        j["weights_only"] = true;
    }
    if (compact) {
        j["compact"] = true;
    }
    if (singleModulePrefix) {
        j["multi_card"] = true;
    }
    if (dropExtraState) {
        j["drop_extra_state"] = true;
    }
    if (format != OutputFormat::Torch) {
        j["format"] = "safetensors";
    }
    if (dequantize) {
        j["dequantize"] = std::string(dtypeName(*dequantize));
    }
    return dumpJson(j);
}

namespace {

Error badJson(const std::string& what)
{
    return makeError(ErrorCode::Usage, "convert options: " + what);
}

Expected<std::string> stringField(const nlohmann::json& v, const std::string& key)
{
    if (!v.is_string()) {
        return badJson("'" + key + "' must be a string");
    }
    return v.get<std::string>();
}

Expected<std::vector<std::string>> stringListField(const nlohmann::json& v, const std::string& key, bool allowString)
{
    if (allowString && v.is_string()) {
        return std::vector<std::string>{v.get<std::string>()};
    }
    if (!v.is_array()) {
        return badJson("'" + key + "' must be a list of strings" + (allowString ? " or a string" : ""));
    }
    std::vector<std::string> out;
    for (const auto& item : v) {
        if (!item.is_string()) {
            return badJson("'" + key + "' must hold only strings");
        }
        out.push_back(item.get<std::string>());
    }
    return out;
}

Expected<bool> boolField(const nlohmann::json& v, const std::string& key)
{
    if (!v.is_boolean()) {
        return badJson("'" + key + "' must be true or false");
    }
    return v.get<bool>();
}

}  // namespace

Expected<Options> Options::fromJson(const std::string& json)
{
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(json);
    } catch (const nlohmann::json::parse_error& e) {
        return badJson(std::string("not valid JSON (") + e.what() + ")");
    }
    if (!j.is_object()) {
        return badJson("expected a JSON object");
    }
    Options o;
    for (const auto& [key, v] : j.items()) {
        if (key == "strip_prefix") {
            auto r = stringListField(v, key, true);
            if (!r) {
                return r.error();
            }
            o.stripPrefixes = std::move(*r);
        } else if (key == "add_prefix" || key == "select") {
            auto r = stringField(v, key);
            if (!r) {
                return r.error();
            }
            (key == "select" ? o.select : o.addPrefix) = std::move(*r);
        } else if (key == "drop") {
            auto r = stringListField(v, key, false);
            if (!r) {
                return r.error();
            }
            o.drop = std::move(*r);
        } else if (key == "map_location") {
            auto s = stringField(v, key);
            if (!s) {
                return s.error();
            }
            auto m = LocationMap::parse(*s);
            if (!m) {
                return m.error();
            }
            o.mapLocation = std::move(*m);
        } else if (key == "unwrap" || key == "weights_only" || key == "compact" || key == "multi_card" ||
                   key == "drop_extra_state") {
            auto b = boolField(v, key);
            if (!b) {
                return b.error();
            }
            bool& target = key == "unwrap"         ? o.unwrapModules
                           : key == "weights_only" ? o.weightsOnly
                           : key == "compact"      ? o.compact
                           : key == "multi_card"   ? o.singleModulePrefix
                                                   : o.dropExtraState;
            target = *b;
        } else if (key == "format") {
            auto s = stringField(v, key);
            if (!s) {
                return s.error();
            }
            if (*s == "torch") {
                o.format = OutputFormat::Torch;
            } else if (*s == "safetensors") {
                o.format = OutputFormat::Safetensors;
            } else {
                return badJson(R"('format' must be "torch" or "safetensors", not ")" + *s + "\"");
            }
        } else if (key == "dequantize") {
            auto s = stringField(v, key);
            if (!s) {
                return s.error();
            }
            auto t = parseDequantizeDtype(*s);
            if (!t) {
                return badJson("'dequantize': " + t.error().message);
            }
            o.dequantize = *t;
        } else {
            return badJson("unknown key '" + key + "'");
        }
    }
    return o;
}

void Options::merge(const Options& other)
{
    appendUnique(stripPrefixes, other.stripPrefixes);
    if (other.addPrefix) {
        addPrefix = other.addPrefix;
    }
    if (other.select) {
        select = other.select;
    }
    appendUnique(drop, other.drop);
    if (other.mapLocation.all) {
        mapLocation = other.mapLocation;
    } else if (!mapLocation.all) {
        for (const auto& pair : other.mapLocation.pairs) {
            auto it = std::find_if(mapLocation.pairs.begin(), mapLocation.pairs.end(),
                                   [&](const auto& p) { return p.first == pair.first; });
            if (it != mapLocation.pairs.end()) {
                it->second = pair.second;
            } else {
                mapLocation.pairs.push_back(pair);
            }
        }
    }
    unwrapModules = unwrapModules || other.unwrapModules;
    weightsOnly = weightsOnly || other.weightsOnly;
    compact = compact || other.compact;
    singleModulePrefix = singleModulePrefix || other.singleModulePrefix;
    dropExtraState = dropExtraState || other.dropExtraState;
    if (other.format != OutputFormat::Torch) {
        format = other.format;
    }
    if (other.dequantize) {
        dequantize = other.dequantize;
    }
}

Expected<DType> parseDequantizeDtype(std::string_view name)
{
    if (name == "bf16" || name == "bfloat16") {
        return DType::BFloat16;
    }
    if (name == "fp16" || name == "float16" || name == "half") {
        return DType::Float16;
    }
    if (name == "fp32" || name == "float32" || name == "float") {
        return DType::Float32;
    }
    return makeError(ErrorCode::Usage,
                     "'" + std::string(name) + "' is not a dtype to dequantize to (bf16, float16 or float32)");
}

Options singleCardPreset()
{
    Options o;
    o.stripPrefixes = wrapperPrefixes();
    o.unwrapModules = true;
    o.weightsOnly = true;
    o.mapLocation.all = "cpu";
    return o;
}

Options multiCardPreset()
{
    Options o = singleCardPreset();
    o.singleModulePrefix = true;
    return o;
}

}  // namespace ckpt::transform
