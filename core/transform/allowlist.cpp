#include "transform/allowlist.h"

#include "util/dtype.h"

#include <algorithm>
#include <array>
#include <string>

namespace ckpt::transform {

namespace {

constexpr std::array<std::string_view, 11> kAllowedExact = {
    "collections.OrderedDict",
    "collections.Counter",
    "builtins.set",
    "builtins.complex",
    "builtins.bytearray",
    "_codecs.encode",
    "torch.nn.parameter.Parameter",
    "torch.Tensor",
    "torch.Size",
    "torch.device",
    "torch.serialization._get_layout",
};

constexpr std::array<std::string_view, 13> kRebuilds = {
    "_rebuild_parameter",
    "_rebuild_parameter_with_state",
    "_rebuild_qtensor",
    "_rebuild_tensor",
    "_rebuild_tensor_v2",
    "_rebuild_tensor_v3",
    "_rebuild_sparse_tensor",
    "_rebuild_meta_tensor_no_storage",
    "_rebuild_nested_tensor",
    "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_numpy",
    "_rebuild_device_tensor_from_cpu_tensor",
    "_rebuild_sparse_csr_tensor",
};

constexpr std::array<std::string_view, 5> kQschemes = {
    "per_tensor_affine",
    "per_tensor_symmetric",
    "per_channel_affine",
    "per_channel_symmetric",
    "per_channel_affine_float_qparams",
};

// torch's dtype attributes that are not in ckpt::DType (sub-byte ints) but are allowlisted.
bool isExtraDtype(std::string_view name)
{
    const std::string_view digits = name.starts_with("uint")  ? name.substr(4)
                                    : name.starts_with("int") ? name.substr(3)
                                                              : "";
    return digits.size() == 1 && digits[0] >= '1' && digits[0] <= '7';
}

// The legacy tensor and storage classes (`torch.FloatStorage`, `torch.cuda.HalfTensor`), and the
// untyped and typed storages under their own module (`torch.storage.UntypedStorage`, as torch.save
// writes them): the allowlist keys each class by its __module__, so `torch.UntypedStorage` is refused.
bool isTensorOrStorageClass(std::string_view module, std::string_view name)
{
    const bool untypedOrTyped = name == "UntypedStorage" || name == "TypedStorage";
    if (module == "torch.storage") {
        return untypedOrTyped;
    }
    if ((module != "torch" && module != "torch.cuda") || untypedOrTyped) {
        return false;
    }
    return (name.ends_with("Tensor") && name.size() > 6 && name != "Tensor") || name.ends_with("Storage");
}

constexpr std::array<std::string_view, 30> kUnsafeModules = {
    "os",         "posix",           "nt",      "sys",  "subprocess", "runpy",  "importlib", "shutil",  "socket",
    "pty",        "commands",        "ctypes",  "code", "codeop",     "pickle", "_pickle",   "cPickle", "marshal",
    "webbrowser", "multiprocessing", "asyncio", "pdb",  "bdb",        "timeit", "trace",     "signal",  "popen2",
    "platform",   "tempfile",        "pydoc",
};

constexpr std::array<std::string_view, 28> kUnsafeExact = {
    "builtins.eval",
    "builtins.exec",
    "builtins.compile",
    "builtins.open",
    "builtins.getattr",
    "builtins.setattr",
    "builtins.delattr",
    "builtins.__import__",
    "builtins.globals",
    "builtins.locals",
    "builtins.vars",
    "builtins.input",
    "builtins.breakpoint",
    "builtins.execfile",
    "builtins.apply",
    "builtins.memoryview",
    "operator.attrgetter",
    "operator.methodcaller",
    "functools.partial",
    "functools.reduce",
    "types.FunctionType",
    "types.CodeType",
    "types.LambdaType",
    "torch.load",
    "torch.serialization.load",
    "torch.storage._load_from_bytes",
    "numpy.load",
    "torch.jit.load",
};

template <std::size_t N> bool in(const std::array<std::string_view, N>& names, std::string_view name)
{
    return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

bool weightsOnlyAllowed(std::string_view qualified)
{
    if (in(kAllowedExact, qualified)) {
        return true;
    }
    const auto dot = qualified.rfind('.');
    if (dot == std::string_view::npos) {
        return false;
    }
    const std::string_view module = qualified.substr(0, dot);
    const std::string_view name = qualified.substr(dot + 1);
    if (module == "torch._utils") {
        // _rebuild_sparse_csr_tensor was allowlisted in 1.13 only; 2.x writes _rebuild_sparse_tensor.
        return name != "_rebuild_sparse_csr_tensor" && in(kRebuilds, name);
    }
    if (qualified == "torch._tensor._rebuild_from_type_v2") {
        return true;
    }
    if (isTensorOrStorageClass(module, name)) {
        return true;
    }
    if (module == "torch") {
        return in(kQschemes, name) || dtypeFromName(name).has_value() || isExtraDtype(name);
    }
    return false;
}

bool unsafeCallable(std::string_view qualified)
{
    const std::string_view top = qualified.substr(0, qualified.find('.'));
    return in(kUnsafeExact, qualified) || in(kUnsafeModules, top);
}

}  // namespace ckpt::transform
