#include "checkpoint/script_state_dict.h"

#include <unordered_map>

namespace ckpt {

Expected<ScriptStateDict> scriptStateDict(const Checkpoint& c)
{
    if (!c.torchScript) {
        return c.withPath(makeError(ErrorCode::Unsupported, "not a TorchScript archive"));
    }
    if (scriptModuleClass(c.arena, c.root, &c.scriptClasses) == nullptr) {
        const std::string cls =
            c.arena[c.root].kind == pickle::Kind::Object ? pickle::objectOf(c.arena, c.root).callable.qualified() : "";
        return c.withPath(makeError(ErrorCode::Unsupported, "the TorchScript archive's root " +
                                                                (cls.empty() ? std::string("value") : cls) +
                                                                " is no Module class its code/ sources declare"));
    }
    auto sd = moduleStateDict(c.arena, c.root, "", &c.scriptClasses);
    if (!sd) {
        return c.withPath(sd.error());
    }
    // A tensor value reached at two paths is one row of the index, the first path's.
    std::unordered_map<std::uint32_t, TensorIndex> byValue;
    for (std::uint32_t i = 0; i < c.tensors.size(); ++i) {
        byValue.emplace(c.tensors[TensorIndex{i}].value.v, TensorIndex{i});
    }
    ScriptStateDict out;
    out.skipped = std::move(sd->skipped);
    for (auto& e : sd->entries) {
        const auto it = byValue.find(e.tensor.v);
        if (it == byValue.end()) {
            return c.withPath(makeError(ErrorCode::Corrupt, "state-dict tensor " + e.key + " is not in the key tree"));
        }
        out.entries.push_back({std::move(e.key), it->second});
    }
    return out;
}

}  // namespace ckpt
