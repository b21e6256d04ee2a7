// The classes of a TorchScript archive (torch.jit.save, _save_for_lite_interpreter), as its own
// `code/` sources declare them (docs/format.md §11). data.pkl pickles a scripted module as an
// object of its `__torch__.` class whose state is a flat dict of every attribute; which of them are
// parameters and buffers only the class says, in the `__parameters__ = [...]` and
// `__buffers__ = [...]` lines torch's printer writes (torch/csrc/jit/serialization/python_print.cpp).
// The sources are only scanned for those lines, never run.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ckpt {

struct ScriptClass {
    bool module = false;                  // `class X(Module):`, a scripted nn.Module
    std::vector<std::string> parameters;  // in slot order, as torch's ParameterDict yields them
    std::vector<std::string> buffers;
};

// Qualified class name (`__torch__.torch.nn.modules.conv.Conv2d`) -> its declaration.
using ScriptClasses = std::unordered_map<std::string, ScriptClass>;

// `code/__torch__/torch/nn/modules/conv.py` -> `__torch__.torch.nn.modules.conv`; "" when the
// record is no class source of the archive (debug pickles, other records).
[[nodiscard]] std::string scriptModuleOfRecord(std::string_view relName);

// Adds the classes `source` (the text of the module `moduleName`) declares to `out`.
void parseScriptSource(std::string_view moduleName, std::string_view source, ScriptClasses& out);

}  // namespace ckpt
