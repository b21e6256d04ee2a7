// Sanitize: callables that run code (os.system & kin) are dropped from every output, whatever the
// options; with --weights-only, every value torch.load(weights_only=True) would refuse (PyTorch
// 2.6's allowlist, transform/allowlist.h) becomes its plain equivalent where that is faithful
// (an object's attribute dict, a numpy scalar's number, a set's items) or is dropped. Each change
// is one plan step naming the value.
#include "checkpoint/state_dict.h"
#include "transform/allowlist.h"
#include "transform/plan_builder.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_map>

namespace ckpt::transform::detail {

namespace {

using pickle::Arena;
using pickle::Kind;
using pickle::Value;
using pickle::ValueId;

enum class Fate : std::uint8_t { Keep, Remove };

// A numpy scalar as the Python number `.item()` gives; false when there is none we can write.
bool numpyScalarValue(Arena& a, const pickle::NumpyInfo& np, Value& out, std::string& typeName)
{
    if (np.dtype.size() < 3) {
        return false;
    }
    const char order = np.dtype[0];
    const char kind = np.dtype[1];
    const int size = std::atoi(np.dtype.c_str() + 2);
    const auto want = static_cast<std::size_t>(size);
    if (np.data.size() != want || size <= 0 || size > 16) {
        return false;
    }
    std::string bytes = np.data;
    if (order == '>') {
        const std::size_t part = kind == 'c' ? want / 2 : want;  // complex: swap each half
        for (std::size_t at = 0; at < want; at += part) {
            std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                         bytes.begin() + static_cast<std::ptrdiff_t>(at + part));
        }
    }
    auto loadU = [&](std::size_t at, std::size_t n) {
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < n; ++i) {
            v |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
        }
        return v;
    };
    auto loadF = [&](std::size_t at, std::size_t n) -> double {
        const std::uint64_t bits = loadU(at, n);
        if (n == 2) {
            return halfToDouble(static_cast<std::uint16_t>(bits));
        }
        if (n == 4) {
            return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
        }
        return std::bit_cast<double>(bits);
    };
    out = Value{};
    switch (kind) {
    case 'b':
        out.kind = Kind::Bool;
        out.flag = loadU(0, want) != 0;
        typeName = "bool";
        return want == 1;
    case 'i': {
        if (want != 1 && want != 2 && want != 4 && want != 8) {
            return false;
        }
        std::uint64_t u = loadU(0, want);
        if (want < 8 && (u >> (8 * want - 1)) != 0) {
            u |= ~0ULL << (8 * want);  // sign-extend
        }
        out.kind = Kind::Int;
        out.i = static_cast<std::int64_t>(u);
        typeName = "int";
        return true;
    }
    case 'u': {
        const std::uint64_t u = loadU(0, want);
        if (want > 8 || u > static_cast<std::uint64_t>(INT64_MAX)) {
            return false;
        }
        out.kind = Kind::Int;
        out.i = static_cast<std::int64_t>(u);
        typeName = "int";
        return true;
    }
    case 'f':
        if (want != 2 && want != 4 && want != 8) {
            return false;
        }
        out.kind = Kind::Float;
        out.f = loadF(0, want);
        typeName = "float";
        return true;
    case 'c': {
        if (want != 8 && want != 16) {
            return false;
        }
        // builtins.complex(re, im): allowlisted since 2.6.
        pickle::ObjectInfo o;
        o.callable = {"builtins", "complex"};
        o.form = pickle::ObjectForm::Reduce;
        o.args = a.tuple({a.real(loadF(0, want / 2)), a.real(loadF(want / 2, want / 2))});
        const ValueId made = a.object(std::move(o));
        out = a[made];
        typeName = "complex";
        return true;
    }
    default:
        return false;
    }
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
        a_[v].items = std::move(*kept);
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

    Expected<std::vector<ValueId>> pairs(const std::vector<ValueId>& items, const std::string& path,
                                         std::uint32_t depth)
    {
        std::vector<ValueId> kept;
        kept.reserve(items.size());
        for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
            const std::string childPath = joinPath(path, pickle::keyText(a_, items[i]));
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
        const std::vector<ValueId> items = object ? a_.objects[objectIndex].listItems : a_[v].items;
        for (std::size_t i = 0; i < items.size(); ++i) {
            auto f = visit(items[i], joinPath(path, std::to_string(i)), "None", depth + 1);
            if (!f) {
                return f.error();
            }
            if (*f == Fate::Remove) {
                const ValueId none = a_.none();
                (object ? a_.objects[objectIndex].listItems : a_[v].items)[i] = none;
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
        a_[v].items = std::move(kept);
        if (weightsOnly_) {
            const bool frozen = a_[v].flag;
            a_[v].kind = Kind::List;
            a_[v].flag = false;
            b_.step(StepKind::Convert, path, frozen ? "frozenset" : "set", "list",
                    frozen ? "frozenset is never allowed by weights_only=True"
                           : "set is allowed by weights_only=True only since PyTorch 2.6");
        }
        return Fate::Keep;
    }

    Expected<Fate> tensor(ValueId v, const std::string& path, std::string_view removedAs)
    {
        auto& t = a_.tensors[static_cast<std::size_t>(a_[v].i)];
        if (t.subclassType.valid() && a_[t.subclassType].kind == Kind::Global) {
            const std::string q = pickle::globalOf(a_, t.subclassType).qualified();
            if (unsafeCallable(q) || (weightsOnly_ && !weightsOnlyAllowed(q))) {
                t.subclassType = {};
                t.subclassState = {};
                b_.step(StepKind::Convert, path, q, "torch.Tensor",
                        "tensor subclass not allowed by torch.load(weights_only=True): kept as a plain tensor");
            }
        }
        if (weightsOnly_ && t.form != pickle::TensorForm::Strided && !weightsOnlyAllowed(t.rebuild.qualified())) {
            return drop(path, t.rebuild.qualified(), removedAs,
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
            std::string shape;
            for (auto d : np.shape) {
                shape += (shape.empty() ? "" : ", ") + std::to_string(d);
            }
            return drop(path, (np.isScalar ? "numpy scalar " : "numpy array ") + np.dtype + " [" + shape + "]",
                        removedAs, "numpy values are not allowed by torch.load(weights_only=True)");
        }
        const bool dictState = o.state.valid() && !objectStateItems(a_, o).empty();
        const bool emptyDictState = o.state.valid() && a_[o.state].kind == Kind::Dict;
        if (dictState || emptyDictState || !o.dictItems.empty()) {
            std::vector<ValueId> items = objectStateItems(a_, o);
            items.insert(items.end(), o.dictItems.begin(), o.dictItems.end());
            Value d;
            d.kind = Kind::Dict;
            d.items = std::move(items);
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
