#include "util/tied_pairs.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

namespace ckpt {

namespace {

struct TiedClass {
    std::string_view name;
    TieConfig tie;
    std::string_view mapping;  // "target=source;...", "pattern", "dynamic" or "" (ties nothing)
};

constexpr TiedClass kTiedClasses[] = {
// A C array: sized by the generated list.
#include "util/tied_weights.inc"
};

const TiedClass* classNamed(std::string_view name)
{
    const auto* end = std::end(kTiedClasses);
    const auto* it = std::lower_bound(std::begin(kTiedClasses), end, name,
                                      [](const TiedClass& c, std::string_view n) { return c.name < n; });
    return it != end && it->name == name ? it : nullptr;
}

using Pair = std::pair<std::string, std::string>;  // target, source

std::vector<Pair> pairsOf(std::string_view mapping)
{
    std::vector<Pair> pairs;
    while (!mapping.empty()) {
        const auto semi = mapping.find(';');
        const auto item = mapping.substr(0, semi);
        if (const auto eq = item.find('='); eq != std::string_view::npos) {
            pairs.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
        }
        mapping = semi == std::string_view::npos ? std::string_view() : mapping.substr(semi + 1);
    }
    return pairs;
}

// Every plain pair any class declares, once: what "some class ties" means where the model's own
// class is not known.
const std::vector<Pair>& allPairs()
{
    static const std::vector<Pair> pairs = [] {
        std::vector<Pair> all;
        std::unordered_set<std::string> seen;
        for (const auto& c : kTiedClasses) {
            if (c.mapping == "pattern" || c.mapping == "dynamic") {
                continue;
            }
            for (auto& p : pairsOf(c.mapping)) {
                if (seen.insert(p.first + '\0' + p.second).second) {
                    all.push_back(std::move(p));
                }
            }
        }
        return all;
    }();
    return pairs;
}

// A mapping's names over the stored keys: a name that is a key stands for itself; a name that is
// none but prefixes keys (`enc_score_head` over `enc_score_head.0.weight`) stands for each parameter
// under that module, paired with the same parameter under the other name, as transformers expands
// module names against the model's own parameters.
std::vector<Pair> expanded(const std::vector<Pair>& pairs, const std::unordered_set<std::string>& stored,
                           const std::vector<std::string>& keys)
{
    std::vector<Pair> out;
    for (const auto& [target, source] : pairs) {
        const std::string* present = stored.contains(source) ? &source : stored.contains(target) ? &target : nullptr;
        if (present != nullptr) {
            out.emplace_back(target, source);
            continue;
        }
        bool any = false;
        for (const auto& k : keys) {
            if (k.size() > source.size() && k.starts_with(source) && k[source.size()] == '.') {
                out.emplace_back(target + k.substr(source.size()), k);
                any = true;
            } else if (k.size() > target.size() && k.starts_with(target) && k[target.size()] == '.') {
                out.emplace_back(k, source + k.substr(target.size()));
                any = true;
            }
        }
        if (!any) {
            out.emplace_back(target, source);
        }
    }
    return out;
}

// transformers' tie_weights over the file's keys: pairs grouped by source; each absent member of a
// group takes the first stored one (the source, else a target: "we swap them, tying the parameter
// that exists").
void applyPairs(const std::vector<Pair>& pairs, const std::unordered_set<std::string>& stored, bool ties, TieReport& r)
{
    std::vector<std::string> order;
    std::unordered_map<std::string, std::vector<std::string>> targets;
    for (const auto& [target, source] : pairs) {
        auto [it, added] = targets.try_emplace(source);
        if (added) {
            order.push_back(source);
        }
        if (std::find(it->second.begin(), it->second.end(), target) == it->second.end()) {
            it->second.push_back(target);
        }
    }
    std::unordered_set<std::string> done;
    for (const auto& source : order) {
        std::vector<std::string> members{source};
        members.insert(members.end(), targets[source].begin(), targets[source].end());
        const auto kept =
            std::find_if(members.begin(), members.end(), [&](const std::string& m) { return stored.contains(m); });
        if (kept == members.end()) {
            continue;  // nothing of the group is stored: no tie can give it back
        }
        for (const auto& m : members) {
            if (stored.contains(m) || !done.insert(m).second) {
                continue;
            }
            if (ties) {
                r.restored.push_back({m, *kept});
            } else if (m != source) {
                r.untied.push_back({m, *kept});
            }
        }
    }
}

// Whether the module that would hold `name` sits in a model with these keys: the name's
// grandparent (`encoder` for `encoder.embed_tokens.weight`, the root for `lm_head.weight`) prefixes
// a stored key. A pair of another architecture (`transformer.tokens_embed.weight`) is no candidate.
bool placedAmong(const std::string& name, const std::vector<std::string>& keys)
{
    const auto last = name.rfind('.');
    const auto parent = last == std::string::npos ? std::string::npos : name.rfind('.', last - 1);
    if (parent == std::string::npos) {
        return true;
    }
    const std::string prefix = name.substr(0, parent + 1);
    return std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return k.starts_with(prefix); });
}

// Absent names some class ties to a stored key, for a model whose own ties are not known.
void unknownPairs(const std::unordered_set<std::string>& stored, const std::vector<std::string>& keys, TieReport& r)
{
    std::unordered_set<std::string> named;
    for (const auto& [target, source] : expanded(allPairs(), stored, keys)) {
        if (stored.contains(source) && !stored.contains(target) && placedAmong(target, keys) &&
            named.insert(target).second) {
            r.unknown.push_back({target, source});
        }
    }
}

// transformers 4.x's tie_encoder_decoder tied each encoder weight to the decoder's of the same name
// (modeling_utils `_tie_encoder_decoder_weights`); a name stored on one side only is such a candidate.
void encoderDecoderPairs(const std::unordered_set<std::string>& stored, const std::vector<std::string>& keys,
                         TieReport& r)
{
    for (const auto& k : keys) {
        for (const auto& [from, to] : std::array<std::pair<std::string_view, std::string_view>, 2>{
                 {{"decoder.", "encoder."}, {"encoder.", "decoder."}}}) {
            if (k.starts_with(from)) {
                std::string twin = std::string(to) + k.substr(from.size());
                if (!stored.contains(twin)) {
                    r.unknown.push_back({std::move(twin), k});
                }
            }
        }
    }
}

}  // namespace

TieReport tiedWeights(const std::optional<ModelConfig>& config, const std::vector<std::string>& keys)
{
    TieReport r;
    const std::unordered_set<std::string> stored(keys.begin(), keys.end());
    r.haveConfig = config.has_value();
    if (!config) {
        r.unknownWhy = "there is no config.json beside it to name the model class";
        unknownPairs(stored, keys, r);
        return r;
    }
    if (config->architectures.empty()) {
        r.unknownWhy = "config.json names no model class (`architectures`)";
        unknownPairs(stored, keys, r);
        return r;
    }
    r.architecture = config->architectures.front();
    const TiedClass* cls = classNamed(r.architecture);
    if (cls == nullptr) {
        r.unknownWhy = "config.json names " + r.architecture +
                       ", which transformers 5.12 does not define (remote code, or another version)";
        unknownPairs(stored, keys, r);
        return r;
    }
    if (cls->mapping == "pattern" || cls->mapping == "dynamic") {
        r.unknownWhy = r.architecture + (cls->mapping == "pattern"
                                             ? " ties weights by patterns over the model's own parameter names"
                                             : " decides its ties when it is built, from its config");
        unknownPairs(stored, keys, r);
        return r;
    }
    switch (cls->tie) {
    case TieConfig::Always:
        r.ties = true;
        r.decidedBy = "its config class ties them whatever config.json says";
        break;
    case TieConfig::Never:
        r.decidedBy = "its config class never ties them";
        break;
    case TieConfig::DefaultFalse:
    case TieConfig::DefaultTrue:
        if (config->tieWordEmbeddings) {
            r.ties = *config->tieWordEmbeddings;
            r.decidedBy = std::string("config.json: tie_word_embeddings ") + (r.ties ? "true" : "false");
        } else {
            r.ties = cls->tie == TieConfig::DefaultTrue;
            r.decidedBy = std::string("config.json leaves tie_word_embeddings out, which for ") + r.architecture +
                          " means " + (r.ties ? "true" : "false");
        }
        if (!r.ties && config->textTieWordEmbeddings.value_or(false)) {
            r.ties = true;
            r.decidedBy = "config.json: text_config.tie_word_embeddings true";
        }
        break;
    }
    applyPairs(expanded(pairsOf(cls->mapping), stored, keys), stored, r.ties, r);
    if (config->tieEncoderDecoder) {
        r.unknownWhy = "config.json sets tie_encoder_decoder, which transformers 4.x applied (each encoder weight "
                       "tied to the decoder's of the same name, the copy left out when saving) and 5.12 ignores";
        encoderDecoderPairs(stored, keys, r);
    }
    return r;
}

std::string keptTiedName(std::vector<std::string> names)
{
    std::sort(names.begin(), names.end());
    static const std::unordered_set<std::string> pairs = [] {
        std::unordered_set<std::string> s;
        for (const auto& [target, source] : allPairs()) {
            s.insert(target + '\0' + source);
        }
        return s;
    }();
    for (const auto& candidate : names) {
        const bool sourceOfAll = std::all_of(names.begin(), names.end(), [&](const std::string& n) {
            return n == candidate || pairs.contains(n + '\0' + candidate);
        });
        if (sourceOfAll && names.size() > 1) {
            return candidate;
        }
    }
    return names.front();
}

}  // namespace ckpt
