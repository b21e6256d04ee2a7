#include "checkpoint/state_dict.h"

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

const std::vector<ValueId>& dictItems(const Arena& a, ValueId v)
{
    static const std::vector<ValueId> kNone;
    return v.valid() && a[v].kind == Kind::Dict ? a[v].items : kNone;
}

class Collector {
public:
    explicit Collector(const Arena& a) : a_(a) {}

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
                out.skipped.push_back({StateDictSkip::Why::NotModule, modulePath, a_[child].kind});
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
    void addTensors(const std::vector<ValueId>& state, const std::string& field, const std::string& prefix,
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
                    {StateDictSkip::Why::NotTensor, childPath(childPath(path, field), name), a_[v].kind});
                continue;
            }
            out.entries.push_back({prefix + name, v});
        }
    }

    const Arena& a_;
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

bool isModuleObject(const Arena& a, ValueId v)
{
    return v.valid() && a[v].kind == Kind::Object && isModuleState(a, pickle::objectOf(a, v));
}

Expected<ModuleStateDict> moduleStateDict(const Arena& a, ValueId module, const std::string& path)
{
    Collector c(a);
    if (auto ok = c.collect(module, "", path, 0); !ok) {
        return ok.error();
    }
    return std::move(c.out);
}

}  // namespace ckpt
