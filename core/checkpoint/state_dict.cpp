#include "checkpoint/state_dict.h"

#include <algorithm>
#include <unordered_set>

namespace ckpt {
namespace {

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

std::string childPath(const std::string& parent, const std::string& name)
{
    return parent.empty() ? name : parent + "/" + name;
}

std::span<const ValueId> dictItems(const Arena& a, ValueId v)
{
    if (v.valid() && a[v].kind == Kind::Dict) {
        return a[v].items;
    }
    return {};
}

// Whether a TorchScript attribute reaches a tensor (packed params hide theirs in a setstate
// tuple); bounded like the walk itself, cycles cut by `seen`.
bool holdsTensor(const Arena& a, ValueId v, std::unordered_set<std::uint32_t>& seen, std::uint32_t depth)
{
    if (!v.valid() || depth > kMaxModuleDepth || !seen.insert(v.v).second) {
        return false;
    }
    const auto& val = a[v];
    const auto any = [&](std::span<const ValueId> items) {
        return std::any_of(items.begin(), items.end(),
                           [&](ValueId item) { return holdsTensor(a, item, seen, depth + 1); });
    };
    switch (val.kind) {
    case Kind::Tensor:
        return true;
    case Kind::Dict:
    case Kind::List:
    case Kind::Tuple:
    case Kind::Set:
        return any(val.items);
    case Kind::Object: {
        const pickle::ObjectInfo o = pickle::objectOf(a, v);
        return holdsTensor(a, o.state, seen, depth + 1) || holdsTensor(a, o.args, seen, depth + 1) ||
               any(o.listItems) || any(o.dictItems);
    }
    default:
        return false;
    }
}

bool holdsTensor(const Arena& a, ValueId v)
{
    std::unordered_set<std::uint32_t> seen;
    return holdsTensor(a, v, seen, 0);
}

std::string typeOf(const Arena& a, ValueId v)
{
    return a[v].kind == Kind::Object ? pickle::objectOf(a, v).callable.qualified() : std::string();
}

bool listed(const std::vector<std::string>& names, const std::string& name)
{
    return std::find(names.begin(), names.end(), name) != names.end();
}

class Collector {
public:
    Collector(const Arena& a, const ScriptClasses* script) : a_(a), script_(script) {}

    Expected<void> collect(ValueId module, const std::string& prefix, const std::string& path, std::uint32_t depth)
    {
        if (depth > kMaxModuleDepth) {
            return makeError(ErrorCode::Limit, "modules nest more than " + std::to_string(kMaxModuleDepth) +
                                                   " levels deep; model.state_dict() would exceed Python's "
                                                   "recursion limit");
        }
        if (!active_.insert(module.v).second) {
            return makeError(ErrorCode::Unsupported, "module '" + path + "' contains itself; it has no state dict");
        }
        if (const ScriptClass* cls = scriptModuleClass(a_, module, script_)) {
            if (auto ok = collectScript(*cls, module, prefix, path, depth); !ok) {
                return ok;
            }
            active_.erase(module.v);
            return {};
        }
        const auto& state = dictItems(a_, pickle::objectOf(a_, module).state);
        std::unordered_set<std::string> nonPersistent;
        if (ValueId set = pickle::dictGet(a_, state, "_non_persistent_buffers_set"); set.valid()) {
            for (ValueId item : a_[set].items) {
                if (a_[item].kind == Kind::Str) {
                    nonPersistent.insert(a_[item].text);
                }
            }
        }
        addTensors(state, "_parameters", prefix, path, {});
        addTensors(state, "_buffers", prefix, path, nonPersistent);
        const auto& children = dictItems(a_, pickle::dictGet(a_, state, "_modules"));
        for (std::size_t i = 0; i + 1 < children.size(); i += 2) {
            const std::string name = pickle::keyText(a_, children[i]);
            const ValueId child = children[i + 1];
            if (a_[child].kind == Kind::None) {
                continue;
            }
            const std::string modulePath = childPath(childPath(path, "_modules"), name);
            if (!isModuleObject(a_, child)) {
                out.skipped.push_back({StateDictSkip::Why::NotModule, modulePath, a_[child].kind, {}});
                continue;
            }
            if (auto ok = collect(child, prefix + name + ".", modulePath, depth + 1); !ok) {
                return ok;
            }
        }
        active_.erase(module.v);
        return {};
    }

    ModuleStateDict out;

private:
    // torch.jit's Module.state_dict(): `__parameters__`, then `__buffers__` (each as the class lists
    // them, which is its slot order), then submodules in attribute order.
    Expected<void> collectScript(const ScriptClass& cls, ValueId module, const std::string& prefix,
                                 const std::string& path, std::uint32_t depth)
    {
        const ValueId stateValue = pickle::objectOf(a_, module).state;
        if (!stateValue.valid() || a_[stateValue].kind != Kind::Dict) {
            if (holdsTensor(a_, stateValue)) {
                out.skipped.push_back({StateDictSkip::Why::ScriptState, path, Kind::Object, typeOf(a_, module)});
            }
            return {};
        }
        const auto& state = a_[stateValue].items;
        for (const auto* names : {&cls.parameters, &cls.buffers}) {
            for (const auto& name : *names) {
                const ValueId v = pickle::dictGet(a_, state, name);
                if (!v.valid() || a_[v].kind == Kind::None) {
                    continue;
                }
                if (a_[v].kind != Kind::Tensor) {
                    out.skipped.push_back({StateDictSkip::Why::NotTensor, childPath(path, name), a_[v].kind, {}});
                    continue;
                }
                out.entries.push_back({prefix + name, v});
            }
        }
        for (std::size_t i = 0; i + 1 < state.size(); i += 2) {
            const std::string name = pickle::keyText(a_, state[i]);
            const ValueId child = state[i + 1];
            if (listed(cls.parameters, name) || listed(cls.buffers, name)) {
                continue;
            }
            if (scriptModuleClass(a_, child, script_) != nullptr) {
                if (auto ok = collect(child, prefix + name + ".", childPath(path, name), depth + 1); !ok) {
                    return ok;
                }
            } else if (holdsTensor(a_, child)) {
                out.skipped.push_back(
                    {StateDictSkip::Why::ScriptAttribute, childPath(path, name), a_[child].kind, typeOf(a_, child)});
            }
        }
        return {};
    }

    void addTensors(std::span<const ValueId> state, const std::string& field, const std::string& prefix,
                    const std::string& path, const std::unordered_set<std::string>& skip)
    {
        const auto& kv = dictItems(a_, pickle::dictGet(a_, state, field));
        for (std::size_t i = 0; i + 1 < kv.size(); i += 2) {
            const std::string name = pickle::keyText(a_, kv[i]);
            const ValueId v = kv[i + 1];
            if (a_[v].kind == Kind::None || skip.contains(name)) {
                continue;
            }
            if (a_[v].kind != Kind::Tensor) {
                out.skipped.push_back(
                    {StateDictSkip::Why::NotTensor, childPath(childPath(path, field), name), a_[v].kind, {}});
                continue;
            }
            out.entries.push_back({prefix + name, v});
        }
    }

    const Arena& a_;
    const ScriptClasses* script_;
    std::unordered_set<std::uint32_t> active_;  // the modules being collected, to catch a cycle
};

}  // namespace

bool isModuleState(const Arena& a, const pickle::ObjectInfo& o)
{
    if (!o.state.valid() || a[o.state].kind != Kind::Dict) {
        return false;
    }
    const auto& items = a[o.state].items;
    return pickle::dictGet(a, items, "_modules").valid() && pickle::dictGet(a, items, "_parameters").valid();
}

const ScriptClass* scriptModuleClass(const Arena& a, ValueId v, const ScriptClasses* script)
{
    if (script == nullptr || !v.valid() || a[v].kind != Kind::Object) {
        return nullptr;
    }
    const auto it = script->find(pickle::objectOf(a, v).callable.qualified());
    return it != script->end() && it->second.module ? &it->second : nullptr;
}

bool isModuleObject(const Arena& a, ValueId v, const ScriptClasses* script)
{
    return v.valid() && a[v].kind == Kind::Object &&
           (isModuleState(a, pickle::objectOf(a, v)) || scriptModuleClass(a, v, script) != nullptr);
}

Expected<ModuleStateDict> moduleStateDict(const Arena& a, ValueId module, const std::string& path,
                                          const ScriptClasses* script)
{
    Collector c(a, script);
    if (auto ok = c.collect(module, "", path, 0); !ok) {
        return ok.error();
    }
    return std::move(c.out);
}

}  // namespace ckpt
