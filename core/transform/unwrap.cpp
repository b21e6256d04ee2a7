// Whole-model pickles -> what `model.state_dict()` returns (checkpoint/state_dict.h), in place of
// each module found in the containers. Parameters come out detached: plain tensors with
// requires_grad False, sharing their storage, as state_dict() gives them.
#include "checkpoint/state_dict.h"
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
    return v.valid() && a[v].kind == Kind::Dict ? a[v].items.vec() : std::vector<ValueId>{};
}

// param.detach(): the same storage and geometry, no Parameter, no grad, no hooks.
ValueId detached(Arena& a, ValueId v)
{
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

std::string_view skipReason(StateDictSkip::Why why)
{
    switch (why) {
    case StateDictSkip::Why::NotTensor:
        return "not a tensor: left out of the state dict";
    case StateDictSkip::Why::NotModule:
        return "not an nn.Module's state: left out of the state dict";
    case StateDictSkip::Why::ScriptAttribute:
        return "a TorchScript attribute holding tensors that is no parameter, buffer or submodule (quantized packed "
               "params, a plain tensor attribute): torch.jit.load(f).state_dict() leaves it out, so the output does "
               "too; `ckptscope inspect` shows its tensors in the archive";
    case StateDictSkip::Why::ScriptState:
        return "a TorchScript module pickled through its __getstate__ (a quantized module's weight and bias, packed "
               "params): no state_dict() of torch.jit reaches these tensors, so the output leaves them out; "
               "`ckptscope inspect` shows them in the archive";
    }
    return {};
}

bool dropsTensors(StateDictSkip::Why why)
{
    return why == StateDictSkip::Why::ScriptAttribute || why == StateDictSkip::Why::ScriptState;
}

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
        const ValueId inner = pickle::dictGet(a, dictItemsOf(a, pickle::dictGet(a, state, "_modules")), childName);
        if (!isModuleObject(a, inner, &b.in.scriptClasses)) {
            break;
        }
        statePath = joinPath(joinPath(statePath, "_modules"), childName);
        b.step(StepKind::Unwrap, path, wrapperCls, "its `" + std::string(childName) + "`",
               "wrapper removed: keys carry no `" + std::string(childName) + ".` prefix");
        target = inner;
    }

    auto sd = moduleStateDict(a, target, statePath, &b.in.scriptClasses);
    if (!sd) {
        return sd.error();
    }
    for (const auto& skip : sd->skipped) {
        b.step(dropsTensors(skip.why) ? StepKind::Drop : StepKind::Note, skip.path,
               skip.type.empty() ? std::string(pickle::kindName(skip.kind)) : skip.type, "",
               std::string(skipReason(skip.why)));
    }
    const bool script = scriptModuleClass(a, target, &b.in.scriptClasses) != nullptr;
    std::vector<ValueId> items;  // k0, v0, k1, v1, ...
    items.reserve(sd->entries.size() * 2);
    for (const auto& e : sd->entries) {
        items.push_back(a.str(e.key));
        items.push_back(detached(a, e.tensor));
    }
    // In place: every reference to the module (shared or not) now sees its state dict.
    pickle::Value dict;
    dict.kind = Kind::Dict;
    dict.flag = true;
    dict.items = items;
    a[module] = std::move(dict);
    b.stateDicts.insert(module.v);
    b.step(StepKind::Unwrap, path, cls, "OrderedDict (" + std::to_string(sd->entries.size()) + " tensors)",
           script ? "torch.jit.load(f).state_dict() equivalent: the parameters and buffers its TorchScript classes "
                    "declare (__parameters__, __buffers__ in the archive's code/)"
                  : "model.state_dict() equivalent: parameters (detached) and persistent buffers");
    b.step(StepKind::Note, path, "", "",
           "_metadata (each module's _version) needs the classes and is left absent; load_state_dict then treats "
           "every module as its current version");
    return {};
}

Expected<void> findModules(Builder& b, ValueId v, const std::string& path, std::unordered_set<std::uint32_t>& seen,
                           std::uint32_t depth);

Expected<void> findInItems(Builder& b, std::span<const ValueId> items, bool pairs, const std::string& path,
                           std::unordered_set<std::uint32_t>& seen, std::uint32_t depth)
{
    const Arena& a = b.arena();
    for (std::size_t i = pairs ? 1 : 0; i < items.size(); i += pairs ? 2 : 1) {
        const std::string childPath = joinPath(path, pairs ? pickle::keyText(a, items[i - 1]) : std::to_string(i));
        if (auto ok = findModules(b, items[i], childPath, seen, depth + 1); !ok) {
            return ok;
        }
    }
    return {};
}

// Containers, and with --weights-only also other objects: those become their attribute dicts
// there, so a module they hold (Lightning's hyper_parameters holding whole nn.Modules, as chemprop
// saves them) would otherwise be left with no plain form. Without --weights-only an object is
// written back as it was, module included.
Expected<void> findModules(Builder& b, ValueId v, const std::string& path, std::unordered_set<std::uint32_t>& seen,
                           std::uint32_t depth)
{
    Arena& a = b.arena();
    if (depth > kMaxRewriteDepth) {
        return tooDeepToRewrite();
    }
    if (!v.valid() || !seen.insert(v.v).second) {
        return {};
    }
    if (isModuleObject(a, v, &b.in.scriptClasses)) {
        return unwrapOne(b, v, path);
    }
    const auto& val = a[v];
    if (val.kind == Kind::Dict) {
        return findInItems(b, std::vector<ValueId>(val.items), true, path, seen, depth);
    }
    if (val.kind == Kind::List || val.kind == Kind::Tuple) {
        return findInItems(b, std::vector<ValueId>(val.items), false, path, seen, depth);
    }
    if (val.kind == Kind::Object && b.opts.weightsOnly) {
        const pickle::ObjectInfo o = pickle::objectOf(a, v);
        if (auto ok = findInItems(b, objectStateItems(a, o), true, path, seen, depth); !ok) {
            return ok;
        }
        if (auto ok = findInItems(b, o.dictItems, true, path, seen, depth); !ok) {
            return ok;
        }
        return findInItems(b, o.listItems, false, path, seen, depth);
    }
    return {};
}

}  // namespace

Expected<void> unwrapModules(Builder& b)
{
    // A TorchScript archive's data.pkl names `__torch__` classes that only torch.jit.load can
    // build: its state dict is the one form a torch.save file can hold, so it is always taken.
    if (!b.opts.unwrapModules && !b.in.torchScript) {
        return {};
    }
    std::unordered_set<std::uint32_t> seen;
    return findModules(b, b.plan.root, b.rootPath, seen, 0);
}

}  // namespace ckpt::transform::detail
