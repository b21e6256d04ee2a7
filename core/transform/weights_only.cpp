// Sanitize: callables that run code (os.system & kin) are dropped from every output, whatever the
// options; with --weights-only, every value torch.load(weights_only=True) would refuse (PyTorch
// 2.6's allowlist, transform/allowlist.h) becomes its plain equivalent where that is faithful
// (an object's attribute dict, a numpy scalar's number, a set's items) or is dropped. Each change
// is one plan step naming the value.
#include "checkpoint/dtensor.h"
#include "checkpoint/layout.h"
#include "checkpoint/state_dict.h"
#include "pickle/tensor_record.h"
#include "transform/allowlist.h"
#include "transform/plan_builder.h"
#include "util/shape_text.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>

namespace ckpt::transform::detail {

namespace {

using pickle::Arena;
using pickle::Kind;
using pickle::Value;
using pickle::ValueId;

enum class Fate : std::uint8_t { Keep, Remove };

// A numpy scalar as the Python number `.item()` gives (pickle::numpyScalarItem); false when there
// is none we can write.
bool numpyScalarValue(Arena& a, const pickle::NumpyInfo& np, Value& out, std::string& typeName)
{
    const auto item = pickle::numpyScalarItem(np);
    if (!item) {
        return false;
    }
    out = Value{};
    switch (item->type) {
    case pickle::NumpyItem::Type::Bool:
        out.kind = Kind::Bool;
        out.flag = item->boolean;
        typeName = "bool";
        return true;
    case pickle::NumpyItem::Type::Int:
        out.kind = Kind::Int;
        out.i = item->integer;
        typeName = "int";
        return true;
    case pickle::NumpyItem::Type::Float:
        out.kind = Kind::Float;
        out.f = item->real;
        typeName = "float";
        return true;
    case pickle::NumpyItem::Type::Complex: {
        // builtins.complex(re, im): allowlisted since 2.6.
        pickle::ObjectInfo o;
        o.callable = {"builtins", "complex"};
        o.form = pickle::ObjectForm::Reduce;
        o.args = a.tuple({a.real(item->real), a.real(item->imag)});
        const ValueId made = a.object(std::move(o));
        out = a[made];
        typeName = "complex";
        return true;
    }
    }
    return false;
}

// The torch dtype holding a numpy numeric array's values exactly, and the element size numpy
// stores. torch.from_numpy keeps uint16/uint32/uint64 as torch.uint16/uint32/uint64 (PyTorch 2.3+),
// which PyTorch before 2.3 cannot load (no such storage), so uint16 and uint32 widen to int32 and
// int64, which hold every value; uint64 and dates have no such type.
struct NumpyTarget {
    DType dtype = DType::Unknown;
    std::size_t fromSize = 0;
    std::size_t toSize = 0;
    bool isSigned = false;
};

std::optional<NumpyTarget> numpyTarget(const std::string& code)
{
    if (code.size() < 3) {
        return std::nullopt;
    }
    const char kind = code[1];
    const std::string size = code.substr(2);
    auto t = [](DType d, std::size_t from, std::size_t to, bool sign) { return NumpyTarget{d, from, to, sign}; };
    if (kind == 'f') {
        return size == "2"   ? t(DType::Float16, 2, 2, true)
               : size == "4" ? t(DType::Float32, 4, 4, true)
               : size == "8" ? std::optional<NumpyTarget>(t(DType::Float64, 8, 8, true))
                             : std::nullopt;
    }
    if (kind == 'i') {
        return size == "1"   ? t(DType::Int8, 1, 1, true)
               : size == "2" ? t(DType::Int16, 2, 2, true)
               : size == "4" ? t(DType::Int32, 4, 4, true)
               : size == "8" ? std::optional<NumpyTarget>(t(DType::Int64, 8, 8, true))
                             : std::nullopt;
    }
    if (kind == 'u') {
        return size == "1"   ? t(DType::UInt8, 1, 1, false)
               : size == "2" ? t(DType::Int32, 2, 4, false)
               : size == "4" ? std::optional<NumpyTarget>(t(DType::Int64, 4, 8, false))
                             : std::nullopt;
    }
    if (kind == 'b' && size == "1") {
        return t(DType::Bool, 1, 1, false);
    }
    if (kind == 'c') {
        return size == "8"    ? t(DType::Complex64, 8, 8, true)
               : size == "16" ? std::optional<NumpyTarget>(t(DType::Complex128, 16, 16, true))
                              : std::nullopt;
    }
    return std::nullopt;
}

// numpy's bytes (either byte order, any element size) as little-endian torch elements.
std::string toTorchBytes(const pickle::NumpyInfo& np, const NumpyTarget& t)
{
    const std::size_t n = t.fromSize == 0 ? 0 : np.data.size() / t.fromSize;
    const bool big = np.dtype[0] == '>';
    const std::size_t part = np.dtype[1] == 'c' ? t.fromSize / 2 : t.fromSize;  // complex: each half
    std::string out(n * t.toSize, '\0');
    for (std::size_t i = 0; i < n; ++i) {
        std::string e = np.data.substr(i * t.fromSize, t.fromSize);
        if (big) {
            for (std::size_t at = 0; at < e.size(); at += part) {
                std::reverse(e.begin() + static_cast<std::ptrdiff_t>(at),
                             e.begin() + static_cast<std::ptrdiff_t>(at + part));
            }
        }
        std::memcpy(out.data() + i * t.toSize, e.data(), e.size());  // zero-extended: unsigned only widens
    }
    return out;
}

// One element of a numpy string array: '<U' is UCS-4, 'S' is bytes, both padded with zeros.
std::optional<std::string> numpyStringItem(const pickle::NumpyInfo& np, std::size_t index, std::size_t width)
{
    const char kind = np.dtype[1];
    std::string out;
    if (kind == 'S') {
        out = np.data.substr(index * width, width);
        while (!out.empty() && out.back() == '\0') {
            out.pop_back();
        }
        return out;
    }
    const bool big = np.dtype[0] == '>';
    for (std::size_t c = 0; c < width / 4; ++c) {
        std::uint32_t cp = 0;
        for (std::size_t k = 0; k < 4; ++k) {
            const auto byte = static_cast<unsigned char>(np.data[index * width + c * 4 + k]);
            cp |= static_cast<std::uint32_t>(byte) << (8 * (big ? 3 - k : k));
        }
        if (cp == 0) {
            break;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return std::nullopt;
        }
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }
    return out;
}

bool numpyFortranOrder(const Arena& a, ValueId array)
{
    const auto& o = pickle::objectOf(a, array);
    if (!o.state.valid() || a[o.state].kind != Kind::Tuple || a[o.state].items.size() != 5) {
        return false;
    }
    const auto& f = a[a[o.state].items[3]];
    return (f.kind == Kind::Bool && f.flag) || (f.kind == Kind::Int && f.i != 0);
}

class Sanitizer {
public:
    explicit Sanitizer(Builder& b) : b_(b), a_(b.arena()), weightsOnly_(b.opts.weightsOnly) {}

    // `removedAs` is what the container puts in the value's place when it is dropped ("" = the
    // entry goes, "None" = a sequence keeps its length).
    Expected<Fate> visit(ValueId v, const std::string& path, std::string_view removedAs, std::uint32_t depth)
    {
        if (!v.valid()) {
            return Fate::Keep;
        }
        if (depth > kMaxRewriteDepth) {
            // Keeping what lies deeper would write it unchecked, code-running globals included.
            return tooDeepToRewrite();
        }
        if (auto it = memo_.find(v.v); it != memo_.end()) {
            return it->second;
        }
        memo_[v.v] = Fate::Keep;  // provisional, for values that contain themselves
        auto fate = handle(v, path, removedAs, depth);
        if (fate) {
            memo_[v.v] = *fate;
        }
        return fate;
    }

private:
    Fate drop(const std::string& path, std::string before, std::string_view removedAs, std::string why)
    {
        b_.step(StepKind::Drop, path, std::move(before), std::string(removedAs), std::move(why));
        return Fate::Remove;
    }

    Expected<Fate> handle(ValueId v, const std::string& path, std::string_view removedAs, std::uint32_t depth)
    {
        switch (a_[v].kind) {
        case Kind::Global: {
            const std::string q = pickle::globalOf(a_, v).qualified();
            if (unsafeCallable(q)) {
                return drop(path, q, removedAs, "a reference to a code-running callable is never written");
            }
            if (weightsOnly_ && !weightsOnlyAllowed(q)) {
                return drop(path, q, removedAs, "global not allowed by torch.load(weights_only=True)");
            }
            return Fate::Keep;
        }
        case Kind::Bytes:
            if (weightsOnly_ && !a_[v].flag && a_[v].text.empty()) {
                emptyBytes(v, path);
            }
            return Fate::Keep;
        case Kind::PersistentId:
            if (weightsOnly_) {
                return drop(path, pickle::shortRepr(a_, v), removedAs,
                            "a persistent id that is not a storage: weights_only=True refuses it");
            }
            return Fate::Keep;
        case Kind::Dict:
            return dict(v, path, depth);
        case Kind::List:
        case Kind::Tuple:
            return sequence(v, path, depth);
        case Kind::Set:
            return set(v, path, depth);
        case Kind::Tensor:
            return tensor(v, path, removedAs);
        case Kind::Object:
            return object(v, path, removedAs, depth);
        default:
            return Fate::Keep;
        }
    }

    // b'' pickles as `builtins.bytes()`, which weights_only refuses; `_codecs.encode('', 'latin1')`
    // (how non-empty bytes pickle at protocol 2, allowlisted) loads as the same b''.
    void emptyBytes(ValueId v, const std::string& path)
    {
        pickle::ObjectInfo o;
        o.callable = {"_codecs", "encode"};
        o.form = pickle::ObjectForm::Reduce;
        o.args = a_.tuple({a_.str(""), a_.str("latin1")});
        const ValueId made = a_.object(std::move(o));
        a_[v] = a_[made];
        b_.step(StepKind::Note, path, "b''", "_codecs.encode('', 'latin1')",
                "empty bytes written the way weights_only=True accepts (builtins.bytes is not allowed)");
    }

    Expected<Fate> dict(ValueId v, const std::string& path, std::uint32_t depth)
    {
        const std::vector<ValueId> items = a_[v].items;
        auto kept = pairs(items, path, depth);
        if (!kept) {
            return kept.error();
        }
        a_[v].items = *kept;
        const ValueId attrs = a_[v].attrs;
        auto fate = visit(attrs, path, "", depth + 1);
        if (!fate) {
            return fate.error();
        }
        if (*fate == Fate::Remove) {
            a_[v].attrs = {};
        }
        return Fate::Keep;
    }

    // A class used as a key (Lightning 1.3 keys `callbacks` by the callback class) becomes its
    // qualified name, the key later Lightning writes itself (`state_key`), so the value it holds
    // is kept; unless that name is a key of the same dict already.
    std::optional<ValueId> classKeyAsName(std::span<const ValueId> items, std::size_t at, const std::string& path)
    {
        const ValueId key = items[at];
        if (!weightsOnly_ || a_[key].kind != Kind::Global) {
            return std::nullopt;
        }
        const std::string q = pickle::globalOf(a_, key).qualified();
        if (weightsOnlyAllowed(q) || unsafeCallable(q)) {
            return std::nullopt;
        }
        for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
            if (i != at && a_[items[i]].kind == Kind::Str && a_[items[i]].text == q) {
                return std::nullopt;
            }
        }
        b_.step(StepKind::Convert, path, "class " + q + " (a key)", "'" + q + "'",
                "a class as a dict key is not allowed by torch.load(weights_only=True): keyed by its name");
        return a_.str(q);
    }

    Expected<std::vector<ValueId>> pairs(std::vector<ValueId> items, const std::string& path, std::uint32_t depth)
    {
        std::vector<ValueId> kept;
        kept.reserve(items.size());
        for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
            const std::string childPath = joinPath(path, pickle::keyText(a_, items[i]));
            if (auto named = classKeyAsName(items, i, childPath)) {
                items[i] = *named;
            }
            auto kf = visit(items[i], childPath, "", depth + 1);
            if (!kf) {
                return kf.error();
            }
            auto vf =
                *kf == Fate::Remove ? Expected<Fate>(Fate::Remove) : visit(items[i + 1], childPath, "", depth + 1);
            if (!vf) {
                return vf.error();
            }
            if (*kf == Fate::Keep && *vf == Fate::Keep) {
                kept.push_back(items[i]);
                kept.push_back(items[i + 1]);
            }
        }
        return kept;
    }

    // Sequences keep their length: a dropped item becomes None, so positions still mean the same.
    // `object` set: the list is that object's appended items rather than a List/Tuple value.
    Expected<Fate> sequence(ValueId v, const std::string& path, std::uint32_t depth, bool object = false)
    {
        const auto objectIndex = static_cast<std::size_t>(a_[v].i);
        const std::vector<ValueId> items = object ? a_.objects[objectIndex].listItems : a_[v].items.vec();
        for (std::size_t i = 0; i < items.size(); ++i) {
            auto f = visit(items[i], joinPath(path, std::to_string(i)), "None", depth + 1);
            if (!f) {
                return f.error();
            }
            if (*f == Fate::Remove) {
                const ValueId none = a_.none();
                if (object) {
                    a_.objects[objectIndex].listItems[i] = none;
                } else {
                    a_[v].items[i] = none;
                }
            }
        }
        return Fate::Keep;
    }

    Expected<Fate> set(ValueId v, const std::string& path, std::uint32_t depth)
    {
        std::vector<ValueId> kept;
        const std::vector<ValueId> items = a_[v].items;
        for (std::size_t i = 0; i < items.size(); ++i) {
            auto f = visit(items[i], joinPath(path, std::to_string(i)), "", depth + 1);
            if (!f) {
                return f.error();
            }
            if (*f == Fate::Keep) {
                kept.push_back(items[i]);
            }
        }
        a_[v].items = kept;
        // builtins.set is allowlisted since 2.6 (and written as `set([...])`, which its unpickler
        // implements); frozenset never is.
        if (weightsOnly_ && a_[v].flag) {
            a_[v].kind = Kind::List;
            a_[v].flag = false;
            b_.step(StepKind::Convert, path, "frozenset", "list", "frozenset is not allowed by weights_only=True");
        }
        return Fate::Keep;
    }

    Expected<Fate> tensor(ValueId v, const std::string& path, std::string_view removedAs)
    {
        auto& t = a_.tensors[static_cast<std::size_t>(a_[v].i)];
        if (auto parts = dtensor::partsOf(a_, t); weightsOnly_ && parts && parts->local.valid()) {
            // The wrapper has no storage: a plain tensor of the global shape would hold nothing. Its
            // `_local_tensor` is what the file holds, one rank's piece: that is what is written.
            const std::vector<std::int64_t> global(t.shape.begin(), t.shape.end());
            const std::string placed = "(" + dtensor::placementsText(a_, parts->placements) + ")";
            const auto mesh = dtensor::meshShape(a_, parts->mesh);
            t = pickle::TensorInfo(pickle::tensorOf(a_, parts->local));
            const std::vector<std::int64_t> local(t.shape.begin(), t.shape.end());
            b_.step(StepKind::Convert, path, "DTensor " + shapeText(global) + " " + placed,
                    "torch.Tensor " + shapeText(local),
                    "the file holds one rank's piece " + shapeText(local) + " of the global " + shapeText(global) +
                        " (placements " + placed + (mesh ? " on a mesh of " + shapeText(*mesh) : std::string()) +
                        "), written as a plain tensor of that shape: convert the folder of every rank's file for "
                        "the whole tensor");
            return Fate::Keep;
        }
        if (weightsOnly_ && t.form == pickle::TensorForm::Nested && t.rebuild->name == "_rebuild_njt" &&
            jaggedAsStrided(v, path)) {
            return Fate::Keep;
        }
        if (t.subclassType.valid() && a_[t.subclassType].kind == Kind::Global) {
            const std::string q = pickle::globalOf(a_, t.subclassType).qualified();
            if (unsafeCallable(q) || (weightsOnly_ && !weightsOnlyAllowed(q))) {
                t.subclassType = {};
                t.subclassState = {};
                b_.step(StepKind::Convert, path, q, "torch.Tensor",
                        "tensor subclass not allowed by torch.load(weights_only=True): kept as a plain tensor");
            }
        }
        if (weightsOnly_ && t.form != pickle::TensorForm::Strided && !weightsOnlyAllowed(t.rebuild->qualified())) {
            return drop(path, t.rebuild->qualified(), removedAs,
                        "tensor form not allowed by torch.load(weights_only=True)");
        }
        return Fate::Keep;
    }

    Expected<Fate> object(ValueId v, const std::string& path, std::string_view removedAs, std::uint32_t depth)
    {
        const pickle::ObjectInfo o = pickle::objectOf(a_, v);
        const std::string q = o.callable.qualified();
        if (unsafeCallable(q)) {
            return drop(path, q + pickle::shortRepr(a_, o.args, 60), removedAs,
                        "a call that runs code when unpickled: never written, whatever the options");
        }
        if (!weightsOnly_ || weightsOnlyAllowed(q)) {
            return objectParts(v, path, depth);
        }
        if (isModuleObject(a_, v)) {
            // --unwrap reaches every module in containers and in objects that become dicts; one
            // it did not reach (inside a module's own non-state attributes) can only go.
            if (b_.opts.unwrapModules) {
                return drop(path, q, removedAs,
                            "a whole nn.Module outside any state dict --unwrap rebuilds: weights-only output "
                            "cannot hold it");
            }
            return makeError(ErrorCode::Usage, "'" + path + "' is a whole nn.Module (" + q +
                                                   "), which weights-only output cannot hold: add --unwrap");
        }
        pickle::NumpyInfo np;
        if (pickle::decodeNumpy(a_, v, np)) {
            Value number;
            std::string typeName;
            if (np.isScalar && numpyScalarValue(a_, np, number, typeName)) {
                a_[v] = std::move(number);
                b_.step(StepKind::Convert, path, "numpy scalar " + np.dtype, typeName, "the value .item() gives");
                return Fate::Keep;
            }
            if (!np.isScalar) {
                if (auto kept = numpyArray(v, np, path)) {
                    return Fate::Keep;
                }
            }
            return drop(path, (np.isScalar ? "numpy scalar " : "numpy array ") + np.dtype + " " + shapeText(np.shape),
                        removedAs,
                        "numpy values are not allowed by torch.load(weights_only=True) and this dtype has no "
                        "tensor or str form");
        }
        const bool dictState = o.state.valid() && !objectStateItems(a_, o).empty();
        const bool emptyDictState = o.state.valid() && a_[o.state].kind == Kind::Dict;
        if (dictState || emptyDictState || !o.dictItems.empty()) {
            std::vector<ValueId> items = objectStateItems(a_, o);
            items.insert(items.end(), o.dictItems.begin(), o.dictItems.end());
            Value d;
            d.kind = Kind::Dict;
            d.items = items;
            const std::size_t fields = d.items.size() / 2;
            a_[v] = std::move(d);
            std::string detail = "attribute dict of the object (" + std::to_string(fields) + " fields)";
            if (o.args.valid() && !a_[o.args].items.empty()) {
                detail += "; constructor arguments " + pickle::shortRepr(a_, o.args, 60) + " not kept";
            }
            b_.step(StepKind::Convert, path, q, "dict", std::move(detail));
            return dict(v, path, depth);
        }
        if (!o.listItems.empty() && !o.state.valid()) {
            Value l;
            l.kind = Kind::List;
            l.items = o.listItems;
            a_[v] = std::move(l);
            b_.step(StepKind::Convert, path, q, "list", "the items appended to the object");
            return sequence(v, path, depth);
        }
        return drop(path, q, removedAs, "not allowed by torch.load(weights_only=True) and has no plain form");
    }

    // A numeric array becomes a CPU tensor of the same values and shape (as torch.from_numpy
    // gives); a string array becomes nested lists of str (bytes for 'S'). nullopt: no plain form.
    // A tensor the plan made (a numpy array's values, a nested tensor's layout), its storage's bytes
    // held by the plan under `key`.
    ValueId madeTensor(const std::string& key, DType dtype, std::string bytes, const std::vector<std::int64_t>& shape)
    {
        pickle::StorageRef ref;
        ref.key = key;
        ref.location = "cpu";
        ref.dtype = dtype;
        ref.numel = bytes.size() / std::max<std::uint32_t>(1, elementSize(dtype));
        ref.className = std::string(storageClassName(dtype));
        a_.storages.push_back(ref);
        const auto index = static_cast<std::uint32_t>(a_.storages.size() - 1);
        b_.inlineStorages[index] = std::make_shared<const std::string>(std::move(bytes));
        return pickle::contiguousTensor(a_, index, dtype, shape);
    }

    ValueId int64Tensor(const std::string& key, const std::vector<std::int64_t>& values,
                        const std::vector<std::int64_t>& shape)
    {
        std::string bytes(values.size() * sizeof(std::int64_t), '\0');
        for (std::size_t i = 0; i < values.size(); ++i) {
            const auto u = static_cast<std::uint64_t>(values[i]);
            for (std::size_t k = 0; k < sizeof(std::int64_t); ++k) {
                bytes[i * sizeof(std::int64_t) + k] = static_cast<char>((u >> (8 * k)) & 0xFFU);
            }
        }
        return madeTensor(key, DType::Int64, std::move(bytes), shape);
    }

    // A jagged nested tensor (_rebuild_njt), which weights_only=True refuses unless torch._dynamo is
    // imported, written as the strided nested tensor of the same components:
    // `_rebuild_nested_tensor(buffer, sizes, strides, offsets)` (docs/format.md §4.4), which it
    // reads. The buffer is the values flattened, each component the same view of it. False (the
    // caller then drops it) when the values are no contiguous run from their storage's start.
    bool jaggedAsStrided(ValueId v, const std::string& path)
    {
        const TensorEntry entry = entryOf(b_.in, v, path);
        auto comps = nestedComponents(b_.in, entry);
        if (!comps || !entry.contiguous || entry.storageOffset != 0 || !entry.storage.valid()) {
            return false;
        }
        const std::size_t dim = comps->empty() ? 1 : comps->front().shape.size();
        std::vector<std::int64_t> sizes;
        std::vector<std::int64_t> strides;
        std::vector<std::int64_t> offsets;
        for (const auto& comp : *comps) {
            sizes.insert(sizes.end(), comp.shape.begin(), comp.shape.end());
            strides.insert(strides.end(), comp.stride.begin(), comp.stride.end());
            offsets.push_back(comp.offset);
        }
        const auto n = static_cast<std::int64_t>(comps->size());
        const ValueId sizesT = int64Tensor("nested-sizes:" + path, sizes, {n, static_cast<std::int64_t>(dim)});
        const ValueId stridesT = int64Tensor("nested-strides:" + path, strides, {n, static_cast<std::int64_t>(dim)});
        const ValueId offsetsT = int64Tensor("nested-offsets:" + path, offsets, {n});
        auto& t = a_.tensors[static_cast<std::size_t>(a_[v].i)];
        pickle::TensorInfo buffer = t;
        buffer.form = pickle::TensorForm::Strided;
        buffer.rebuild = pickle::internGlobal({"torch._utils", "_rebuild_tensor_v2"});
        buffer.rawArgs = {};
        buffer.subclassType = {};
        buffer.subclassState = {};
        buffer.requiresGrad = false;
        buffer.shape = {static_cast<std::int64_t>(entry.numel)};
        buffer.stride = {1};
        const ValueId bufferT = a_.tensor(std::move(buffer));
        auto& nested = a_.tensors[static_cast<std::size_t>(a_[v].i)];  // a_.tensor may have moved it
        nested.rebuild = pickle::internGlobal({"torch._utils", "_rebuild_nested_tensor"});
        nested.rawArgs = a_.tuple({bufferT, sizesT, stridesT, offsetsT});
        nested.subclassType = {};
        nested.subclassState = {};
        nested.shape = {static_cast<std::int64_t>(entry.numel)};
        nested.stride = {1};
        b_.step(StepKind::Convert, path, "jagged nested tensor (" + std::to_string(n) + " components)",
                "nested tensor (strided layout)",
                "the same components over the same values, in the layout torch.load(weights_only=True) reads "
                "(it refuses jagged ones unless torch._dynamo is imported)");
        return true;
    }

    std::optional<Fate> numpyArray(ValueId v, const pickle::NumpyInfo& np, const std::string& path)
    {
        std::uint64_t count = 1;
        for (auto d : np.shape) {
            if (d < 0) {
                return std::nullopt;
            }
            count *= static_cast<std::uint64_t>(d);
        }
        const std::string before = "numpy array " + np.dtype + " " + shapeText(np.shape);
        const bool fortran = numpyFortranOrder(a_, v);
        if (auto t = numpyTarget(np.dtype)) {
            if (np.data.size() != count * t->fromSize) {
                return std::nullopt;
            }
            auto bytes = std::make_shared<const std::string>(toTorchBytes(np, *t));
            pickle::StorageRef ref;
            ref.key = "numpy:" + path;
            ref.location = "cpu";
            ref.dtype = t->dtype;
            ref.numel = count;
            ref.className = std::string(storageClassName(t->dtype));
            a_.storages.push_back(ref);
            const auto index = static_cast<std::uint32_t>(a_.storages.size() - 1);
            b_.inlineStorages[index] = std::move(bytes);
            pickle::TensorInfo info;
            info.rebuild = pickle::internGlobal({"torch._utils", "_rebuild_tensor_v2"});
            info.storage = a_.storage(index);
            info.dtype = t->dtype;
            info.shape = np.shape;
            info.stride.assign(np.shape.size(), 0);
            std::int64_t step = 1;
            for (std::size_t i = 0; i < np.shape.size(); ++i) {
                const std::size_t d = fortran ? i : np.shape.size() - 1 - i;
                info.stride[d] = step;
                step *= std::max<std::int64_t>(1, np.shape[d]);
            }
            const ValueId made = a_.tensor(std::move(info));
            a_[v] = a_[made];
            refreshStridedArgs(a_, v);
            const std::string to(dtypeName(t->dtype));
            b_.step(StepKind::Convert, path, before, "tensor " + to,
                    t->fromSize == t->toSize
                        ? std::string("the same values, dtype and shape, as torch.from_numpy gives; weights_only=True "
                                      "refuses numpy")
                        : "the same values and shape as " + to + ": torch.from_numpy gives uint" +
                              std::to_string(8 * t->fromSize) +
                              " since PyTorch 2.3, which older PyTorch cannot load, and " + to +
                              " holds every value; weights_only=True refuses numpy");
            return Fate::Keep;
        }
        const char kind = np.dtype.size() > 2 ? np.dtype[1] : '?';
        if (kind != 'U' && kind != 'S') {
            return std::nullopt;
        }
        const auto chars = static_cast<std::size_t>(std::atoll(np.dtype.c_str() + 2));
        const std::size_t width = kind == 'U' ? chars * 4 : chars;
        if (width == 0 ? !np.data.empty() : np.data.size() != count * width) {
            return std::nullopt;
        }
        std::vector<ValueId> flat;
        flat.reserve(count);
        for (std::size_t i = 0; i < count; ++i) {
            auto item = width == 0 ? std::optional<std::string>("") : numpyStringItem(np, i, width);
            if (!item) {
                return std::nullopt;
            }
            flat.push_back(kind == 'U' ? a_.str(std::move(*item)) : a_.bytes(std::move(*item)));
        }
        // Nest by shape (.tolist()): the last dimension innermost, in C order.
        std::vector<ValueId> level = std::move(flat);
        if (fortran && np.shape.size() > 1) {
            return std::nullopt;  // rare; its C-order nesting would need a transpose
        }
        for (std::size_t d = np.shape.size(); d-- > 1;) {
            const auto n = static_cast<std::size_t>(np.shape[d]);
            std::vector<ValueId> outer;
            for (std::size_t at = 0; n > 0 && at < level.size(); at += n) {
                outer.push_back(a_.list(std::vector<ValueId>(level.begin() + static_cast<std::ptrdiff_t>(at),
                                                             level.begin() + static_cast<std::ptrdiff_t>(at + n))));
            }
            level = std::move(outer);
        }
        const ValueId made = np.shape.empty() ? (level.empty() ? a_.str("") : level[0]) : a_.list(std::move(level));
        a_[v] = a_[made];
        b_.step(StepKind::Convert, path, before, kind == 'U' ? "list of str" : "list of bytes",
                "the values .tolist() gives (weights_only=True refuses numpy)");
        return Fate::Keep;
    }

    // A kept object: what it holds is still sanitized (an os.system call hidden in a Namespace).
    Expected<Fate> objectParts(ValueId v, const std::string& path, std::uint32_t depth)
    {
        const pickle::ObjectInfo o = pickle::objectOf(a_, v);
        for (ValueId part : {o.args, o.kwargs}) {
            if (!part.valid()) {
                continue;
            }
            auto f = visit(part, path, "None", depth + 1);
            if (!f) {
                return f.error();
            }
        }
        if (o.state.valid()) {
            auto f = visit(o.state, path, "None", depth + 1);
            if (!f) {
                return f.error();
            }
            if (*f == Fate::Remove) {
                a_.objects[static_cast<std::size_t>(a_[v].i)].state = {};
            }
        }
        if (auto f = sequence(v, path, depth, true); !f) {
            return f.error();
        }
        auto kept = pairs(o.dictItems, path, depth);
        if (!kept) {
            return kept.error();
        }
        a_.objects[static_cast<std::size_t>(a_[v].i)].dictItems = std::move(*kept);
        return Fate::Keep;
    }

    Builder& b_;
    Arena& a_;
    bool weightsOnly_;
    std::unordered_map<std::uint32_t, Fate> memo_;
};

}  // namespace

Expected<void> sanitize(Builder& b)
{
    Sanitizer s(b);
    auto fate = s.visit(b.plan.root, b.rootPath, "", 0);
    if (!fate) {
        return fate.error();
    }
    if (*fate == Fate::Remove) {
        return makeError(ErrorCode::Unsupported, "the value to write ('" + b.rootPath +
                                                     "') itself cannot be kept (see the dropped value above); "
                                                     "nothing would be left to write");
    }
    return {};
}

}  // namespace ckpt::transform::detail
