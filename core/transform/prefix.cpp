// Key prefixes in state-dict-like dicts: anchored at the start of a key (stripping `module.` leaves
// `mlp_module.layer0` alone), key order kept, a collision is an error naming both keys. The
// OrderedDict's `_metadata` (module prefix -> {'version': N}) is renamed the way PyTorch's
// consume_prefix_in_state_dict_if_present does (`module` -> '' overwriting the wrapper's root
// entry, `module.conv` -> `conv`), and adding a prefix produces what a DataParallel wrapper's
// state_dict() has: a root entry for the wrapper ({'version': 1}), the model's root under the
// prefix, every other entry prefixed.
#include "transform/plan_builder.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace ckpt::transform::detail {

namespace {

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

bool anyKeyEdit(const Options& o)
{
    const bool strips =
        std::any_of(o.stripPrefixes.begin(), o.stripPrefixes.end(), [](const auto& p) { return !p.empty(); });
    return strips || o.singleModulePrefix || (o.addPrefix && !o.addPrefix->empty());
}

using MetaEntries = std::vector<std::pair<std::string, ValueId>>;

std::string withoutTrailingDot(std::string_view p)
{
    return std::string(p.ends_with('.') ? p.substr(0, p.size() - 1) : p);
}

void putEntry(MetaEntries& entries, std::string key, ValueId value)
{
    auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == key; });
    if (it != entries.end()) {
        it->second = value;  // Python: metadata[newkey] = ... keeps an existing key's position
    } else {
        entries.emplace_back(std::move(key), value);
    }
}

// consume_prefix_in_state_dict_if_present on `_metadata`: each renamed entry is popped and
// re-inserted (so it moves to the end unless its new key exists). Entries naming wrappers inside
// a multi-level prefix (`module` for `module.module.`) no longer name anything and go.
// Whether any entry was renamed (an inner wrapper's entry dropped alone does not count: a nested
// prefix that matches no key drops `module` where stripping `module.` alone renames it to '', as
// torch's consume_prefix_in_state_dict_if_present does).
bool stripMeta(MetaEntries& entries, const std::string& prefix)
{
    const std::string base = withoutTrailingDot(prefix);
    const MetaEntries snapshot = entries;
    bool changed = false;
    for (const auto& [key, value] : snapshot) {
        if (key.empty()) {
            continue;
        }
        const bool renamed = key == base || key.starts_with(prefix);
        const bool innerWrapper = !renamed && prefix.starts_with(key + ".");
        if (!renamed && !innerWrapper) {
            continue;
        }
        const std::string& name = key;  // clang 14 cannot capture a structured binding
        entries.erase(std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == name; }));
        if (renamed) {
            putEntry(entries, key == base ? std::string() : key.substr(prefix.size()), value);
        }
        changed = changed || renamed;
    }
    return changed;
}

// What wrapping in a module held under `prefix` gives: '' for the wrapper, one entry per
// intermediate level, then every old entry under the prefix.
void addMeta(Arena& a, MetaEntries& entries, const std::string& prefix)
{
    const std::string base = withoutTrailingDot(prefix);
    if (base.empty() || entries.empty()) {
        return;
    }
    auto versionOne = [&] { return a.dict({a.str("version"), a.integer(1)}, false); };
    MetaEntries out;
    out.emplace_back("", versionOne());
    for (std::size_t dot = base.find('.'); dot != std::string::npos; dot = base.find('.', dot + 1)) {
        out.emplace_back(base.substr(0, dot), versionOne());
    }
    for (auto& [key, value] : entries) {
        putEntry(out, key.empty() ? base : prefix + key, value);
    }
    entries = std::move(out);
}

void rewriteMeta(Arena& a, const Options& o, MetaEntries& entries, std::vector<bool>& stripUsed)
{
    for (std::size_t i = 0; i < o.stripPrefixes.size(); ++i) {
        if (!o.stripPrefixes[i].empty() && stripMeta(entries, o.stripPrefixes[i])) {
            stripUsed[i] = true;
        }
    }
    if (o.singleModulePrefix) {
        auto wrapped = [&] {
            return std::any_of(entries.begin(), entries.end(), [](const auto& e) {
                return e.first == "module" || e.first.starts_with(kDataParallelPrefix);
            });
        };
        while (wrapped()) {
            stripMeta(entries, std::string(kDataParallelPrefix));
        }
        addMeta(a, entries, std::string(kDataParallelPrefix));
    }
    if (o.addPrefix && !o.addPrefix->empty()) {
        addMeta(a, entries, *o.addPrefix);
    }
}

std::string listKeys(const MetaEntries& e, std::size_t max = 6)
{
    std::string s;
    for (std::size_t i = 0; i < e.size() && i < max; ++i) {
        s += (i == 0 ? "'" : ", '") + e[i].first + "'";
    }
    if (e.size() > max) {
        s += ", ... (" + std::to_string(e.size()) + ")";
    }
    return s;
}

// Renames `_metadata` in the dict's BUILD state; new values, since the old ones may be shared.
void editMetadata(Builder& b, ValueId d, const std::string& path)
{
    Arena& a = b.arena();
    const ValueId attrs = a[d].attrs;
    if (!attrs.valid() || a[attrs].kind != Kind::Dict) {
        return;
    }
    const ValueId meta = pickle::dictGet(a, a[attrs].items, "_metadata");
    if (!meta.valid() || a[meta].kind != Kind::Dict) {
        return;
    }
    MetaEntries entries;
    for (std::size_t i = 0; i + 1 < a[meta].items.size(); i += 2) {
        entries.emplace_back(pickle::keyText(a, a[meta].items[i]), a[meta].items[i + 1]);
    }
    const MetaEntries before = entries;
    rewriteMeta(a, b.opts, entries, b.stripUsed);
    // Compared by content: stripping then re-adding `module.` rebuilds the wrapper's {'version': 1}.
    const bool same = entries.size() == before.size() &&
                      std::equal(entries.begin(), entries.end(), before.begin(), [&](const auto& x, const auto& y) {
                          return x.first == y.first && pickle::shortRepr(a, x.second) == pickle::shortRepr(a, y.second);
                      });
    if (same) {
        return;
    }
    std::vector<ValueId> metaItems;
    for (const auto& [key, value] : entries) {
        metaItems.push_back(a.str(key));
        metaItems.push_back(value);
    }
    const ValueId newMeta = a.dict(std::move(metaItems), a[meta].flag);
    std::vector<ValueId> attrItems = a[attrs].items;
    for (std::size_t i = 0; i + 1 < attrItems.size(); i += 2) {
        if (a[attrItems[i]].kind == Kind::Str && a[attrItems[i]].text == "_metadata") {
            attrItems[i + 1] = newMeta;
        }
    }
    const ValueId newAttrs = a.dict(std::move(attrItems), a[attrs].flag);
    a[d].attrs = newAttrs;
    b.step(StepKind::Rename, joinPath(path, "_metadata"), listKeys(before), listKeys(entries),
           "OrderedDict _metadata (module versions for load_state_dict) renamed with the keys");
}

Expected<void> editDict(Builder& b, ValueId d, const std::string& path)
{
    Arena& a = b.arena();
    const std::vector<ValueId> items = a[d].items;
    std::unordered_map<std::string, std::string> taken;  // new name -> old name
    std::vector<std::pair<std::size_t, std::string>> renames;
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        if (a[items[i]].kind != Kind::Str) {
            continue;
        }
        const std::string& old = a[items[i]].text;
        (void)b.opts.keyEdit(old, &b.stripUsed);
        std::string name = b.opts.renamedKey(old);
        auto [it, fresh] = taken.try_emplace(name, old);
        if (!fresh) {
            return makeError(ErrorCode::Usage, "renaming keys in '" + (path.empty() ? std::string("(root)") : path) +
                                                   "': '" + it->second + "' and '" + old + "' would both become '" +
                                                   name + "'");
        }
        if (name != old) {
            renames.emplace_back(i, std::move(name));
        }
    }
    for (auto& [i, name] : renames) {
        const std::string old = a[items[i]].text;
        const ValueId key = a.str(name);
        a[d].items[i] = key;  // a new string: the old one may be shared with another dict
        b.step(StepKind::Rename, joinPath(path, old), old, std::move(name));
    }
    editMetadata(b, d, path);
    return {};
}

Expected<void> walk(Builder& b, ValueId v, const std::string& path, std::unordered_set<std::uint32_t>& seen,
                    std::uint32_t depth)
{
    Arena& a = b.arena();
    if (!v.valid() || depth > 20000 || !seen.insert(v.v).second) {
        return {};
    }
    const Kind kind = a[v].kind;
    if (kind != Kind::Dict && kind != Kind::List && kind != Kind::Tuple) {
        return {};  // objects keep their own attribute names
    }
    if (kind == Kind::Dict && b.stateDicts.contains(v.v)) {
        if (auto ok = editDict(b, v, path); !ok) {
            return ok;
        }
    }
    const std::vector<ValueId> items = a[v].items;
    const bool isDict = kind == Kind::Dict;
    for (std::size_t i = isDict ? 1 : 0; i < items.size(); i += isDict ? 2 : 1) {
        const std::string name = isDict ? pickle::keyText(a, items[i - 1]) : std::to_string(i);
        if (auto ok = walk(b, items[i], joinPath(path, name), seen, depth + 1); !ok) {
            return ok;
        }
    }
    return {};
}

}  // namespace

Expected<void> editPrefixes(Builder& b)
{
    if (!anyKeyEdit(b.opts)) {
        return {};
    }
    std::unordered_set<std::uint32_t> seen;
    return walk(b, b.plan.root, b.rootPath, seen, 0);
}

}  // namespace ckpt::transform::detail
