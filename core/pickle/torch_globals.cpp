#include "pickle/torch_globals.h"

#include "pickle/text.h"
#include "util/checked.h"
#include "util/device_name.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace ckpt::pickle::detail {
namespace {

// Callables the unpickler turns into typed values instead of opaque Objects.
enum class Known : std::uint8_t {
    Other,
    OrderedDict,
    Size,
    Device,
    CodecsEncode,
    BytesType,
    ByteArray,
    SetType,
    FrozenSetType,
    RebuildTensor,
    RebuildTensorV2,
    RebuildTensorV3,
    RebuildParameter,
    RebuildParameterWithState,
    RebuildQTensor,
    RebuildSparse,
    RebuildSparseCsr,
    RebuildMeta,
    RebuildWrapperSubclass,
    RebuildFromCpu,
    RebuildFromNumpy,
    RebuildXla,
    RebuildNested,
    RebuildNjt,  // torch.nested._internal.nested_tensor._rebuild_njt: a jagged nested tensor (2.x)
    RebuildFromTypeV2,
    LegacyTensorClass,
    ParameterClass,  // torch.nn.parameter.Parameter(data, requires_grad), as torch < 1.0 reduced it
    VariableClass,   // torch.autograd.variable.Variable(data), torch 0.3's non-parameter Variables
};

Known classify(const GlobalRef& g)
{
    const std::string& m = g.module;
    const std::string& n = g.name;
    if (m == "torch._utils") {
        static constexpr std::pair<std::string_view, Known> kRebuilds[] = {
            {"_rebuild_tensor", Known::RebuildTensor},
            {"_rebuild_tensor_v2", Known::RebuildTensorV2},
            {"_rebuild_tensor_v3", Known::RebuildTensorV3},
            {"_rebuild_parameter", Known::RebuildParameter},
            {"_rebuild_parameter_with_state", Known::RebuildParameterWithState},
            {"_rebuild_qtensor", Known::RebuildQTensor},
            {"_rebuild_sparse_tensor", Known::RebuildSparse},
            {"_rebuild_sparse_csr_tensor", Known::RebuildSparseCsr},
            {"_rebuild_meta_tensor_no_storage", Known::RebuildMeta},
            {"_rebuild_wrapper_subclass", Known::RebuildWrapperSubclass},
            {"_rebuild_device_tensor_from_cpu_tensor", Known::RebuildFromCpu},
            {"_rebuild_device_tensor_from_numpy", Known::RebuildFromNumpy},
            {"_rebuild_xla_tensor", Known::RebuildXla},
            {"_rebuild_nested_tensor", Known::RebuildNested},
        };
        for (const auto& [name, k] : kRebuilds) {
            if (n == name) {
                return k;
            }
        }
        return Known::Other;
    }
    if (m == "torch") {
        if (n == "Size") {
            return Known::Size;
        }
        if (n == "device") {
            return Known::Device;
        }
        if (n.ends_with("Tensor")) {
            return Known::LegacyTensorClass;
        }
        return Known::Other;
    }
    if (m == "torch.cuda" && n.ends_with("Tensor")) {
        return Known::LegacyTensorClass;
    }
    if (m == "torch.nested._internal.nested_tensor" && n == "_rebuild_njt") {
        return Known::RebuildNjt;
    }
    if (m == "torch._tensor") {
        if (n == "_rebuild_from_type_v2") {
            return Known::RebuildFromTypeV2;
        }
        return n == "Tensor" ? Known::LegacyTensorClass : Known::Other;
    }
    if ((m == "torch.nn.parameter" || m == "torch.nn") && n == "Parameter") {
        return Known::ParameterClass;
    }
    if ((m == "torch.autograd.variable" || m == "torch.autograd") && n == "Variable") {
        return Known::VariableClass;
    }
    if (m == "collections" && n == "OrderedDict") {
        return Known::OrderedDict;
    }
    if (m == "_codecs" && n == "encode") {
        return Known::CodecsEncode;
    }
    if (m == "builtins") {
        if (n == "bytes") {
            return Known::BytesType;
        }
        if (n == "bytearray") {
            return Known::ByteArray;
        }
        if (n == "set") {
            return Known::SetType;
        }
        if (n == "frozenset") {
            return Known::FrozenSetType;
        }
    }
    return Known::Other;
}

// No call torch's loader knows takes more than eight arguments: one with more is none of them.
constexpr std::size_t kMaxKnownArgs = 8;

std::string dimsText(const std::vector<std::int64_t>& dims)
{
    std::string s = "[";
    for (std::size_t n = 0; n < dims.size() && n < 16; ++n) {
        s += (n != 0 ? ", " : "") + std::to_string(dims[n]);
    }
    return s + (dims.size() > 16 ? ", ...]" : "]");
}

}  // namespace

bool Problems::fail(ErrorCode code, std::string message)
{
    if (!error) {
        error = makeError(code, std::move(message), opStart);
    }
    return false;
}

void Problems::warn(std::string warning)
{
    if (warnings.size() < 100) {
        warnings.push_back(std::move(warning));
    }
}

struct TorchGlobals::Impl {
    Impl(Arena& arena, Problems& problems, bool legacyPersistentIds, std::size_t pickleBytes)
        : a_(arena), problems_(problems), legacyPersistentIds_(legacyPersistentIds), pickleBytes_(pickleBytes),
          knownBase_(arena.globals.size())
    {
        arena.tensors.reserve(arena.tensors.size() + pickleBytes / 256);  // a v2 call takes ~130 bytes
    }

    ValueId global(GlobalRef g);
    std::optional<ValueId> call(ValueId callable, ValueId args, ValueId kwargs, ObjectForm form);
    bool build(ValueId target, ValueId state);
    ValueId persistentLoad(ValueId pid);

private:
    struct Seen {
        std::uint32_t index;
        ValueId value;
    };

    bool fail(ErrorCode code, std::string message) { return problems_.fail(code, std::move(message)); }
    void warn(std::string w) { problems_.warn(std::move(w)); }
    [[nodiscard]] const Value& val(ValueId id) const { return a_[id]; }
    [[nodiscard]] Kind kindOf(ValueId id) const { return a_[id].kind; }

    Known knownOf(ValueId id);
    std::optional<ValueId> callKnown(Known k, ValueId callable, ValueId args, ObjectForm form);
    std::optional<ValueId> rebuildStrided(Known k, ValueId callable, ValueId args);
    std::optional<ValueId> rebuildOther(Known k, ValueId callable, ValueId args);
    std::optional<ValueId> rebuildParameter(Known k, ValueId args);
    std::optional<ValueId> rebuildFromType(ValueId args);
    std::optional<ValueId> constructLegacy(Known k, ValueId args);
    bool legacySetState(TensorInfo& t, ValueId state);
    bool validateGeometry(const std::string& fn, TensorInfo& t);
    bool legacyTensorBuild(ValueId target, ValueId state);
    bool legacyVariableBuild(ValueId target, ValueId state, Known k);
    // The object value `target` is, from now on, the tensor `t` (what BUILD made of it).
    void becomeTensor(ValueId target, TensorInfo t)
    {
        const auto index = static_cast<std::int64_t>(a_.tensors.size());
        a_.tensors.push_back(std::move(t));
        Value& v = a_[target];
        v.kind = Kind::Tensor;
        v.i = index;
    }
    // Parameter(data, requires_grad) keeps the flag as the Parameter's; Variable(...) as the tensor's.
    static void setLegacyGrad(TensorInfo& t, Known k, bool requiresGrad)
    {
        if (k == Known::ParameterClass) {
            t.isParameter = true;
            t.parameterRequiresGrad = requiresGrad;
        } else {
            t.requiresGrad = requiresGrad;
        }
    }
    bool buildTensor(ValueId target, ValueId state);

    // Argument helpers for rebuild calls: false when the argument is not of that type.
    bool intArg(ValueId id, std::int64_t& out) const
    {
        const Value& v = a_[id];
        if (v.kind == Kind::Int) {
            out = v.i;
            return true;
        }
        if (v.kind == Kind::Bool) {  // Python bools are ints
            out = v.flag ? 1 : 0;
            return true;
        }
        return false;
    }
    bool boolArg(ValueId id, bool& out) const
    {
        const Value& v = a_[id];
        if (v.kind == Kind::Bool || v.kind == Kind::Int) {
            out = v.kind == Kind::Bool ? v.flag : v.i != 0;
            return true;
        }
        return false;
    }
    template <typename Dims>  // std::vector or SmallVector
    bool dimsArg(ValueId id, Dims& out) const
    {
        const Value& v = a_[id];
        if (v.kind != Kind::Tuple && v.kind != Kind::Size && v.kind != Kind::List) {
            return false;
        }
        out.clear();
        out.reserve(v.items.size());
        for (ValueId item : v.items) {
            std::int64_t d = 0;
            if (!intArg(item, d)) {
                return false;
            }
            out.push_back(d);
        }
        return true;
    }
    std::string textArg(ValueId id) const
    {
        const Value& v = a_[id];
        return v.kind == Kind::Str || v.kind == Kind::Bytes ? v.text.str() : std::string();
    }

    Arena& a_;
    Problems& problems_;
    bool legacyPersistentIds_;
    std::size_t pickleBytes_;
    // Globals made before this pickle (a legacy file's earlier ones) are classified each time;
    // this pickle's own are classified once.
    std::size_t knownBase_;
    std::vector<Known> knownCache_;
    std::unordered_map<std::string, Seen> storageByKey_;
    bool storageByKeyBuilt_ = false;
};

ValueId TorchGlobals::Impl::global(GlobalRef g)
{
    if (g.module == "torch") {
        // Only the canonical spelling is a dtype: `torch.complex` and friends are functions.
        if (auto t = dtypeFromName(g.name); t && dtypeName(*t) == g.name) {
            return a_.dtype(*t);
        }
    }
    return a_.global(std::move(g));
}

Known TorchGlobals::Impl::knownOf(ValueId id)
{
    const Value& v = a_[id];
    if (v.kind != Kind::Global) {
        return Known::Other;
    }
    const auto gi = static_cast<std::size_t>(v.i);
    if (gi < knownBase_) {
        return classify(a_.globals[gi]);
    }
    const std::size_t slot = gi - knownBase_;
    while (knownCache_.size() <= slot) {
        knownCache_.push_back(classify(a_.globals[knownBase_ + knownCache_.size()]));
    }
    return knownCache_[slot];
}

std::optional<ValueId> TorchGlobals::Impl::call(ValueId callable, ValueId args, ValueId kwargs, ObjectForm form)
{
    const Known k = knownOf(callable);
    const bool noKwargs = !kwargs.valid() || (kindOf(kwargs) == Kind::Dict && val(kwargs).items.empty());
    if (k == Known::Other || kindOf(args) != Kind::Tuple || !noKwargs) {
        return std::nullopt;
    }
    return callKnown(k, callable, args, form);
}

std::optional<ValueId> TorchGlobals::Impl::callKnown(Known k, ValueId callable, ValueId args, ObjectForm form)
{
    std::span<const ValueId> av = val(args).items;
    if (av.size() > kMaxKnownArgs) {
        return std::nullopt;
    }
    const std::size_t n = av.size();
    const bool isNew = form == ObjectForm::NewObj || form == ObjectForm::NewObjEx;
    switch (k) {
    case Known::OrderedDict: {
        if (isNew || n == 0) {
            return a_.dict({}, true);
        }
        if (n != 1 || (kindOf(av[0]) != Kind::List && kindOf(av[0]) != Kind::Tuple)) {
            return std::nullopt;
        }
        std::vector<ValueId> kv;
        for (ValueId pair : val(av[0]).items) {
            const Value& p = val(pair);
            if ((p.kind != Kind::Tuple && p.kind != Kind::List) || p.items.size() != 2) {
                return std::nullopt;
            }
            kv.push_back(p.items[0]);
            kv.push_back(p.items[1]);
        }
        return a_.dict(std::move(kv), true);
    }
    case Known::Size: {
        std::vector<std::int64_t> dims;
        if (isNew || n > 1 || (n == 1 && !dimsArg(av[0], dims))) {
            return std::nullopt;
        }
        Value v;
        v.kind = Kind::Size;
        if (n == 1) {
            v.items = val(av[0]).items;
        }
        return a_.add(std::move(v));
    }
    case Known::Device: {
        if (isNew || n < 1 || n > 2 || kindOf(av[0]) != Kind::Str) {
            return std::nullopt;
        }
        std::string type = val(av[0]).text;
        std::int64_t index = -1;
        if (n == 2) {
            if (kindOf(av[1]) == Kind::None) {
                index = -1;
            } else if (kindOf(av[1]) != Kind::Int || val(av[1]).i < 0) {
                return std::nullopt;
            } else {
                index = val(av[1]).i;
            }
        } else {
            auto name = parseDeviceName(type);  // torch.device('cuda:1')
            if (!name) {
                return std::nullopt;
            }
            type = std::move(name->type);
            index = name->index.value_or(-1);
        }
        if (type.empty()) {
            return std::nullopt;
        }
        Value v;
        v.kind = Kind::Device;
        v.text = type;
        v.i = index;
        return a_.add(std::move(v));
    }
    case Known::CodecsEncode: {
        if (isNew || n != 2 || kindOf(av[0]) != Kind::Str || kindOf(av[1]) != Kind::Str) {
            return std::nullopt;
        }
        std::string raw;
        if (!detail::encodeText(val(av[0]).text, val(av[1]).text, raw)) {
            return std::nullopt;  // an encoding we do not model stays a call
        }
        return a_.bytes(std::move(raw));
    }
    case Known::BytesType:
        if (isNew || n != 0) {
            return std::nullopt;
        }
        return a_.bytes({});
    case Known::ByteArray: {
        if (isNew) {
            return std::nullopt;
        }
        std::string raw;
        if (n == 1 && kindOf(av[0]) == Kind::Bytes) {
            raw = val(av[0]).text;
        } else if (n == 2 && kindOf(av[0]) == Kind::Str && kindOf(av[1]) == Kind::Str) {
            if (!detail::encodeText(val(av[0]).text, val(av[1]).text, raw)) {
                return std::nullopt;
            }
        } else if (n != 0) {
            return std::nullopt;
        }
        ValueId b = a_.bytes(std::move(raw));
        a_[b].flag = true;
        return b;
    }
    case Known::SetType:
    case Known::FrozenSetType: {
        Value v;
        v.kind = Kind::Set;
        v.flag = k == Known::FrozenSetType;
        if (n == 1) {
            const Kind ik = kindOf(av[0]);
            if (ik != Kind::List && ik != Kind::Tuple && ik != Kind::Set) {
                return std::nullopt;
            }
            v.items = val(av[0]).items;
        } else if (n != 0) {
            return std::nullopt;
        }
        return a_.add(std::move(v));
    }
    case Known::RebuildTensor:
    case Known::RebuildTensorV2:
    case Known::RebuildTensorV3:
    case Known::RebuildQTensor:
        if (isNew) {
            return std::nullopt;
        }
        return rebuildStrided(k, callable, args);
    case Known::RebuildParameter:
    case Known::RebuildParameterWithState:
        if (isNew) {
            return std::nullopt;
        }
        return rebuildParameter(k, args);
    case Known::RebuildFromTypeV2:
        if (isNew) {
            return std::nullopt;
        }
        return rebuildFromType(args);
    case Known::ParameterClass:
    case Known::VariableClass:
        if (form != ObjectForm::Reduce) {
            return std::nullopt;
        }
        return constructLegacy(k, args);
    case Known::RebuildSparse:
    case Known::RebuildSparseCsr:
    case Known::RebuildMeta:
    case Known::RebuildWrapperSubclass:
    case Known::RebuildFromCpu:
    case Known::RebuildFromNumpy:
    case Known::RebuildXla:
    case Known::RebuildNested:
    case Known::RebuildNjt:
        if (isNew) {
            return std::nullopt;
        }
        return rebuildOther(k, callable, args);
    case Known::LegacyTensorClass:
    case Known::Other:
        return std::nullopt;
    }
    return std::nullopt;
}

bool TorchGlobals::Impl::validateGeometry(const std::string& fn, TensorInfo& t)
{
    if (t.shape.size() != t.stride.size()) {
        return fail(ErrorCode::Corrupt, "malformed arguments to " + fn + ": size " + dimsText(t.shape) +
                                            " and stride " + dimsText(t.stride) + " differ in length");
    }
    if (t.storageOffset < 0) {
        return fail(ErrorCode::Corrupt,
                    "malformed arguments to " + fn + ": negative storage offset " + std::to_string(t.storageOffset));
    }
    std::int64_t numel = 1;
    std::int64_t extent = t.storageOffset;
    bool empty = false;
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
        if (t.shape[d] < 0) {
            return fail(ErrorCode::Corrupt,
                        "malformed arguments to " + fn + ": negative dimension in size " + dimsText(t.shape));
        }
        if (t.stride[d] < 0) {
            return fail(ErrorCode::Corrupt, "malformed arguments to " + fn + ": negative stride " + dimsText(t.stride));
        }
        empty = empty || t.shape[d] == 0;
        std::int64_t span = 0;
        if (!checkedMul(numel, t.shape[d], numel) ||
            (t.shape[d] > 0 && (!checkedMul(t.shape[d] - 1, t.stride[d], span) || !checkedAdd(extent, span, extent)))) {
            return fail(ErrorCode::Limit,
                        "shape " + dimsText(t.shape) + " with stride " + dimsText(t.stride) + " overflows in " + fn);
        }
    }
    std::int64_t bytes = 0;
    const auto elem = static_cast<std::int64_t>(std::max<std::uint32_t>(elementSize(t.dtype), 1));
    if (!empty &&
        (!checkedMul(numel, elem, bytes) || !checkedAdd(extent, 1, extent) || !checkedMul(extent, elem, bytes))) {
        return fail(ErrorCode::Limit, "shape " + dimsText(t.shape) + " overflows in " + fn);
    }
    return true;
}

std::optional<ValueId> TorchGlobals::Impl::rebuildStrided(Known k, ValueId callable, ValueId args)
{
    std::span<const ValueId> av = val(args).items;
    const std::size_t n = av.size();
    const GlobalRef& fnRef = globalOf(a_, callable);
    const std::string fn = fnRef.qualified();
    const bool arityOk = (k == Known::RebuildTensor && n == 4) || (k == Known::RebuildTensorV2 && (n == 6 || n == 7)) ||
                         (k == Known::RebuildTensorV3 && (n == 7 || n == 8)) || (k == Known::RebuildQTensor && n == 7);
    if (!arityOk || kindOf(av[0]) != Kind::Storage) {
        warn(fn + " with unexpected arguments kept as an object");
        return std::nullopt;
    }
    TensorInfo t;
    t.form = k == Known::RebuildQTensor ? TensorForm::Quantized : TensorForm::Strided;
    t.rebuild = internGlobal(fnRef);
    t.rawArgs = args;
    t.storage = av[0];
    const StorageRef& st = a_.storages[static_cast<std::size_t>(val(av[0]).i)];
    t.dtype = st.dtype;
    if (!intArg(av[1], t.storageOffset)) {
        fail(ErrorCode::Corrupt,
             "malformed arguments to " + fn + ": storage offset is a " + std::string(kindName(kindOf(av[1]))));
        return std::nullopt;
    }
    if (!dimsArg(av[2], t.shape) || !dimsArg(av[3], t.stride)) {
        fail(ErrorCode::Corrupt, "malformed arguments to " + fn + ": size and stride must be tuples of ints");
        return std::nullopt;
    }
    if (k == Known::RebuildTensorV2 || k == Known::RebuildTensorV3) {
        if (!boolArg(av[4], t.requiresGrad)) {
            fail(ErrorCode::Corrupt,
                 "malformed arguments to " + fn + ": requires_grad is a " + std::string(kindName(kindOf(av[4]))));
            return std::nullopt;
        }
        t.backwardHooks = av[5];
    }
    if (k == Known::RebuildTensorV2 && n == 7) {
        t.metadata = av[6];
    }
    if (k == Known::RebuildTensorV3) {
        if (kindOf(av[6]) != Kind::DType) {
            fail(ErrorCode::Corrupt,
                 "malformed arguments to " + fn + ": the dtype argument is a " + std::string(kindName(kindOf(av[6]))));
            return std::nullopt;
        }
        t.dtype = static_cast<ckpt::DType>(val(av[6]).i);
        if (n == 8) {
            t.metadata = av[7];
        }
    }
    if (k == Known::RebuildQTensor) {
        if (!boolArg(av[5], t.requiresGrad)) {
            fail(ErrorCode::Corrupt,
                 "malformed arguments to " + fn + ": requires_grad is a " + std::string(kindName(kindOf(av[5]))));
            return std::nullopt;
        }
        t.backwardHooks = av[6];
    }
    if (!validateGeometry(fn, t)) {
        return std::nullopt;
    }
    return a_.tensor(std::move(t));
}

std::optional<ValueId> TorchGlobals::Impl::rebuildParameter(Known k, ValueId args)
{
    std::span<const ValueId> av = val(args).items;
    const std::size_t want = k == Known::RebuildParameter ? 3 : 4;
    bool requiresGrad = true;
    if (av.size() != want || kindOf(av[0]) != Kind::Tensor || !boolArg(av[1], requiresGrad)) {
        warn("torch._utils._rebuild_parameter with unexpected arguments kept as an object");
        return std::nullopt;
    }
    TensorInfo t = tensorOf(a_, av[0]);
    t.isParameter = true;
    t.parameterRequiresGrad = requiresGrad;
    t.parameterHooks = av[2];
    if (want == 4) {
        t.parameterState = av[3];
    }
    return a_.tensor(std::move(t));
}

// `Parameter(data[, requires_grad])` and `Variable(data[, requires_grad])` called through REDUCE:
// what torch 0.3 (`(Parameter, (data,))` then a BUILD with the Variable state) and 0.4
// (`(Parameter, (data, requires_grad))`) wrote. Loading runs the constructor, so the result is
// the data tensor, as a Parameter for the first.
std::optional<ValueId> TorchGlobals::Impl::constructLegacy(Known k, ValueId args)
{
    std::span<const ValueId> av = val(args).items;
    bool requiresGrad = k == Known::ParameterClass;
    if (av.empty() || av.size() > 3 || kindOf(av[0]) != Kind::Tensor ||
        (av.size() >= 2 && !boolArg(av[1], requiresGrad))) {
        return std::nullopt;
    }
    TensorInfo t = tensorOf(a_, av[0]);
    setLegacyGrad(t, k, requiresGrad);
    return a_.tensor(std::move(t));
}

std::optional<ValueId> TorchGlobals::Impl::rebuildFromType(ValueId args)
{
    std::span<const ValueId> av = val(args).items;
    if (av.size() != 4 || kindOf(av[0]) != Kind::Global || kindOf(av[2]) != Kind::Tuple) {
        return std::nullopt;
    }
    const Known inner = knownOf(av[0]);
    if (inner == Known::Other || inner == Known::RebuildFromTypeV2 || inner == Known::LegacyTensorClass) {
        return std::nullopt;
    }
    auto made = callKnown(inner, av[0], av[2], ObjectForm::Reduce);
    if (!made || kindOf(*made) != Kind::Tensor) {
        return std::nullopt;
    }
    TensorInfo& t = a_.tensors[static_cast<std::size_t>(val(*made).i)];
    t.subclassType = av[1];
    t.subclassState = av[3];
    return made;
}

std::optional<ValueId> TorchGlobals::Impl::rebuildOther(Known k, ValueId callable, ValueId args)
{
    std::span<const ValueId> av = val(args).items;
    const std::size_t n = av.size();
    TensorInfo t;
    t.rebuild = internGlobal(globalOf(a_, callable));
    t.rawArgs = args;
    const std::string fn = t.rebuild->qualified();
    auto dtypeAt = [&](std::size_t i) {
        return kindOf(av[i]) == Kind::DType ? static_cast<ckpt::DType>(val(av[i]).i) : ckpt::DType::Unknown;
    };
    auto copyFrom = [&](ValueId inner) {
        if (kindOf(inner) != Kind::Tensor) {
            return false;
        }
        const TensorInfo& src = tensorOf(a_, inner);
        t.storage = src.storage;
        t.dtype = src.dtype;
        t.storageOffset = src.storageOffset;
        t.shape = src.shape;
        t.stride = src.stride;
        return true;
    };
    switch (k) {
    case Known::RebuildSparse:
    case Known::RebuildSparseCsr: {
        if (n != 2 || kindOf(av[1]) != Kind::Tuple) {
            return std::nullopt;
        }
        t.form = TensorForm::Sparse;
        std::span<const ValueId> data = val(av[1]).items;
        std::string layout;
        if (kindOf(av[0]) == Kind::Object) {
            const ObjectInfo& lo = objectOf(a_, av[0]);
            if (lo.args.valid() && kindOf(lo.args) == Kind::Tuple && val(lo.args).items.size() == 1) {
                layout = textArg(val(lo.args).items[0]);
            }
        }
        const bool coo = k == Known::RebuildSparse && (layout.empty() || layout.find("coo") != std::string::npos);
        const std::size_t valuesAt = coo ? 1 : 2;
        const std::size_t sizeAt = coo ? 2 : 3;
        if (data.size() > sizeAt) {
            if (kindOf(data[valuesAt]) == Kind::Tensor) {
                t.dtype = tensorOf(a_, data[valuesAt]).dtype;
            }
            if (!dimsArg(data[sizeAt], t.shape)) {
                t.shape.clear();
            }
        }
        break;
    }
    case Known::RebuildMeta: {
        if (n != 4 || !dimsArg(av[1], t.shape) || !dimsArg(av[2], t.stride) || !boolArg(av[3], t.requiresGrad)) {
            return std::nullopt;
        }
        t.form = TensorForm::Meta;
        t.dtype = dtypeAt(0);
        t.device = "meta";
        if (!validateGeometry(fn, t)) {
            return std::nullopt;
        }
        break;
    }
    case Known::RebuildWrapperSubclass: {
        if (n != 8 || !dimsArg(av[2], t.shape) || !dimsArg(av[3], t.stride) || !intArg(av[4], t.storageOffset) ||
            !boolArg(av[7], t.requiresGrad)) {
            return std::nullopt;
        }
        t.form = TensorForm::Wrapper;
        t.dtype = dtypeAt(1);
        if (kindOf(av[6]) == Kind::Device) {
            const Value& d = val(av[6]);
            t.device = d.text + (d.i >= 0 ? ":" + std::to_string(d.i) : std::string());
        } else {
            t.device = textArg(av[6]);
        }
        if (!validateGeometry(fn, t)) {
            return std::nullopt;
        }
        break;
    }
    case Known::RebuildFromCpu:
    case Known::RebuildFromNumpy:
    case Known::RebuildXla: {
        if (n != 4) {
            return std::nullopt;
        }
        t.form = TensorForm::DeviceFromCpu;
        if (k == Known::RebuildFromCpu) {
            if (!copyFrom(av[0])) {
                return std::nullopt;
            }
        } else {
            NumpyInfo np;
            if (decodeNumpy(a_, av[0], np)) {
                t.shape = np.shape;
            }
        }
        if (dtypeAt(1) != ckpt::DType::Unknown) {
            t.dtype = dtypeAt(1);
        }
        if (kindOf(av[2]) == Kind::Device) {
            const Value& d = val(av[2]);
            t.device = d.text + (d.i >= 0 ? ":" + std::to_string(d.i) : std::string());
        } else {
            t.device = textArg(av[2]);
        }
        boolArg(av[3], t.requiresGrad);
        break;
    }
    case Known::RebuildNested: {
        if (n != 4 || !copyFrom(av[0])) {
            return std::nullopt;
        }
        // Kept as its buffer's flat view (the values, in the buffer's dtype); the components'
        // shapes are in the sizes tensor (checkpoint/layout.h).
        t.form = TensorForm::Nested;
        break;
    }
    case Known::RebuildNjt: {
        // NestedTensor.__reduce_ex__ (layout=torch.jagged): _rebuild_njt({"values": buffer,
        // "offsets": ..., "lengths": ..., "_ragged_idx": ..., "_metadata_cache": ..., "requires_grad":
        // ...}). Kept as its values buffer, as a strided nested tensor is; its components come from
        // offsets and lengths (checkpoint/layout.h).
        if (n != 1 || kindOf(av[0]) != Kind::Dict) {
            return std::nullopt;
        }
        const ValueId values = dictGet(a_, val(av[0]).items, "values");
        if (!values.valid() || !copyFrom(values)) {
            return std::nullopt;
        }
        if (const ValueId grad = dictGet(a_, val(av[0]).items, "requires_grad"); grad.valid()) {
            boolArg(grad, t.requiresGrad);
        }
        t.form = TensorForm::Nested;
        break;
    }
    default:
        return std::nullopt;
    }
    return a_.tensor(std::move(t));
}

// Pre-1.0 tensors: `torch.FloatTensor()` (or `torch.Tensor`) then BUILD with the `set_` arguments.
bool TorchGlobals::Impl::legacyTensorBuild(ValueId target, ValueId state)
{
    const ObjectInfo& o = objectOf(a_, target);
    if (o.state.valid() || kindOf(state) != Kind::Tuple) {
        return false;
    }
    std::span<const ValueId> sv = val(state).items;
    if (sv.size() != 4 || kindOf(sv[0]) != Kind::Storage) {
        return false;
    }
    TensorInfo t;
    t.form = TensorForm::Strided;
    t.rebuild = internGlobal(o.callable);
    t.rawArgs = state;
    t.storage = sv[0];
    t.dtype = a_.storages[static_cast<std::size_t>(val(sv[0]).i)].dtype;
    const std::string fn = o.callable.qualified() + " state";
    if (!intArg(sv[1], t.storageOffset) || !dimsArg(sv[2], t.shape) || !dimsArg(sv[3], t.stride)) {
        return fail(ErrorCode::Corrupt, "malformed arguments to " + fn + ": expected (storage, offset, size, stride)");
    }
    if (!validateGeometry(fn, t)) {
        return false;
    }
    becomeTensor(target, std::move(t));
    return true;
}

// PyTorch 0.1's Variable, and Parameter (its subclass then), pickled by plain object reduction:
// NEWOBJ of the class with no arguments, then BUILD with the 5-tuple state `(data, creator,
// backward_hooks, requires_grad, volatile)` (docs/format.md §3.3). Today's Tensor.__setstate__
// still reads it ("legacy serialization of Variable": data is state[0], requires_grad state[3]),
// so torch.load gives the data tensor, as a Parameter for the second; so does this.
bool TorchGlobals::Impl::legacyVariableBuild(ValueId target, ValueId state, Known k)
{
    const ObjectInfo& o = objectOf(a_, target);
    if (o.state.valid() || (o.args.valid() && !val(o.args).items.empty()) || kindOf(state) != Kind::Tuple) {
        return false;
    }
    std::span<const ValueId> sv = val(state).items;
    if (sv.size() != 5 || kindOf(sv[0]) != Kind::Tensor) {
        return false;
    }
    TensorInfo t = tensorOf(a_, sv[0]);
    bool requiresGrad = k == Known::ParameterClass;
    if (!boolArg(sv[3], requiresGrad)) {
        return fail(ErrorCode::Corrupt, "malformed state for torch.Tensor.__setstate__: requires_grad is a " +
                                            std::string(kindName(kindOf(sv[3]))));
    }
    setLegacyGrad(t, k, requiresGrad);
    becomeTensor(target, std::move(t));
    return true;
}

bool TorchGlobals::Impl::build(ValueId target, ValueId state)
{
    switch (kindOf(target)) {
    case Kind::Object: {
        const Known k = classify(objectOf(a_, target).callable);
        if (k == Known::ParameterClass || k == Known::VariableClass) {
            return legacyVariableBuild(target, state, k);
        }
        return k == Known::LegacyTensorClass && legacyTensorBuild(target, state);
    }
    case Kind::Tensor:
        return buildTensor(target, state);
    default:
        return false;
    }
}

// Tensor.__setstate__ (torch/_tensor.py) on a tuple: 4 items are `set_(storage, offset, size,
// stride)` (a legacy Tensor), 5 a legacy Variable `(data, _, hooks, requires_grad, _)`, 3 the
// Variable state `(requires_grad, _, hooks)` that torch 0.3 BUILT onto `Parameter(data)`.
bool TorchGlobals::Impl::legacySetState(TensorInfo& t, ValueId state)
{
    std::span<const ValueId> sv = val(state).items;
    const std::string fn = "torch.Tensor.__setstate__";
    bool requiresGrad = false;
    if (sv.size() == 4) {
        if (kindOf(sv[0]) != Kind::Storage || !intArg(sv[1], t.storageOffset) || !dimsArg(sv[2], t.shape) ||
            !dimsArg(sv[3], t.stride)) {
            return fail(ErrorCode::Corrupt,
                        "malformed arguments to " + fn + ": expected (storage, offset, size, stride)");
        }
        t.storage = sv[0];
        t.dtype = a_.storages[static_cast<std::size_t>(val(sv[0]).i)].dtype;
        t.form = TensorForm::Strided;
        return validateGeometry(fn, t);
    }
    const std::size_t gradAt = sv.size() == 5 ? 3 : 0;
    if (!boolArg(sv[gradAt], requiresGrad)) {
        return fail(ErrorCode::Corrupt,
                    "malformed state for " + fn + ": requires_grad is a " + std::string(kindName(kindOf(sv[gradAt]))));
    }
    if (sv.size() == 5 && kindOf(sv[0]) == Kind::Tensor) {
        const TensorInfo& data = tensorOf(a_, sv[0]);
        t.storage = data.storage;
        t.dtype = data.dtype;
        t.storageOffset = data.storageOffset;
        t.shape = data.shape;
        t.stride = data.stride;
        t.form = data.form;
    }
    if (t.isParameter) {
        t.parameterRequiresGrad = requiresGrad;
    } else {
        t.requiresGrad = requiresGrad;
    }
    return true;
}

bool TorchGlobals::Impl::buildTensor(ValueId target, ValueId state)
{
    TensorInfo& t = a_.tensors[static_cast<std::size_t>(val(target).i)];
    if (kindOf(state) == Kind::Tuple && val(state).items.size() >= 3 && val(state).items.size() <= 5) {
        TensorInfo updated = t;
        if (!legacySetState(updated, state)) {
            return false;
        }
        a_.tensors[static_cast<std::size_t>(val(target).i)] = std::move(updated);
        return true;
    }
    if (t.isParameter) {
        t.parameterState = state;
        return true;
    }
    // What torch >= 2.0 writes as _rebuild_from_type_v2(func, torch.Tensor, args, state).
    t.subclassState = state;
    if (!t.subclassType.valid()) {
        t.subclassType = a_.global(GlobalRef{"torch", "Tensor"});
    }
    return true;
}

ValueId TorchGlobals::Impl::persistentLoad(ValueId pid)
{
    const Value& p = val(pid);
    auto opaque = [&] {
        Value v;
        v.kind = Kind::PersistentId;
        v.items.push_back(pid);
        return a_.add(std::move(v));
    };
    if (p.kind != Kind::Tuple || p.items.empty()) {
        return opaque();
    }
    std::span<const ValueId> items = p.items;
    const std::string tag = textArg(items[0]);
    if (tag == "module" && legacyPersistentIds_ && items.size() == 4 && kindOf(items[1]) == Kind::Global) {
        return items[1];
    }
    // PyTorch 0.1's tar writer names a module class as (class, source_file, source), and
    // legacy_load's persistent_load returns saved_id[0]: the class, which NEWOBJ then builds
    // (docs/format.md §3.3). Nothing is called: the class stays a name.
    if (legacyPersistentIds_ && items.size() == 3 && kindOf(items[0]) == Kind::Global) {
        return items[0];
    }
    const bool shapeOk = items.size() == 5 || (legacyPersistentIds_ && items.size() == 6);
    if (tag != "storage" || !shapeOk) {
        return opaque();
    }
    StorageRef ref;
    const Value& cls = val(items[1]);
    if (cls.kind == Kind::Global) {
        ref.className = globalOf(a_, items[1]).name;
        auto t = dtypeFromStorageClass(ref.className);
        if (!t) {
            warn("persistent id names an unknown storage class " + globalOf(a_, items[1]).qualified());
            return opaque();
        }
        ref.dtype = *t;
        ref.untyped = ref.className == "UntypedStorage" || ref.className == "TypedStorage";
        ref.classInTorch = globalOf(a_, items[1]).module == "torch";
    } else if (cls.kind == Kind::DType) {
        ref.dtype = static_cast<ckpt::DType>(cls.i);
        ref.className = std::string(storageClassName(ref.dtype));
    } else {
        return opaque();
    }
    const Value& key = val(items[2]);
    if (key.kind == Kind::Str || key.kind == Kind::Bytes) {
        ref.key = key.text;
    } else if (key.kind == Kind::Int) {
        ref.key = std::to_string(key.i);
    } else {
        return opaque();
    }
    const Value& loc = val(items[3]);
    std::int64_t numel = 0;
    if ((loc.kind != Kind::Str && loc.kind != Kind::Bytes) || !intArg(items[4], numel) || numel < 0) {
        return opaque();
    }
    ref.location = loc.text;
    ref.numel = static_cast<std::uint64_t>(numel);
    if (items.size() == 6 && kindOf(items[5]) == Kind::Tuple) {
        ref.legacyView = items[5];
    }
    if (!storageByKeyBuilt_) {
        // Built on the first persistent id rather than up front: a legacy file's later pickles
        // (its storage key list) have none, and copying 180k keys for them was a tenth of its read.
        storageByKeyBuilt_ = true;
        storageByKey_.reserve(a_.storages.size() + pickleBytes_ / 256);
        for (std::size_t n = 0; n < a_.storages.size(); ++n) {
            storageByKey_.emplace(a_.storages[n].key, Seen{static_cast<std::uint32_t>(n), {}});
        }
    }
    auto it = storageByKey_.find(ref.key);
    if (it == storageByKey_.end()) {
        const auto index = static_cast<std::uint32_t>(a_.storages.size());
        a_.charge(sizeof(StorageRef) + 2 * (ref.key.size() + sizeof(Seen)) + ref.location.size());
        a_.storages.push_back(std::move(ref));
        const ValueId v = a_.storage(index);
        storageByKey_.emplace(a_.storages[index].key, Seen{index, v});
        return v;
    }
    StorageRef& known = a_.storages[it->second.index];
    if (known.dtype != ref.dtype || known.numel != ref.numel || known.untyped != ref.untyped) {
        if (!known.conflicting) {
            warn("storage '" + known.key + "' is declared again with another dtype or size");
        }
        known.conflicting = true;
    }
    if (!it->second.value.valid()) {
        it->second.value = a_.storage(it->second.index);
    }
    return it->second.value;
}

TorchGlobals::TorchGlobals(Arena& arena, Problems& problems, bool legacyPersistentIds, std::size_t pickleBytes)
    : impl_(std::make_unique<Impl>(arena, problems, legacyPersistentIds, pickleBytes))
{
}

TorchGlobals::~TorchGlobals() = default;

ValueId TorchGlobals::global(GlobalRef g)
{
    return impl_->global(std::move(g));
}

std::optional<ValueId> TorchGlobals::call(ValueId callable, ValueId args, ValueId kwargs, ObjectForm form)
{
    return impl_->call(callable, args, kwargs, form);
}

bool TorchGlobals::build(ValueId target, ValueId state)
{
    return impl_->build(target, state);
}

ValueId TorchGlobals::persistentLoad(ValueId pid)
{
    return impl_->persistentLoad(pid);
}

}  // namespace ckpt::pickle::detail
