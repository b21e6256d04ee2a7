#include "diagnose/against.h"

#include "diagnose/rules.h"
#include "util/bytes.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace ckpt::diagnose {
namespace {

constexpr std::array<std::string_view, 4> kStateDictNames{"state_dict", "model", "model_state_dict", "net"};

// ---- from a checkpoint -------------------------------------------------------------------------

std::uint32_t childNamed(const Checkpoint& ckpt, std::uint32_t node, std::string_view name)
{
    const Node& n = ckpt.nodes[node];
    for (std::uint32_t c = n.firstChild; c < n.firstChild + n.childCount; ++c) {
        if (ckpt.nodes[c].name == name) {
            return c;
        }
    }
    return kNoIndex;
}

StateKey keyOf(const Checkpoint& ckpt, std::uint32_t node, std::string key)
{
    StateKey k;
    k.key = std::move(key);
    const Node& n = ckpt.nodes[node];
    if (n.kind == NodeKind::Tensor && n.tensor != kNoIndex && n.tensor < ckpt.tensors.size()) {
        k.shape = ckpt.tensors[n.tensor].shape;
        k.hasShape = true;
    }
    return k;
}

// model.state_dict() of a pickled module: its parameters, persistent buffers, then its children.
void moduleKeys(const Checkpoint& ckpt, std::uint32_t module, const std::string& prefix, std::vector<StateKey>& out,
                int depth)
{
    if (depth > 200) {
        return;
    }
    std::set<std::string, std::less<>> nonPersistent;
    if (auto np = childNamed(ckpt, module, "_non_persistent_buffers_set"); np != kNoIndex) {
        const Node& n = ckpt.nodes[np];
        for (std::uint32_t c = n.firstChild; c < n.firstChild + n.childCount; ++c) {
            const auto id = ckpt.nodes[c].value;
            if (id.valid() && id.v < ckpt.arena.size() && ckpt.arena[id].kind == pickle::Kind::Str) {
                nonPersistent.insert(ckpt.arena[id].text);
            }
        }
    }
    for (std::string_view field : {"_parameters", "_buffers"}) {
        const auto d = childNamed(ckpt, module, field);
        if (d == kNoIndex) {
            continue;
        }
        const Node& n = ckpt.nodes[d];
        for (std::uint32_t c = n.firstChild; c < n.firstChild + n.childCount; ++c) {
            const Node& v = ckpt.nodes[c];
            if (v.kind != NodeKind::Tensor || (field == "_buffers" && nonPersistent.contains(v.name))) {
                continue;  // None parameters and non-persistent buffers are not in state_dict()
            }
            out.push_back(keyOf(ckpt, c, prefix + std::string(v.name)));
        }
    }
    if (const auto mods = childNamed(ckpt, module, "_modules"); mods != kNoIndex) {
        const Node& n = ckpt.nodes[mods];
        for (std::uint32_t c = n.firstChild; c < n.firstChild + n.childCount; ++c) {
            if (ckpt.nodes[c].kind == NodeKind::Module) {
                moduleKeys(ckpt, c, prefix + std::string(ckpt.nodes[c].name) + ".", out, depth + 1);
            }
        }
    }
}

// `{'_metadata': OrderedDict(prefix -> {'version': N})}`, the BUILD state of a saved state dict.
std::map<std::string, std::int64_t> metadataVersions(const pickle::Arena& a, pickle::ValueId dict)
{
    std::map<std::string, std::int64_t> out;
    if (!dict.valid() || dict.v >= a.size() || !a[dict].attrs.valid()) {
        return out;
    }
    const auto& state = a[a[dict].attrs];
    if (state.kind != pickle::Kind::Dict) {
        return out;
    }
    for (std::size_t i = 0; i + 1 < state.items.size(); i += 2) {
        const auto& k = a[state.items[i]];
        const auto& meta = a[state.items[i + 1]];
        if (k.kind != pickle::Kind::Str || k.text != "_metadata" || meta.kind != pickle::Kind::Dict) {
            continue;
        }
        for (std::size_t j = 0; j + 1 < meta.items.size(); j += 2) {
            const auto& prefix = a[meta.items[j]];
            const auto& entry = a[meta.items[j + 1]];
            if (prefix.kind != pickle::Kind::Str || entry.kind != pickle::Kind::Dict) {
                continue;
            }
            for (std::size_t e = 0; e + 1 < entry.items.size(); e += 2) {
                const auto& ek = a[entry.items[e]];
                const auto& ev = a[entry.items[e + 1]];
                if (ek.kind == pickle::Kind::Str && ek.text == "version" && ev.kind == pickle::Kind::Int) {
                    out[prefix.text] = ev.i;
                }
            }
        }
    }
    return out;
}

KeySet keysOfNode(const Checkpoint& ckpt, std::uint32_t node)
{
    KeySet ks;
    ks.dictPath = ckpt.pathOf(node);
    const Node& n = ckpt.nodes[node];
    if (n.kind == NodeKind::Module) {
        if (n.object != kNoIndex && n.object < ckpt.objects.size()) {
            const auto& type = ckpt.objects[n.object].type;
            const auto dot = type.rfind('.');
            ks.modelName = dot == std::string::npos ? type : type.substr(dot + 1);
        }
        moduleKeys(ckpt, node, "", ks.keys, 0);
        return ks;
    }
    for (std::uint32_t c = n.firstChild; c < n.firstChild + n.childCount; ++c) {
        ks.keys.push_back(keyOf(ckpt, c, std::string(ckpt.nodes[c].name)));
    }
    ks.metadataVersions = metadataVersions(ckpt.arena, n.value);
    return ks;
}

bool isDict(NodeKind k)
{
    return k == NodeKind::Dict || k == NodeKind::OrderedDict;
}

// ---- from JSON -----------------------------------------------------------------------------------

struct PathShape {
    std::string path;
    std::vector<std::int64_t> shape;
};

bool shapeFromJson(const nlohmann::json& j, std::vector<std::int64_t>& out)
{
    if (!j.is_array()) {
        return false;
    }
    for (const auto& d : j) {
        if (!d.is_number_integer()) {
            return false;
        }
        out.push_back(d.get<std::int64_t>());
    }
    return true;
}

void collectTensorObjects(const nlohmann::json& j, std::vector<PathShape>& out, int depth)
{
    if (depth > 64) {
        return;
    }
    if (j.is_object()) {
        const char* keyField = j.contains("path")   ? "path"
                               : j.contains("key")  ? "key"
                               : j.contains("name") ? "name"
                                                    : nullptr;
        if (keyField != nullptr && j[keyField].is_string() && j.contains("shape")) {
            PathShape ps;
            ps.path = j[keyField].get<std::string>();
            if (shapeFromJson(j["shape"], ps.shape)) {
                out.push_back(std::move(ps));
                return;
            }
        }
        for (const auto& [k, v] : j.items()) {
            if (k != "storages") {  // storage rows carry keys too, but no shapes worth comparing
                collectTensorObjects(v, out, depth + 1);
            }
        }
    } else if (j.is_array()) {
        for (const auto& v : j) {
            collectTensorObjects(v, out, depth + 1);
        }
    }
}

std::vector<std::string> splitPath(const std::string& path)
{
    std::vector<std::string> out;
    std::size_t at = 0;
    while (true) {
        const auto slash = path.find('/', at);
        out.push_back(path.substr(at, slash - at));
        if (slash == std::string::npos) {
            return out;
        }
        at = slash + 1;
    }
}

// Groups tensor paths into state dicts: `<dict path>/<key>`, or, for a pickled module,
// `<module path>/_modules/a/_parameters/w` -> key `a.w` of the module's state dict.
KeySet keysFromPaths(const std::vector<PathShape>& tensors)
{
    std::map<std::string, KeySet> groups;
    std::vector<std::string> order;
    for (const auto& t : tensors) {
        const auto parts = splitPath(t.path);
        std::string group;
        std::string key;
        const auto firstModuleField = std::find_if(parts.begin(), parts.end(), [](const std::string& s) {
            return s == "_modules" || s == "_parameters" || s == "_buffers";
        });
        if (firstModuleField != parts.end()) {
            for (auto it = parts.begin(); it != firstModuleField; ++it) {
                group += (group.empty() ? "" : "/") + *it;
            }
            for (auto it = firstModuleField; it != parts.end(); ++it) {
                if (*it != "_modules" && *it != "_parameters" && *it != "_buffers") {
                    key += (key.empty() ? "" : ".") + *it;
                }
            }
        } else {
            key = parts.back();
            for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
                group += (group.empty() ? "" : "/") + parts[i];
            }
        }
        auto [it, inserted] = groups.try_emplace(group);
        if (inserted) {
            it->second.dictPath = group;
            order.push_back(group);
        }
        it->second.keys.push_back({key, t.shape, true});
    }
    if (groups.empty()) {
        return {};
    }
    if (groups.contains("")) {
        return groups[""];
    }
    for (auto name : kStateDictNames) {
        if (groups.contains(std::string(name))) {
            return groups[std::string(name)];
        }
    }
    const auto biggest = std::max_element(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
        return groups[a].keys.size() < groups[b].keys.size();
    });
    return groups[*biggest];
}

Expected<KeySet> keysFromJson(const nlohmann::json& j, const std::string& path)
{
    std::vector<PathShape> tensors;
    collectTensorObjects(j, tensors, 0);
    if (tensors.empty() && j.is_object()) {
        // {"fc.weight": [4, 3], ...} or {"fc.weight": {"shape": [4, 3]}}
        for (const auto& [k, v] : j.items()) {
            PathShape ps;
            ps.path = k;
            const auto& s = v.is_object() && v.contains("shape") ? v["shape"] : v;
            if (shapeFromJson(s, ps.shape)) {
                tensors.push_back(std::move(ps));
            }
        }
    }
    if (tensors.empty()) {
        return Error{ErrorCode::Usage, "the JSON names no tensors with a shape", path, {}};
    }
    return keysFromPaths(tensors);
}

// ---- from text ------------------------------------------------------------------------------------

Expected<KeySet> keysFromText(std::string_view text, const std::string& path)
{
    KeySet ks;
    std::size_t lineNo = 0;
    std::size_t at = 0;
    while (at < text.size()) {
        auto end = text.find('\n', at);
        if (end == std::string_view::npos) {
            end = text.size();
        }
        auto line = text.substr(at, end - at);
        at = end + 1;
        ++lineNo;
        if (const auto hash = line.find('#'); hash != std::string_view::npos) {
            line = line.substr(0, hash);
        }
        const auto b = line.find_first_not_of(" \t\r");
        if (b == std::string_view::npos) {
            continue;
        }
        line = line.substr(b);
        const auto keyEnd = line.find_first_of(" \t\r:");
        StateKey k;
        k.key = std::string(line.substr(0, keyEnd));
        auto rest = keyEnd == std::string_view::npos ? std::string_view{} : line.substr(keyEnd);
        if (rest.find_first_not_of(" \t\r:") != std::string_view::npos) {
            k.hasShape = true;
            std::int64_t v = 0;
            bool inNumber = false;
            for (char c : rest) {
                if (c >= '0' && c <= '9') {
                    v = v * 10 + (c - '0');
                    inNumber = true;
                } else if (inNumber) {
                    k.shape.push_back(v);
                    v = 0;
                    inNumber = false;
                } else if (c != ' ' && c != '\t' && c != '\r' && c != ',' && c != '[' && c != ']' && c != '(' &&
                           c != ')' && c != ':' && c != 'x' &&
                           std::string_view("torch.Size").find(c) == std::string_view::npos) {
                    return Error{ErrorCode::Usage,
                                 "line " + std::to_string(lineNo) + ": expected `key shape` (e.g. `fc.weight 4,3`)",
                                 path,
                                 {}};
                }
            }
            if (inNumber) {
                k.shape.push_back(v);
            }
        }
        ks.keys.push_back(std::move(k));
    }
    if (ks.keys.empty()) {
        return Error{ErrorCode::Usage, "the reference lists no keys", path, {}};
    }
    return ks;
}

// ---- comparing ------------------------------------------------------------------------------------

std::string quotedKeys(const std::vector<std::string>& keys)
{
    std::string out;
    for (const auto& k : keys) {
        out += (out.empty() ? "\"" : ", \"") + k + "\"";
    }
    return out;
}

// The module tree implied by the model's keys, to find at which module load_state_dict rejects a
// checkpoint key (it reports unexpected keys module by module, in module order).
struct ModuleTree {
    struct Module {
        std::unordered_set<std::string> locals;
        std::unordered_map<std::string, std::uint32_t> children;
    };
    std::vector<Module> modules{Module{}};  // index = pre-order position once built

    explicit ModuleTree(const std::vector<StateKey>& keys)
    {
        // Build in first-appearance order, then renumber in pre-order (children in the order they appear).
        std::vector<std::vector<std::uint32_t>> kids(1);
        std::vector<std::string> childName(1);
        for (const auto& k : keys) {
            std::uint32_t m = 0;
            std::size_t at = 0;
            for (auto dot = k.key.find('.'); dot != std::string::npos; dot = k.key.find('.', at)) {
                const auto seg = k.key.substr(at, dot - at);
                auto it = modules[m].children.find(seg);
                if (it == modules[m].children.end()) {
                    const auto id = static_cast<std::uint32_t>(modules.size());
                    modules[m].children.emplace(seg, id);
                    kids[m].push_back(id);
                    modules.emplace_back();
                    kids.emplace_back();
                    m = id;
                } else {
                    m = it->second;
                }
                at = dot + 1;
            }
            modules[m].locals.insert(k.key.substr(at));
        }
        preorder.assign(modules.size(), 0);
        std::uint32_t next = 0;
        std::vector<std::uint32_t> stack{0};
        while (!stack.empty()) {
            const auto m = stack.back();
            stack.pop_back();
            preorder[m] = next++;
            stack.insert(stack.end(), kids[m].rbegin(), kids[m].rend());
        }
    }

    // The pre-order position of the module that rejects `key`, or nullopt when the key is accepted
    // at every level (it names a local or descends to one).
    [[nodiscard]] std::optional<std::uint32_t> rejectedAt(const std::string& key) const
    {
        std::uint32_t m = 0;
        std::size_t at = 0;
        while (true) {
            const auto dot = key.find('.', at);
            const auto seg = key.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
            if (seg == "_extra_state" && dot == std::string::npos) {
                return std::nullopt;
            }
            const auto child = modules[m].children.find(seg);
            if (child == modules[m].children.end()) {
                if (modules[m].locals.contains(seg)) {
                    return std::nullopt;
                }
                return preorder[m];
            }
            if (dot == std::string::npos) {
                return std::nullopt;  // the key is a module's own name: no level looks past it
            }
            m = child->second;
            at = dot + 1;
        }
    }

    std::vector<std::uint32_t> preorder;
};

struct Mismatch {
    std::vector<std::string> missing;                        // model order
    std::vector<std::string> unexpected;                     // torch's order
    std::vector<std::pair<std::string, std::string>> sizes;  // key, message
};

// BatchNorm's _load_from_state_dict adds a missing `num_batches_tracked` (as 0) when the
// checkpoint's `_metadata` gives its module no version or one below 2, so torch never reports it.
bool filledByBatchNorm(const std::string& key, const std::map<std::string, std::int64_t>& versions)
{
    constexpr std::string_view kName = "num_batches_tracked";
    if (!key.ends_with(kName) || (key.size() > kName.size() && key[key.size() - kName.size() - 1] != '.')) {
        return false;
    }
    const auto prefix = key.size() > kName.size() ? key.substr(0, key.size() - kName.size() - 1) : std::string();
    const auto it = versions.find(prefix);
    return it == versions.end() || it->second < 2;
}

Mismatch compareKeys(const std::vector<StateKey>& ckptKeys, const std::vector<StateKey>& model,
                     const std::map<std::string, std::int64_t>& versions)
{
    Mismatch m;
    std::unordered_map<std::string, const StateKey*> inCkpt;
    for (const auto& k : ckptKeys) {
        inCkpt.emplace(k.key, &k);
    }
    for (const auto& k : model) {
        const auto it = inCkpt.find(k.key);
        if (it == inCkpt.end()) {
            if (!filledByBatchNorm(k.key, versions)) {
                m.missing.push_back(k.key);
            }
            continue;
        }
        const StateKey& c = *it->second;
        if (!k.hasShape || !c.hasShape) {
            continue;
        }
        // load_state_dict accepts a 1-d checkpoint value for a 0-d parameter (it takes element 0).
        const bool scalarCompat = k.shape.empty() && c.shape.size() == 1;
        if (c.shape != k.shape && !scalarCompat) {
            m.sizes.emplace_back(
                k.key, "size mismatch for " + k.key + ": copying a param with shape " + torchSizeText(c.shape) +
                           " from checkpoint, the shape in current model is " + torchSizeText(k.shape) + ".");
        }
    }
    const ModuleTree tree(model);
    std::vector<std::pair<std::uint32_t, std::string>> rejected;
    for (const auto& k : ckptKeys) {
        if (const auto at = tree.rejectedAt(k.key)) {
            rejected.emplace_back(*at, k.key);
        }
    }
    std::stable_sort(rejected.begin(), rejected.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [pos, key] : rejected) {
        m.unexpected.push_back(std::move(key));
    }
    return m;
}

struct PrefixFix {
    std::string strip;
    std::string add;
};

std::string renamed(const std::string& key, const PrefixFix& p)
{
    if (!p.strip.empty() && key.starts_with(p.strip)) {
        return p.add + key.substr(p.strip.size());
    }
    return p.add + key;
}

bool keySetsMatch(const std::vector<StateKey>& ckptKeys, const std::unordered_set<std::string>& modelKeys,
                  const PrefixFix& p)
{
    std::unordered_set<std::string> seen;
    for (const auto& k : ckptKeys) {
        auto r = renamed(k.key, p);
        if (!modelKeys.contains(r) || !seen.insert(std::move(r)).second) {
            return false;
        }
    }
    return seen.size() == modelKeys.size();
}

// The strip-then-add prefix edit that turns the checkpoint's key set into the model's, found from
// pairs of an unexpected and a missing key that end alike at a segment boundary.
std::optional<PrefixFix> findPrefixFix(const std::vector<StateKey>& ckptKeys, const std::vector<StateKey>& model,
                                       const Mismatch& m)
{
    if (m.missing.empty() && m.unexpected.empty()) {
        return std::nullopt;
    }
    std::unordered_set<std::string> modelKeys;
    for (const auto& k : model) {
        modelKeys.insert(k.key);
    }
    std::unordered_map<std::string, std::string> missingBySuffix;  // suffix at a segment boundary -> prefix
    for (const auto& k : m.missing) {
        missingBySuffix.emplace(k, "");
        for (auto dot = k.find('.'); dot != std::string::npos; dot = k.find('.', dot + 1)) {
            missingBySuffix.emplace(k.substr(dot + 1), k.substr(0, dot + 1));
        }
    }
    std::set<std::pair<std::string, std::string>> tried;
    const auto tryPair = [&](const std::string& u) -> std::optional<PrefixFix> {
        std::vector<std::size_t> starts{0};
        for (auto dot = u.find('.'); dot != std::string::npos; dot = u.find('.', dot + 1)) {
            starts.push_back(dot + 1);
        }
        for (const auto start : starts) {
            const auto it = start < u.size() ? missingBySuffix.find(u.substr(start)) : missingBySuffix.end();
            if (it == missingBySuffix.end()) {
                continue;
            }
            PrefixFix p{u.substr(0, start), it->second};
            if ((p.strip.empty() && p.add.empty()) || !tried.insert({p.strip, p.add}).second) {
                continue;
            }
            if (keySetsMatch(ckptKeys, modelKeys, p)) {
                return p;
            }
            if (tried.size() > 64) {
                break;
            }
        }
        return std::nullopt;
    };
    if (!m.unexpected.empty()) {
        for (std::size_t i = 0; i < m.unexpected.size() && i < 8; ++i) {
            if (auto p = tryPair(m.unexpected[i])) {
                return p;
            }
        }
        return std::nullopt;
    }
    // Only missing keys: every checkpoint key needs the same prefix added.
    const auto& k = m.missing.front();
    for (auto dot = k.find('.'); dot != std::string::npos; dot = k.find('.', dot + 1)) {
        PrefixFix p{"", k.substr(0, dot + 1)};
        if (keySetsMatch(ckptKeys, modelKeys, p)) {
            return p;
        }
    }
    return std::nullopt;
}

std::string refDescription(const Reference& ref)
{
    switch (ref.kind) {
    case ReferenceKind::Checkpoint:
        return "the state dict of " + ref.path + (ref.keys.dictPath.empty() ? "" : " at `" + ref.keys.dictPath + "`");
    case ReferenceKind::InspectJson:
        return "the tensors listed in " + ref.path;
    case ReferenceKind::Text:
        return "the keys listed in " + ref.path;
    }
    return ref.path;
}

}  // namespace

std::string torchSizeText(const std::vector<std::int64_t>& shape)
{
    std::string out = "torch.Size([";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        out += (i ? ", " : "") + std::to_string(shape[i]);
    }
    return out + "])";
}

Expected<KeySet> stateDictKeys(const Checkpoint& ckpt, const std::optional<std::string>& select)
{
    if (ckpt.nodes.empty()) {
        return Error{ErrorCode::Usage, "the file holds no values", ckpt.path, {}};
    }
    if (select) {
        const auto n = ckpt.find(*select);
        if (n == kNoIndex) {
            return Error{ErrorCode::Usage, "no value at `" + *select + "`", ckpt.path, {}};
        }
        if (!isDict(ckpt.nodes[n].kind) && ckpt.nodes[n].kind != NodeKind::Module) {
            return Error{ErrorCode::Usage,
                         "`" + *select + "` is a " + std::string(nodeKindName(ckpt.nodes[n].kind)) +
                             ", not a state dict",
                         ckpt.path,
                         {}};
        }
        return keysOfNode(ckpt, n);
    }
    const Node& root = ckpt.nodes[0];
    if (root.stateDictLike || root.kind == NodeKind::Module) {
        return keysOfNode(ckpt, 0);
    }
    if (isDict(root.kind)) {
        for (auto name : kStateDictNames) {
            const auto c = childNamed(ckpt, 0, name);
            if (c != kNoIndex && (isDict(ckpt.nodes[c].kind) || ckpt.nodes[c].kind == NodeKind::Module)) {
                return keysOfNode(ckpt, c);
            }
        }
        if (root.childCount > 0 && root.tensorCount > 0) {
            return keysOfNode(ckpt, 0);
        }
    }
    return Error{ErrorCode::Usage,
                 "no state dict at the root nor under state_dict, model, model_state_dict or net; pick one with "
                 "--select PATH",
                 ckpt.path,
                 {}};
}

Expected<Reference> loadReference(const std::string& path)
{
    auto mapped = MappedFile::open(path);
    if (!mapped) {
        auto e = mapped.error();
        if (e.path.empty()) {
            e.path = path;
        }
        return e;
    }
    const auto text = asText((*mapped)->bytes());
    Reference ref;
    ref.path = path;
    const auto first = text.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && (text[first] == '{' || text[first] == '[')) {
        auto j = nlohmann::json::parse(text, nullptr, false);
        if (!j.is_discarded()) {
            auto keys = keysFromJson(j, path);
            if (!keys) {
                return keys.error();
            }
            ref.kind = ReferenceKind::InspectJson;
            ref.keys = std::move(*keys);
            return ref;
        }
    }
    auto ckpt = openCheckpoint(path);
    if (ckpt) {
        auto keys = stateDictKeys(**ckpt, std::nullopt);
        if (!keys) {
            return keys.error();
        }
        ref.kind = ReferenceKind::Checkpoint;
        ref.keys = std::move(*keys);
        return ref;
    }
    const auto head = text.substr(0, 4096);
    if (head.find('\0') != std::string_view::npos || text.empty()) {
        auto e = ckpt.error();
        if (e.path.empty()) {
            e.path = path;
        }
        return e;
    }
    auto keys = keysFromText(text, path);
    if (!keys) {
        return keys.error();
    }
    ref.kind = ReferenceKind::Text;
    ref.keys = std::move(*keys);
    return ref;
}

Expected<void> compareAgainst(const Checkpoint& ckpt, const Reference& ref, const std::optional<std::string>& select,
                              std::vector<Finding>& out)
{
    auto mine = stateDictKeys(ckpt, select);
    if (!mine) {
        return mine.error();
    }
    const KeySet& ks = *mine;
    const auto m = compareKeys(ks.keys, ref.keys.keys, ks.metadataVersions);
    const auto fixFound = findPrefixFix(ks.keys, ref.keys.keys, m);
    const std::string where = "the state dict at " + quotedPath(ks.dictPath);
    const std::string against = refDescription(ref);
    const std::string header =
        ref.keys.modelName.empty() ? std::string() : "Error(s) in loading state_dict for " + ref.keys.modelName + ": ";

    std::optional<transform::Options> fix;
    std::string fixText;
    if (fixFound) {
        transform::Options o;
        if (!ks.dictPath.empty()) {
            o.select = ks.dictPath;
        }
        if (!fixFound->strip.empty()) {
            o.stripPrefixes = {fixFound->strip};
        }
        if (!fixFound->add.empty()) {
            o.addPrefix = fixFound->add;
        }
        fix = o;
        fixText = " Every key matches after ";
        if (!fixFound->strip.empty()) {
            fixText += "stripping `" + fixFound->strip + "`";
        }
        if (!fixFound->add.empty()) {
            fixText += std::string(fixFound->strip.empty() ? "" : " and ") + "adding `" + fixFound->add + "`";
        }
        fixText += " (the fix).";
    } else if (!m.missing.empty() || !m.unexpected.empty()) {
        fixText = " No single prefix edit makes the key sets match: the checkpoint belongs to a different "
                  "architecture or version of the model.";
    }

    const auto paths = [&](const std::vector<std::string>& keys) {
        std::vector<std::string> p;
        p.reserve(keys.size());
        for (const auto& k : keys) {
            p.push_back(joinPath(ks.dictPath, k));
        }
        return p;
    };
    if (!m.missing.empty()) {
        Finding f;
        f.code = "missing-keys";
        f.severity = Severity::Error;
        f.title = plural(m.missing.size(), "key", "keys") + " of the model are missing from the checkpoint";
        f.detail = "Loading " + where + " into the model of " + against +
                   " with load_state_dict(strict=True) fails: " + header +
                   "Missing key(s) in state_dict: " + quotedKeys(m.missing) + "." + fixText;
        f.paths = paths(m.missing);
        f.fix = fix;
        out.push_back(std::move(f));
    }
    if (!m.unexpected.empty()) {
        Finding f;
        f.code = "unexpected-keys";
        f.severity = Severity::Error;
        f.title = plural(m.unexpected.size(), "key", "keys") + " of the checkpoint are unknown to the model";
        f.detail = "Loading " + where + " into the model of " + against +
                   " with load_state_dict(strict=True) fails: " + (m.missing.empty() ? header : std::string()) +
                   "Unexpected key(s) in state_dict: " + quotedKeys(m.unexpected) + "." + fixText;
        f.paths = paths(m.unexpected);
        f.fix = fix;
        out.push_back(std::move(f));
    }
    if (!m.sizes.empty()) {
        Finding f;
        f.code = "size-mismatch";
        f.severity = Severity::Error;
        f.title = plural(m.sizes.size(), "tensor has", "tensors have") + " another shape than the model's";
        f.detail = "load_state_dict(strict=True) of " + where + " into the model of " + against + " fails: ";
        for (std::size_t i = 0; i < m.sizes.size(); ++i) {
            f.detail += (i ? " " : "") + m.sizes[i].second;
            f.paths.push_back(joinPath(ks.dictPath, m.sizes[i].first));
        }
        f.detail += " The architecture differs (e.g. another number of classes); a rename cannot fix this.";
        out.push_back(std::move(f));
    }
    if (m.missing.empty() && m.unexpected.empty() && m.sizes.empty()) {
        Finding f;
        f.code = "strict-load-ok";
        f.severity = Severity::Info;
        f.title = "The state dict matches the model";
        f.detail = "All " + plural(ks.keys.size(), "key", "keys") + " of " + where + " match " + against +
                   " in name and shape: load_state_dict(strict=True) accepts it.";
        f.paths = {ks.dictPath};
        out.push_back(std::move(f));
    }
    return {};
}

}  // namespace ckpt::diagnose
