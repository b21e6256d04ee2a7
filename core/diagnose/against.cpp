// `check --against`: the checkpoint's state dict against the model's keys, reported as
// load_state_dict(strict=True) reports it, with the prefix edit that fixes it (the key sets come
// from reference.cpp).
#include "diagnose/against.h"

#include "diagnose/rules.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace ckpt::diagnose {
namespace {

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

    // The convert options that make the edit, so the keys are renamed as convert renames them.
    [[nodiscard]] transform::Options options() const
    {
        transform::Options o;
        if (!strip.empty()) {
            o.stripPrefixes = {strip};
        }
        if (!add.empty()) {
            o.addPrefix = add;
        }
        return o;
    }
};

bool keySetsMatch(const std::vector<StateKey>& ckptKeys, const std::unordered_set<std::string>& modelKeys,
                  const PrefixFix& p)
{
    const transform::Options edit = p.options();
    std::unordered_set<std::string> seen;
    for (const auto& k : ckptKeys) {
        auto r = edit.renamedKey(k.key);
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
        transform::Options o = fixFound->options();
        if (!ks.dictPath.empty()) {
            o.select = ks.dictPath;
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
