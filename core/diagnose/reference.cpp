// Key sets for `check --against`: a checkpoint's state dict (the checked file's as well as a
// reference checkpoint's), an inspect JSON or a text list of keys, each read into a KeySet.
#include "checkpoint/state_dict.h"
#include "diagnose/against.h"
#include "util/bytes.h"

#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>

namespace ckpt::diagnose {
namespace {

constexpr std::array<std::string_view, 4> kStateDictNames{"state_dict", "model", "model_state_dict", "net"};

// ---- from a checkpoint -------------------------------------------------------------------------

NodeIndex childNamed(const Checkpoint& ckpt, NodeIndex node, std::string_view name)
{
    const Node& n = ckpt.nodes[node];
    for (std::uint32_t row = 0; row < n.childCount; ++row) {
        const NodeIndex c = n.child(row);
        if (ckpt.nodes[c].name == name) {
            return c;
        }
    }
    return {};
}

StateKey keyOf(const Checkpoint& ckpt, NodeIndex node, std::string key)
{
    StateKey k;
    k.key = std::move(key);
    const Node& n = ckpt.nodes[node];
    if (n.kind == NodeKind::Tensor && ckpt.tensors.contains(n.tensor)) {
        k.shape = ckpt.tensors[n.tensor].shape;
        k.hasShape = true;
    }
    return k;
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

Expected<KeySet> keysOfNode(const Checkpoint& ckpt, NodeIndex node)
{
    KeySet ks;
    ks.dictPath = ckpt.pathOf(node);
    const Node& n = ckpt.nodes[node];
    if (n.kind == NodeKind::Module) {
        if (ckpt.objects.contains(n.object)) {
            const auto& type = ckpt.objects[n.object].type;
            const auto dot = type.rfind('.');
            ks.modelName = dot == std::string::npos ? type : type.substr(dot + 1);
        }
        auto sd = moduleStateDict(ckpt.arena, n.value, ks.dictPath);
        if (!sd) {
            Error e = sd.error();
            e.path = ckpt.path;
            return e;
        }
        for (const auto& entry : sd->entries) {
            ks.keys.push_back({entry.key, pickle::tensorOf(ckpt.arena, entry.tensor).shape, true});
        }
        return ks;
    }
    for (std::uint32_t row = 0; row < n.childCount; ++row) {
        const NodeIndex c = n.child(row);
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

}  // namespace

Expected<KeySet> stateDictKeys(const Checkpoint& ckpt, const std::optional<std::string>& select)
{
    if (ckpt.nodes.empty()) {
        return Error{ErrorCode::Usage, "the file holds no values", ckpt.path, {}};
    }
    if (select) {
        const auto n = ckpt.find(*select);
        if (!n.valid()) {
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
    const Node& root = ckpt.nodes[kRootNode];
    if (root.stateDictLike || root.kind == NodeKind::Module) {
        return keysOfNode(ckpt, kRootNode);
    }
    if (isDict(root.kind)) {
        for (auto name : kStateDictNames) {
            const auto c = childNamed(ckpt, kRootNode, name);
            if (c.valid() && (isDict(ckpt.nodes[c].kind) || ckpt.nodes[c].kind == NodeKind::Module)) {
                return keysOfNode(ckpt, c);
            }
        }
        if (root.childCount > 0 && root.tensorCount > 0) {
            return keysOfNode(ckpt, kRootNode);
        }
    }
    return Error{ErrorCode::Usage,
                 "no state dict at the root nor under state_dict, model, model_state_dict or net; pick one with "
                 "--select PATH",
                 ckpt.path,
                 {}};
}

Expected<Reference> referenceOf(const Checkpoint& ckpt, const std::string& path)
{
    auto keys = stateDictKeys(ckpt, std::nullopt);
    if (!keys) {
        return keys.error();
    }
    Reference ref;
    ref.path = path;
    ref.kind = ReferenceKind::Checkpoint;
    ref.keys = std::move(*keys);
    return ref;
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
        return referenceOf(**ckpt, path);
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

}  // namespace ckpt::diagnose
