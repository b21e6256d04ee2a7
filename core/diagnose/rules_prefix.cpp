// Wrapper prefixes in state-dict keys (docs/format.md §7; the names are transform's kWrapperSegments):
// DataParallel/DDP's `module.`, torch.compile's `_orig_mod.`, Opacus' `_module.`, FSDP's
// `_fsdp_wrapped_module.` and activation checkpointing's `_checkpoint_wrapped_module.`. Prefixes are whole key segments
// at the start of a key, so `mlp_module.layer0.weight` and Lightning's `model.` are never taken for one.
#include "diagnose/rules.h"

#include <algorithm>
#include <array>
#include <map>
#include <unordered_set>

namespace ckpt::diagnose {
namespace {

constexpr std::size_t kMaxKeyPaths = 200;

using transform::Wrapper;
using Segment = transform::WrapperSegment;

const Segment* segmentAt(std::string_view key, std::size_t at)
{
    return transform::wrapperSegmentAt(key, at);
}

// The wrapper segments a key starts with, as the prefix text (`module._orig_mod.`).
std::string_view leadingChain(std::string_view key)
{
    std::size_t at = 0;
    while (const Segment* s = segmentAt(key, at)) {
        at += s->name.size() + 1;
    }
    return key.substr(0, at);
}

std::vector<std::string> chainSegments(std::string_view chain)
{
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at < chain.size()) {
        const auto dot = chain.find('.', at);
        out.emplace_back(chain.substr(at, dot + 1 - at));
        at = dot + 1;
    }
    return out;
}

// Wrapper segments after the leading chain (`layers.0._fsdp_wrapped_module.attn.weight`): FSDP
// and torch.compile applied to submodules. `module` and `_module` are left out here: they are common
// real names, and DDP and Opacus only ever wrap the whole model.
std::vector<Wrapper> innerWrappers(std::string_view key, std::size_t from)
{
    std::vector<Wrapper> out;
    for (std::size_t dot = key.find('.', from); dot != std::string_view::npos; dot = key.find('.', dot + 1)) {
        const Segment* s = segmentAt(key, dot + 1);
        if (s != nullptr && s->wrapper != Wrapper::Ddp && s->wrapper != Wrapper::Opacus) {
            out.push_back(s->wrapper);
        }
    }
    return out;
}

std::string stripAll(std::string_view key, const std::vector<std::string>& prefixes)
{
    for (const auto& p : prefixes) {
        if (key.starts_with(p)) {
            key.remove_prefix(p.size());
        }
    }
    return std::string(key);
}

struct DictView {
    std::string path;
    std::vector<std::string_view> keys;
};

std::string keyList(const std::vector<std::string>& keys, std::size_t maxShown)
{
    std::string out;
    for (std::size_t i = 0; i < keys.size() && i < maxShown; ++i) {
        out += (i ? ", \"" : "\"") + keys[i] + "\"";
    }
    if (keys.size() > maxShown) {
        out += ", ...";
    }
    return out;
}

std::string strictLoadExample(const DictView& d, const std::vector<std::string>& stripped)
{
    std::vector<std::string> with;
    for (std::size_t i = 0; i < d.keys.size() && i < 2; ++i) {
        with.emplace_back(d.keys[i]);
    }
    std::vector<std::string> without(stripped.begin(), stripped.begin() + static_cast<long>(with.size()));
    return "Missing key(s) in state_dict: " + keyList(without, 2) +
           ". Unexpected key(s) in state_dict: " + keyList(with, 2) + ".";
}

std::vector<std::string> keyPaths(const DictView& d, const std::vector<std::string_view>& keys)
{
    std::vector<std::string> out{d.path};
    for (std::size_t i = 0; i < keys.size() && i < kMaxKeyPaths; ++i) {
        out.push_back(joinPath(d.path, std::string(keys[i])));
    }
    return out;
}

Finding wrapperFinding(Wrapper w, bool nested, const DictView& d, std::string_view chain,
                       const std::vector<std::string>& stripped)
{
    Finding f;
    f.severity = Severity::Warning;
    const std::string total = plural(d.keys.size(), "key", "keys");
    const std::string where = "the state dict at " + quotedPath(d.path);
    const std::string c(chain);
    const std::string loadFails =
        "Loading it into the bare model with load_state_dict(strict=True) fails: " + strictLoadExample(d, stripped);
    switch (w) {
    case Wrapper::Ddp:
        if (nested) {
            f.code = "nested-prefix";
            f.title = "Keys carry `" + c + "`: the model was wrapped in DataParallel/DDP twice";
            f.detail = "All " + total + " of " + where + " start with `" + c +
                       "`: the model was wrapped twice (e.g. DDP around a DataParallel model) when it was saved. " +
                       loadFails + " Strip the whole prefix to load it into the bare model.";
        } else {
            f.code = "module-prefix";
            f.title = "Keys carry DataParallel/DDP's `" + c + "` prefix";
            f.detail = "All " + total + " of " + where + " start with `" + c +
                       "`: it was saved from a model wrapped in nn.DataParallel or DistributedDataParallel. " +
                       loadFails + " For a single card (or to wrap the model only after loading), strip `" + c +
                       "` (the fix). To load it into a model that is already wrapped, keep the keys as they are.";
        }
        break;
    case Wrapper::Compile:
        f.code = "compile-prefix";
        f.title = "Keys carry torch.compile's `_orig_mod.`";
        f.detail = "All " + total + " of " + where + " start with `" + c +
                   "`: the state dict was taken from the OptimizedModule that torch.compile returns, not from "
                   "the model. " +
                   loadFails + " Strip the prefix, or save model._orig_mod.state_dict() next time.";
        break;
    case Wrapper::Opacus:
        f.code = "opacus-prefix";
        f.title = "Keys carry Opacus' `_module.` prefix";
        f.detail = "All " + total + " of " + where + " start with `" + c +
                   "`: the state dict was taken from the GradSampleModule that Opacus' PrivacyEngine wraps the "
                   "model in for differentially private training, not from the model. " +
                   loadFails + " Strip the prefix, or save model._module.state_dict() next time.";
        break;
    case Wrapper::Fsdp:
        f.code = "fsdp-prefix";
        f.title = "Keys carry FSDP/activation-checkpointing wrapper names";
        f.detail = "All " + total + " of " + where + " start with `" + c +
                   "`: they were taken from an FSDP or checkpoint_wrapper-wrapped model (a LOCAL state dict or "
                   "named_parameters()). " +
                   loadFails + " Strip the wrapper prefix.";
        break;
    }
    f.paths = keyPaths(d, d.keys);
    transform::Options fix;
    fix.stripPrefixes = chainSegments(chain);
    f.fix = fix;
    return f;
}

Finding innerWrapperFinding(Wrapper w, const DictView& d, const std::vector<std::string_view>& keys)
{
    Finding f;
    f.severity = Severity::Warning;
    const bool fsdp = w == Wrapper::Fsdp;
    f.code = fsdp ? "fsdp-prefix" : "compile-prefix";
    f.title = fsdp ? "Keys carry FSDP/activation-checkpointing wrapper names inside"
                   : "Keys carry torch.compile's `_orig_mod.` inside";
    const std::string names = fsdp ? "`_fsdp_wrapped_module.` / `_checkpoint_wrapped_module.`" : "`_orig_mod.`";
    f.detail = plural(keys.size(), "key", "keys") + " of the state dict at " + quotedPath(d.path) + " carry " + names +
               " after their first segment (e.g. `" + std::string(keys.front()) + "`): submodules were wrapped " +
               (fsdp ? "by FSDP or checkpoint_wrapper" : "by torch.compile") +
               " when it was saved, so a model built without those wrappers reports these keys as unexpected and "
               "their unwrapped names as missing. A prefix edit cannot remove a segment in the middle of a key: "
               "load it into the wrapped model and save model.state_dict() from there (FSDP: with "
               "StateDictType.FULL_STATE_DICT), or rename the keys by hand.";
    f.paths = keyPaths(d, keys);
    return f;
}

void checkDict(const DictView& d, Findings& out)
{
    std::map<std::string_view, std::vector<std::string_view>> byChain;
    std::vector<std::string_view> chainOrder;
    std::map<Wrapper, std::vector<std::string_view>> inner;
    for (auto key : d.keys) {
        const auto chain = leadingChain(key);
        auto& bucket = byChain[chain];
        if (bucket.empty()) {
            chainOrder.push_back(chain);
        }
        bucket.push_back(key);
        for (Wrapper w : innerWrappers(key, chain.size())) {
            auto& v = inner[w];
            if (v.empty() || v.back() != key) {
                v.push_back(key);
            }
        }
    }
    std::map<Wrapper, bool> reported;
    if (byChain.size() == 1 && !chainOrder.front().empty()) {
        const auto chain = chainOrder.front();
        const auto segs = chainSegments(chain);
        std::vector<std::string> stripped;
        for (std::size_t i = 0; i < d.keys.size() && i < 2; ++i) {
            stripped.push_back(stripAll(d.keys[i], segs));
        }
        const auto ddp = std::count(segs.begin(), segs.end(), std::string("module."));
        if (ddp > 0) {
            out.push_back(wrapperFinding(Wrapper::Ddp, ddp > 1, d, chain, stripped));
        }
        for (Wrapper w : {Wrapper::Compile, Wrapper::Opacus, Wrapper::Fsdp}) {
            const bool has = std::any_of(segs.begin(), segs.end(), [&](const std::string& s) {
                const Segment* seg = segmentAt(s + "x", 0);
                return seg != nullptr && seg->wrapper == w;
            });
            if (has) {
                out.push_back(wrapperFinding(w, false, d, chain, stripped));
                reported[w] = true;
                if (const auto it = inner.find(w); it != inner.end()) {
                    out.back().detail += " " + plural(it->second.size(), "key", "keys") +
                                         " also carry wrapper names "
                                         "after their first segment (e.g. `" +
                                         std::string(it->second.front()) +
                                         "`): a prefix edit removes only the leading one; load it into the wrapped "
                                         "model and save a FULL_STATE_DICT to drop the inner ones.";
                }
            }
        }
    } else if (byChain.size() > 1) {
        // Build one strip sequence that empties every chain (longest chains first), then prove it
        // by applying it and looking for keys that would collide.
        std::vector<std::string_view> chains = chainOrder;
        std::sort(chains.begin(), chains.end(),
                  [](std::string_view a, std::string_view b) { return a.size() > b.size(); });
        std::vector<std::string> strips;
        for (auto chain : chains) {
            for (auto& s : chainSegments(chain)) {
                strips.push_back(std::move(s));
            }
        }
        std::unordered_set<std::string> seen;
        std::vector<std::string> collisions;
        bool clean = true;
        for (auto key : d.keys) {
            auto k = stripAll(key, strips);
            if (!leadingChain(k).empty()) {
                clean = false;
            }
            if (!seen.insert(k).second) {
                collisions.push_back(k);
            }
        }
        Finding f;
        f.code = "mixed-prefix";
        f.severity = Severity::Warning;
        f.title = "Some keys carry a wrapper prefix and others do not";
        std::string counts;
        std::vector<std::string_view> odd;
        for (auto chain : chainOrder) {
            const auto& keys = byChain[chain];
            if (!counts.empty()) {
                counts += ", ";
            }
            counts += plural(keys.size(), "key", "keys") +
                      (chain.empty() ? std::string(" without a prefix") : " with `" + std::string(chain) + "`");
            if (!chain.empty()) {
                odd.insert(odd.end(), keys.begin(), keys.end());
            }
        }
        f.detail = "The state dict at " + quotedPath(d.path) + " mixes " + counts + " (e.g. `" +
                   std::string(odd.front()) +
                   "`): it was assembled from a wrapped and an unwrapped model, so no model loads it with "
                   "strict=True as it is.";
        if (!collisions.empty()) {
            f.detail += " Stripping the prefixes would make " + plural(collisions.size(), "key", "keys") +
                        " collide (e.g. `" + collisions.front() +
                        "` exists with and without the prefix): decide which copy to keep and drop the other.";
        } else if (clean) {
            f.detail += " Stripping the prefixes gives every key its unwrapped name.";
            transform::Options fix;
            fix.stripPrefixes = strips;
            f.fix = fix;
        }
        f.paths = keyPaths(d, odd);
        out.push_back(std::move(f));
    }
    for (const auto& [w, keys] : inner) {
        if (!reported[w]) {
            out.push_back(innerWrapperFinding(w, d, keys));
        }
    }
}

}  // namespace

void prefixRules(const Checkpoint& ckpt, Findings& out)
{
    for (std::uint32_t i = 0; i < ckpt.nodes.size(); ++i) {
        const Node& n = ckpt.nodes[NodeIndex{i}];
        if (!n.stateDictLike || n.childCount == 0) {
            continue;
        }
        DictView d;
        d.path = ckpt.pathOf(NodeIndex{i});
        d.keys.reserve(n.childCount);
        for (std::uint32_t row = 0; row < n.childCount; ++row) {
            const NodeIndex c = n.child(row);
            d.keys.emplace_back(ckpt.nodes[c].name);
        }
        checkDict(d, out);
    }
}

}  // namespace ckpt::diagnose
