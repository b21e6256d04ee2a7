// Whole-model pickles -> what `model.state_dict()` returns, read from the pickled __dict__s without
// the classes: each module's `_parameters` (None skipped), then its `_buffers` (None and
// `_non_persistent_buffers_set` skipped), then its `_modules` in order, names joined with dots
// (torch.nn.Module._save_to_state_dict / state_dict). Parameters come out detached: plain tensors
// with requires_grad False, sharing their storage, as state_dict() gives them.
#include "transform/plan_builder.h"

#include <unordered_set>

namespace ckpt::transform::detail {

namespace {

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

// Wrappers whose state_dict is their one child's with a prefix: DataParallel/DDP (`module`) and
// torch.compile's OptimizedModule (`_orig_mod`). Unwrapping gives the model's own names.
const char* wrapperChild(std::string_view cls)
{
    if (cls == "torch.nn.parallel.data_parallel.DataParallel" ||
        cls == "torch.nn.parallel.distributed.DistributedDataParallel") {
        return "module";
    }
    if (cls == "torch._dynamo.eval_frame.OptimizedModule") {
        return "_orig_mod";
    }
    return nullptr;
}

std::vector<ValueId> dictItemsOf(const Arena& a, ValueId v)
{
    return v.valid() && a[v].kind == Kind::Dict ? a[v].items : std::vector<ValueId>{};
}

class StateDictCollector {
public:
    explicit StateDictCollector(Builder& b) : b_(b) {}

    Expected<void> collect(ValueId module, const std::string& prefix, const std::string& statePath, std::uint32_t depth)
    {
        Arena& a = b_.arena();
        if (depth > 1000 || !active_.insert(module.v).second) {
            return makeError(ErrorCode::Unsupported,
                             "module '" + statePath + "' contains itself; it has no state dict");
        }
        const auto state = objectStateItems(a, pickle::objectOf(a, module));
        std::unordered_set<std::string> nonPersistent;
        if (ValueId set = dictGet(a, state, "_non_persistent_buffers_set"); set.valid()) {
            for (ValueId item : a[set].items) {
                if (a[item].kind == Kind::Str) {
                    nonPersistent.insert(a[item].text);
                }
            }
        }
        addTensors(dictItemsOf(a, dictGet(a, state, "_parameters")), prefix, joinPath(statePath, "_parameters"), {});
        addTensors(dictItemsOf(a, dictGet(a, state, "_buffers")), prefix, joinPath(statePath, "_buffers"),
                   nonPersistent);
        const auto children = dictItemsOf(a, dictGet(a, state, "_modules"));
        for (std::size_t i = 0; i + 1 < children.size(); i += 2) {
            const std::string name = pickle::keyText(a, children[i]);
            const ValueId child = children[i + 1];
            const std::string childPath = joinPath(joinPath(statePath, "_modules"), name);
            if (a[child].kind == Kind::None) {
                continue;
            }
            if (!isModuleObject(a, child)) {
                b_.step(StepKind::Note, childPath, std::string(pickle::kindName(a[child].kind)), "",
                        "not an nn.Module's state: left out of the state dict");
                continue;
            }
            if (auto ok = collect(child, prefix + name + ".", childPath, depth + 1); !ok) {
                return ok;
            }
        }
        active_.erase(module.v);
        return {};
    }

    std::vector<ValueId> items;  // k0, v0, k1, v1, ...
    std::size_t count = 0;

private:
    void addTensors(const std::vector<ValueId>& kv, const std::string& prefix, const std::string& dictPath,
                    const std::unordered_set<std::string>& skip)
    {
        Arena& a = b_.arena();
        for (std::size_t i = 0; i + 1 < kv.size(); i += 2) {
            const std::string name = pickle::keyText(a, kv[i]);
            const ValueId v = kv[i + 1];
            if (a[v].kind == Kind::None || skip.contains(name)) {
                continue;
            }
            if (a[v].kind != Kind::Tensor) {
                b_.step(StepKind::Note, joinPath(dictPath, name), std::string(pickle::kindName(a[v].kind)), "",
                        "not a tensor: left out of the state dict");
                continue;
            }
            items.push_back(a.str(prefix + name));
            items.push_back(detached(v));
            ++count;
        }
    }

    // param.detach(): the same storage and geometry, no Parameter, no grad, no hooks.
    ValueId detached(ValueId v)
    {
        Arena& a = b_.arena();
        pickle::TensorInfo t = pickle::tensorOf(a, v);
        if (!t.isParameter && !t.requiresGrad) {
            return v;  // a buffer: already what state_dict() holds
        }
        t.isParameter = false;
        t.parameterRequiresGrad = true;
        t.parameterHooks = {};
        t.parameterState = {};
        t.requiresGrad = false;
        const ValueId out = a.tensor(std::move(t));
        refreshStridedArgs(a, out);
        return out;
    }

    Builder& b_;
    std::unordered_set<std::uint32_t> active_;
};

Expected<void> unwrapOne(Builder& b, ValueId module, const std::string& path)
{
    Arena& a = b.arena();
    const std::string cls = pickle::objectOf(a, module).callable.qualified();
    ValueId target = module;
    std::string statePath = path;
    // Peel DataParallel / DDP / compile wrappers; --multi-card puts exactly one `module.` back.
    for (int guard = 0; guard < 16; ++guard) {
        const std::string wrapperCls = pickle::objectOf(a, target).callable.qualified();
        const char* childName = wrapperChild(wrapperCls);
        if (childName == nullptr) {
            break;
        }
        const auto state = objectStateItems(a, pickle::objectOf(a, target));
        const ValueId inner = dictGet(a, dictItemsOf(a, dictGet(a, state, "_modules")), childName);
        if (!isModuleObject(a, inner)) {
            break;
        }
        statePath = joinPath(joinPath(statePath, "_modules"), childName);
        b.step(StepKind::Unwrap, path, wrapperCls, "its `" + std::string(childName) + "`",
               "wrapper removed: keys carry no `" + std::string(childName) + ".` prefix");
        target = inner;
    }

    StateDictCollector sd(b);
    if (auto ok = sd.collect(target, "", statePath, 0); !ok) {
        return ok;
    }
    // In place: every reference to the module (shared or not) now sees its state dict.
    pickle::Value dict;
    dict.kind = Kind::Dict;
    dict.flag = true;
    dict.items = std::move(sd.items);
    a[module] = std::move(dict);
    b.stateDicts.insert(module.v);
    b.step(StepKind::Unwrap, path, cls, "OrderedDict (" + std::to_string(sd.count) + " tensors)",
           "model.state_dict() equivalent: parameters (detached) and persistent buffers");
    b.step(StepKind::Note, path, "", "",
           "_metadata (each module's _version) needs the classes and is left absent; load_state_dict then treats "
           "every module as its current version");
    return {};
}

// Containers only: a module inside another object's state is that object's business.
Expected<void> findModules(Builder& b, ValueId v, const std::string& path, std::unordered_set<std::uint32_t>& seen,
                           std::uint32_t depth)
{
    Arena& a = b.arena();
    if (!v.valid() || depth > 20000 || !seen.insert(v.v).second) {
        return {};
    }
    if (isModuleObject(a, v)) {
        return unwrapOne(b, v, path);
    }
    const auto& val = a[v];
    if (val.kind == Kind::Dict) {
        const auto items = val.items;
        for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
            if (auto ok = findModules(b, items[i + 1], joinPath(path, pickle::keyText(a, items[i])), seen, depth + 1);
                !ok) {
                return ok;
            }
        }
    } else if (val.kind == Kind::List || val.kind == Kind::Tuple) {
        const auto items = val.items;
        for (std::size_t i = 0; i < items.size(); ++i) {
            if (auto ok = findModules(b, items[i], joinPath(path, std::to_string(i)), seen, depth + 1); !ok) {
                return ok;
            }
        }
    }
    return {};
}

}  // namespace

Expected<void> unwrapModules(Builder& b)
{
    if (!b.opts.unwrapModules) {
        return {};
    }
    std::unordered_set<std::uint32_t> seen;
    return findModules(b, b.plan.root, b.rootPath, seen, 0);
}

}  // namespace ckpt::transform::detail
