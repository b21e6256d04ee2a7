// What `model.state_dict()` returns for a pickled nn.Module, read from the pickled __dict__s
// without the classes (torch.nn.Module.state_dict / _save_to_state_dict): each module's
// `_parameters` (None skipped), then its `_buffers` (None and `_non_persistent_buffers_set`
// skipped), then its `_modules` in order, names joined with dots. `check --against` compares
// these keys and `convert --unwrap` writes them, so both see the same state dict.
//
// A TorchScript module (an object of a `__torch__.` class the archive's code declares a Module,
// script_classes.h) keeps every attribute in one flat state dict; `torch.jit.load(f).state_dict()`
// then takes the attributes its class lists in `__parameters__`, then those in `__buffers__`, then
// the submodules in attribute order. The same walk serves both, given the archive's classes.
#pragma once

#include "checkpoint/script_classes.h"
#include "pickle/value.h"
#include "util/error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ckpt {

// An nn.Module's __dict__: an object whose BUILD state is a dict holding `_modules` and
// `_parameters`. The key tree shows these as modules, and only these are unwrapped.
[[nodiscard]] bool isModuleState(const pickle::Arena& a, const pickle::ObjectInfo& o);
// Also true for a TorchScript module object when `script` (the archive's classes) is given.
[[nodiscard]] bool isModuleObject(const pickle::Arena& a, pickle::ValueId v, const ScriptClasses* script = nullptr);
// The scripted Module class of `v`, or nullptr.
[[nodiscard]] const ScriptClass* scriptModuleClass(const pickle::Arena& a, pickle::ValueId v,
                                                   const ScriptClasses* script);

// How deep modules may nest below the one asked about. model.state_dict() recurses once per
// level, so Python's default recursion limit (1000) stops torch itself at about this depth.
inline constexpr std::uint32_t kMaxModuleDepth = 1000;

struct StateDictEntry {
    std::string key;         // dotted, as state_dict() names it (`layer1.0.conv.weight`)
    pickle::ValueId tensor;  // the value as pickled (a Parameter stays a Parameter)
};

// A value under `_parameters`, `_buffers` or `_modules` that state_dict() cannot hold although
// it is not None: the caller decides whether to say so.
// ScriptAttribute: a TorchScript attribute holding tensors that is neither parameter, buffer nor
// submodule (quantized packed params, plain tensor attributes); ScriptState: a TorchScript module
// pickled through its __getstate__ (quantized Conv2d, LinearPackedParams), whose tensors no
// state_dict() of torch.jit reaches.
struct StateDictSkip {
    enum class Why : std::uint8_t { NotTensor, NotModule, ScriptAttribute, ScriptState };
    Why why = Why::NotTensor;
    std::string path;  // its key path
    pickle::Kind kind = pickle::Kind::None;
    std::string type;  // an object's qualified class, for the ScriptAttribute/ScriptState reasons
};

struct ModuleStateDict {
    std::vector<StateDictEntry> entries;
    std::vector<StateDictSkip> skipped;
};

// The state dict of the module `module`, whose key path is `path` (used in paths and errors).
// Errors: Limit when modules nest deeper than kMaxModuleDepth, Unsupported when a module
// contains itself (state_dict() would recurse forever). Errors carry no file path. `script`: the
// classes of a TorchScript archive, for modules pickled by torch.jit.save.
Expected<ModuleStateDict> moduleStateDict(const pickle::Arena& a, pickle::ValueId module, const std::string& path,
                                          const ScriptClasses* script = nullptr);

}  // namespace ckpt
