// The key tree as a flat table. Nodes are laid out breadth-first so that every node's children
// are contiguous (a tree model answers rowCount/index/parent in O(1)) and parents precede their
// children (subtree totals are one reverse pass). Values reached twice (tied weights, shared
// optimizer params) appear at every path torch.load would give them; a value that is its own
// ancestor becomes a Recursive leaf; limits keep hostile DAG "bombs" bounded.
#include "checkpoint/index.h"

#include "checkpoint/state_dict.h"
#include "checkpoint/tensor_bytes.h"
#include "util/printable.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

namespace ckpt::detail {
namespace {

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

struct Child {
    std::string_view name;
    ValueId value;
};

// Key-path components without copies: a string key is viewed where the arena holds it; other keys
// and list positions are written once into the checkpoint's pool.
class Names {
public:
    explicit Names(Checkpoint& c) : c_(c) {}

    std::string_view key(ValueId k)
    {
        const auto& v = c_.arena[k];
        if (v.kind == Kind::Str) {
            return v.text;
        }
        return c_.names.add(pickle::keyText(c_.arena, k));
    }
    // An entry whose key is a tensor (an optimizer pickled whole keys its state by Parameter):
    // the key is a tensor of the file too, so the entry shows as `<i>.key` and `<i>.value`.
    [[nodiscard]] bool keyIsTensor(ValueId k) const { return c_.arena[k].kind == Kind::Tensor; }
    std::string_view entry(std::size_t i, std::string_view part)
    {
        return c_.names.add(std::to_string(i) + "." + std::string(part));
    }
    std::string_view position(std::size_t i)
    {
        while (positions_.size() <= i) {
            positions_.push_back(c_.names.add(std::to_string(positions_.size())));
        }
        return positions_[i];
    }

private:
    Checkpoint& c_;
    std::vector<std::string_view> positions_;
};

bool isScalarKind(Kind k)
{
    switch (k) {
    case Kind::None:
    case Kind::Bool:
    case Kind::Int:
    case Kind::BigInt:
    case Kind::Float:
    case Kind::Str:
    case Kind::Bytes:
    case Kind::Global:
    case Kind::DType:
    case Kind::Device:
    case Kind::Size:
    case Kind::Storage:
    case Kind::PersistentId:
        return true;
    default:
        return false;
    }
}

// Objects that are values rather than containers: shown as one leaf with their repr.
bool isValueLikeObject(const Arena& a, const pickle::ObjectInfo& o)
{
    const std::string q = o.callable.qualified();
    if (q == "builtins.complex" || q.starts_with("numpy.") || q == "_codecs.encode" || q == "datetime.datetime" ||
        q == "datetime.date" || q == "datetime.timedelta" || q == "decimal.Decimal" || q == "fractions.Fraction" ||
        q == "pathlib.PosixPath" || q == "pathlib.WindowsPath" || q == "pathlib.PurePosixPath" ||
        q == "pathlib.PureWindowsPath" || q == "uuid.UUID") {
        return true;
    }
    (void)a;
    return false;
}

bool hasNonScalar(const Arena& a, ValueId v)
{
    if (!v.valid()) {
        return false;
    }
    const auto& val = a[v];
    if (val.kind == Kind::Tuple || val.kind == Kind::List) {
        return std::any_of(val.items.begin(), val.items.end(), [&](ValueId it) { return !isScalarKind(a[it].kind); });
    }
    return !isScalarKind(val.kind);
}

void appendPairs(Names& names, std::span<const ValueId> kv, std::vector<Child>& out)
{
    out.reserve(out.size() + kv.size() / 2);
    for (std::size_t i = 0; i + 1 < kv.size(); i += 2) {
        if (names.keyIsTensor(kv[i])) {
            out.push_back({names.entry(i / 2, "key"), kv[i]});
            out.push_back({names.entry(i / 2, "value"), kv[i + 1]});
        } else {
            out.push_back({names.key(kv[i]), kv[i + 1]});
        }
    }
}

void appendItems(Names& names, std::span<const ValueId> items, std::vector<Child>& out)
{
    out.reserve(out.size() + items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
        out.push_back({names.position(i), items[i]});
    }
}

// An object's state as if it were a dict: a dict state's items, `(dict, slots)` merged, any
// other state under `__state__`; arguments only when they hold more than scalars.
void objectChildren(const Arena& a, Names& names, const pickle::ObjectInfo& o, std::vector<Child>& out)
{
    if (o.state.valid()) {
        const auto& st = a[o.state];
        if (st.kind == Kind::Dict) {
            appendPairs(names, st.items, out);
        } else if (st.kind == Kind::Tuple && st.items.size() == 2 &&
                   (a[st.items[0]].kind == Kind::Dict || a[st.items[0]].kind == Kind::None) &&
                   (a[st.items[1]].kind == Kind::Dict || a[st.items[1]].kind == Kind::None)) {
            for (ValueId part : st.items) {
                if (a[part].kind == Kind::Dict) {
                    appendPairs(names, a[part].items, out);
                }
            }
        } else if (st.kind != Kind::None) {
            out.push_back({"__state__", o.state});
        }
    }
    if (o.args.valid() && !o.state.valid() && hasNonScalar(a, o.args)) {
        out.push_back({"__args__", o.args});
    }
    appendItems(names, o.listItems, out);
    appendPairs(names, o.dictItems, out);
}

NodeKind classify(const Arena& a, ValueId v)
{
    const auto& val = a[v];
    switch (val.kind) {
    case Kind::Dict:
        return val.flag ? NodeKind::OrderedDict : NodeKind::Dict;
    case Kind::List:
        return NodeKind::List;
    case Kind::Tuple:
        return NodeKind::Tuple;
    case Kind::Set:
        return NodeKind::Set;
    case Kind::Tensor:
        return NodeKind::Tensor;
    case Kind::Object: {
        return isModuleState(a, pickle::objectOf(a, v)) ? NodeKind::Module : NodeKind::Object;
    }
    default:
        return NodeKind::Scalar;
    }
}

void childrenOf(const Arena& a, Names& names, ValueId v, NodeKind kind, std::vector<Child>& out)
{
    out.clear();
    const auto& val = a[v];
    switch (kind) {
    case NodeKind::Dict:
    case NodeKind::OrderedDict:
        appendPairs(names, val.items, out);
        break;
    case NodeKind::List:
    case NodeKind::Tuple:
    case NodeKind::Set:
        appendItems(names, val.items, out);
        break;
    case NodeKind::Module:
    case NodeKind::Object: {
        const auto& o = pickle::objectOf(a, v);
        if (!isValueLikeObject(a, o)) {
            objectChildren(a, names, o, out);
        }
        break;
    }
    default:
        break;
    }
}

bool isStateDictLike(const Arena& a, const Node& n, const IndexedVector<NodeIndex, Node>& nodes)
{
    if (n.kind != NodeKind::Dict && n.kind != NodeKind::OrderedDict) {
        return false;
    }
    std::uint32_t tensors = 0;
    std::uint32_t stringKeys = 0;
    for (std::uint32_t row = 0; row < n.childCount; ++row) {
        tensors += nodes[n.child(row)].kind == NodeKind::Tensor ? 1U : 0U;
    }
    // An optimizer's per-parameter state ({step, exp_avg, exp_avg_sq}) is a dict of tensors too,
    // but not a model's state dict: prefix rules and edits must leave it alone.
    static const std::set<std::string, std::less<>> kOptimizerState{"step",
                                                                    "exp_avg",
                                                                    "exp_avg_sq",
                                                                    "max_exp_avg_sq",
                                                                    "momentum_buffer",
                                                                    "square_avg",
                                                                    "acc_delta",
                                                                    "sum",
                                                                    "mu",
                                                                    "eta",
                                                                    "ax",
                                                                    "prev",
                                                                    "step_size",
                                                                    "exp_inf",
                                                                    "grad_avg",
                                                                    "exp_avg_diff",
                                                                    "neg_pre_grad"};
    std::uint32_t optimizerKeys = 0;
    const auto& items = a[n.value].items;
    for (std::size_t i = 0; i < items.size(); i += 2) {
        const auto& k = a[items[i]];
        stringKeys += k.kind == Kind::Str ? 1U : 0U;
        optimizerKeys += k.kind == Kind::Str && kOptimizerState.contains(k.text) ? 1U : 0U;
    }
    return n.childCount > 0 && stringKeys == n.childCount && tensors * 2 >= n.childCount &&
           optimizerKeys < n.childCount;
}

// The memory the index builds, counted against the read's budget as it grows.
class Usage {
public:
    Usage(MemoryBudget budget, std::uint64_t used) : budget_(budget), used_(used) {}
    // False (and the error set) once `bytes` more would pass the budget.
    bool take(std::uint64_t bytes)
    {
        if (bytes > budget_.limit() || used_ > budget_.limit() - bytes) {
            exceeded_ = true;
            return false;
        }
        used_ += bytes;
        return true;
    }
    [[nodiscard]] bool exceeded() const { return exceeded_; }
    [[nodiscard]] Error error() const { return budget_.exceeded(); }

private:
    MemoryBudget budget_;
    std::uint64_t used_;
    bool exceeded_ = false;
};

// A node's key path, built only when something keeps it (most scalars name no global).
class LazyPath {
public:
    LazyPath(const Checkpoint& c, NodeIndex node, std::uint64_t length, Usage& usage)
        : c_(c), node_(node), length_(length), usage_(usage)
    {
    }
    const std::string* get()
    {
        if (!built_) {
            built_ = true;
            if (usage_.take(length_)) {
                path_ = c_.pathOf(node_);
                ok_ = true;
            }
        }
        return ok_ ? &path_ : nullptr;
    }
    [[nodiscard]] std::uint64_t length() const { return length_; }

private:
    const Checkpoint& c_;
    NodeIndex node_;
    std::uint64_t length_;
    Usage& usage_;
    std::string path_;
    bool built_ = false;
    bool ok_ = false;
};

using GlobalUses = std::map<std::string, std::vector<std::string>>;

void addGlobalUse(GlobalUses& uses, std::string q, LazyPath& lazy, Usage& usage)
{
    auto& paths = uses[std::move(q)];
    if (paths.size() >= 1000) {
        return;
    }
    const std::string* path = lazy.get();
    if (path != nullptr && (paths.empty() || paths.back() != *path) && usage.take(path->size())) {
        paths.push_back(*path);
    }
}

// Which values one collectGlobals call has visited: a stamp per arena value, so a call costs no
// allocation (a std::set per tensor was a sixth of indexing 180k tensors).
// 16-bit stamps, cleared when they wrap (every 65535 walks): one per value of the pickle, so 32-bit
// ones were 1.6 MB of a 40k-tensor read's peak.
struct VisitMarks {
    std::vector<std::uint16_t> stamp;
    std::uint16_t current = 0;
};

// Every GLOBAL a value names, shallowly plus through values that are not nodes of their own
// (an object's arguments, a tensor's rebuild arguments).
void collectGlobals(const Arena& a, ValueId root, LazyPath& path, GlobalUses& uses, Usage& usage, bool deep,
                    VisitMarks& marks)
{
    if (++marks.current == 0) {
        std::fill(marks.stamp.begin(), marks.stamp.end(), 0);
        marks.current = 1;
    }
    std::vector<ValueId> stack{root};
    std::size_t seen = 0;
    while (!stack.empty()) {
        const ValueId v = stack.back();
        stack.pop_back();
        if (!v.valid() || v.v >= marks.stamp.size() || marks.stamp[v.v] == marks.current) {
            continue;
        }
        marks.stamp[v.v] = marks.current;
        if (++seen > 10000) {
            continue;
        }
        const auto& val = a[v];
        const bool top = v == root;
        switch (val.kind) {
        case Kind::Dict:
            if (val.flag) {
                addGlobalUse(uses, "collections.OrderedDict", path, usage);
            }
            if (val.attrs.valid()) {
                stack.push_back(val.attrs);
            }
            if (deep && !top) {
                stack.insert(stack.end(), val.items.begin(), val.items.end());
            }
            break;
        case Kind::Set:
            addGlobalUse(uses, val.flag ? "builtins.frozenset" : "builtins.set", path, usage);
            if (deep && !top) {
                stack.insert(stack.end(), val.items.begin(), val.items.end());
            }
            break;
        case Kind::Bytes:
            addGlobalUse(uses,
                         val.flag ? "builtins.bytearray" : (val.text.empty() ? "builtins.bytes" : "_codecs.encode"),
                         path, usage);
            break;
        case Kind::Global:
            addGlobalUse(uses, pickle::globalOf(a, v).qualified(), path, usage);
            break;
        case Kind::DType:
            addGlobalUse(uses, "torch." + std::string(dtypeName(static_cast<DType>(val.i))), path, usage);
            break;
        case Kind::Device:
            addGlobalUse(uses, "torch.device", path, usage);
            break;
        case Kind::Size:
            addGlobalUse(uses, "torch.Size", path, usage);
            break;
        case Kind::Storage: {
            const auto& s = a.storages.at(static_cast<std::size_t>(val.i));
            addGlobalUse(uses, pickle::storageClassGlobal(s), path, usage);
            break;
        }
        case Kind::Tuple:
        case Kind::List:
            if (deep && !top) {
                stack.insert(stack.end(), val.items.begin(), val.items.end());
            }
            break;
        case Kind::Tensor: {
            const auto& t = pickle::tensorOf(a, v);
            addGlobalUse(uses, t.rebuild->qualified(), path, usage);
            if (t.isParameter) {
                addGlobalUse(uses,
                             t.parameterState.valid() ? "torch._utils._rebuild_parameter_with_state"
                                                      : "torch._utils._rebuild_parameter",
                             path, usage);
            }
            if (t.subclassType.valid()) {
                addGlobalUse(uses, "torch._tensor._rebuild_from_type_v2", path, usage);
                stack.push_back(t.subclassType);
            }
            for (ValueId x : {t.rawArgs, t.storage, t.metadata, t.parameterState, t.subclassState, t.backwardHooks,
                              t.parameterHooks}) {
                if (x.valid()) {
                    stack.push_back(x);
                }
            }
            break;
        }
        case Kind::Object: {
            const auto& o = pickle::objectOf(a, v);
            addGlobalUse(uses, o.callable.qualified(), path, usage);
            for (ValueId x : {o.args, o.kwargs}) {
                if (x.valid()) {
                    stack.push_back(x);
                }
            }
            if (!top || isValueLikeObject(a, o)) {
                if (o.state.valid()) {
                    stack.push_back(o.state);
                }
                stack.insert(stack.end(), o.listItems.begin(), o.listItems.end());
                stack.insert(stack.end(), o.dictItems.begin(), o.dictItems.end());
            }
            break;
        }
        case Kind::PersistentId:
            stack.insert(stack.end(), val.items.begin(), val.items.end());
            break;
        default:
            break;
        }
    }
}

// The Python type a numpy value has once loaded (`numpy.float64`, `numpy.ndarray`), which is
// what users recognise, rather than the reconstructor function that pickled it.
std::string objectTypeName(const Arena& a, ValueId v)
{
    pickle::NumpyInfo np;
    if (pickle::decodeNumpy(a, v, np)) {
        if (!np.isScalar) {
            return "numpy.ndarray";
        }
        static const std::map<std::string, std::string> kScalar{
            {"b1", "bool_"},   {"i1", "int8"},    {"i2", "int16"},     {"i4", "int32"},       {"i8", "int64"},
            {"u1", "uint8"},   {"u2", "uint16"},  {"u4", "uint32"},    {"u8", "uint64"},      {"f2", "float16"},
            {"f4", "float32"}, {"f8", "float64"}, {"c8", "complex64"}, {"c16", "complex128"}, {"f16", "longdouble"}};
        const std::string code = np.dtype.size() > 1 && (np.dtype[0] == '<' || np.dtype[0] == '>' ||
                                                         np.dtype[0] == '|' || np.dtype[0] == '=')
                                     ? np.dtype.substr(1)
                                     : np.dtype;
        const auto it = kScalar.find(code);
        if (it != kScalar.end()) {
            return "numpy." + it->second;
        }
    }
    return pickle::objectOf(a, v).callable.qualified();
}

// Storage-less forms (sparse, quantized wrappers) live where their component tensors' storages do.
std::string componentLocation(const Arena& a, ValueId args)
{
    std::vector<ValueId> stack{args};
    for (std::size_t steps = 0; !stack.empty() && steps < 256; ++steps) {
        const ValueId v = stack.back();
        stack.pop_back();
        if (!v.valid()) {
            continue;
        }
        const auto& val = a[v];
        if (val.kind == Kind::Storage) {
            return a.storages.at(static_cast<std::size_t>(val.i)).location;
        }
        if (val.kind == Kind::Tensor) {
            const auto& t = pickle::tensorOf(a, v);
            stack.push_back(t.storage);
            stack.push_back(t.rawArgs);
        } else if (val.kind == Kind::Tuple || val.kind == Kind::List) {
            stack.insert(stack.end(), val.items.rbegin(), val.items.rend());
        }
    }
    return {};
}

std::uint64_t elementCount(const std::vector<std::int64_t>& shape)
{
    std::uint64_t n = 1;
    for (auto d : shape) {
        n *= static_cast<std::uint64_t>(std::max<std::int64_t>(0, d));
    }
    return n;
}

// Where the strings that are not UTF-8 are: keys, and str values the tree shows. Only run when
// the unpickler met one, so clean files pay nothing.
void findUndecodable(Checkpoint& c)
{
    c.undecodable.paths.clear();
    for (std::uint32_t i = 0; i < c.nodes.size() && c.undecodable.paths.size() < 100; ++i) {
        const Node& n = c.nodes[NodeIndex{i}];
        const auto& v = c.arena[n.value];
        if (!isValidUtf8(n.name) || (v.kind == Kind::Str && !isValidUtf8(v.text))) {
            c.undecodable.paths.push_back(displayText(c.pathOf(NodeIndex{i})));
        }
    }
}

}  // namespace

Expected<void> buildIndex(Checkpoint& c, const IndexLimits& limits)
{
    const Arena& a = c.arena;
    c.nodes.clear();
    c.tensors.clear();
    c.objects.clear();
    c.globals.clear();
    if (!c.root.valid()) {
        return makeError(ErrorCode::Corrupt, "the pickle has no root value");
    }

    Node root;
    root.value = c.root;
    root.kind = classify(a, c.root);
    c.nodes.push_back(root);
    std::vector<std::uint32_t> depth{0};
    std::vector<std::uint64_t> pathLength{0};  // bytes of each node's key path, known before it is built
    std::vector<bool> expanded(a.size(), false);
    std::vector<Child> kids;
    Names names(c);
    Usage usage(limits.budget, a.chargedBytes());
    constexpr std::uint64_t kPerNode = sizeof(Node) + sizeof(std::uint32_t) + sizeof(std::uint64_t);

    // Breadth-first: node i's children are appended together when i is visited.
    for (std::uint32_t i = 0; i < c.nodes.size(); ++i) {
        const NodeIndex ni{i};
        const NodeKind kind = c.nodes[ni].kind;
        if (kind == NodeKind::Tensor || kind == NodeKind::Scalar || kind == NodeKind::Recursive) {
            continue;
        }
        const ValueId v = c.nodes[ni].value;
        if (expanded[v.v]) {
            // Seen before: expand again only if it is not its own ancestor.
            bool cyclic = false;
            for (NodeIndex p = c.nodes[ni].parent; p.valid(); p = c.nodes[p].parent) {
                if (c.nodes[p].value == v) {
                    cyclic = true;
                    break;
                }
            }
            if (cyclic) {
                c.nodes[ni].kind = NodeKind::Recursive;
                continue;
            }
        }
        expanded[v.v] = true;
        const std::uint64_t poolBefore = c.names.bytes();
        childrenOf(a, names, v, kind, kids);
        if (i == 0) {
            for (const auto& [name, value] : c.rootExtras) {
                kids.push_back({name, value});
            }
        }
        if (kids.empty()) {
            continue;
        }
        if (!usage.take(kids.size() * kPerNode + (c.names.bytes() - poolBefore))) {
            return usage.error();
        }
        if (depth[i] + 1 > limits.maxDepth) {
            return makeError(ErrorCode::Limit, "values nest deeper than " + std::to_string(limits.maxDepth) +
                                                   " levels; no real checkpoint does (hostile or corrupt pickle)");
        }
        if (c.nodes.size() + kids.size() > limits.maxNodes) {
            return makeError(ErrorCode::Limit, "the key tree expands to more than " + std::to_string(limits.maxNodes) +
                                                   " entries (shared values referenced exponentially often?)");
        }
        c.nodes[ni].firstChild = c.nodes.nextIndex();
        c.nodes[ni].childCount = static_cast<std::uint32_t>(kids.size());
        for (auto& k : kids) {
            Node n;
            n.parent = ni;
            n.value = k.value;
            n.name = k.name;
            n.kind = classify(a, k.value);
            c.nodes.push_back(n);
            depth.push_back(depth[i] + 1);
            pathLength.push_back(pathLength[i] + (i == 0 ? 0 : 1) + k.name.size());
        }
    }

    // Tensors and objects, in node (breadth-first) order; paths computed once here, and only for
    // what keeps them (a memo bomb's paths would be terabytes: the budget stops it first).
    GlobalUses uses;
    VisitMarks marks;
    marks.stamp.assign(a.size(), 0);
    // The byte ranges tensors reach, all storages in one vector (sorted by storage below): one
    // vector per storage cost an allocation each, and legacy files have one storage per tensor.
    struct Extent {
        StorageIndex storage;
        std::uint64_t begin;
        std::uint64_t end;
    };
    std::vector<Extent> extents;
    extents.reserve(a.tensors.size());
    c.tensors.reserve(a.tensors.size());
    for (std::uint32_t i = 0; i < c.nodes.size(); ++i) {
        const NodeIndex ni{i};
        Node& n = c.nodes[ni];
        const bool needsPath = n.kind == NodeKind::Tensor || n.kind == NodeKind::Module || n.kind == NodeKind::Object ||
                               n.kind == NodeKind::Scalar || n.kind == NodeKind::OrderedDict || n.kind == NodeKind::Set;
        if (!needsPath) {
            continue;
        }
        LazyPath lazy(c, ni, pathLength[i], usage);
        if (n.kind != NodeKind::Tensor) {
            collectGlobals(a, n.value, lazy, uses, usage, n.kind == NodeKind::Object || n.kind == NodeKind::Module,
                           marks);
        }
        const bool kept = n.kind == NodeKind::Tensor || n.kind == NodeKind::Module || n.kind == NodeKind::Object;
        if (usage.exceeded() || (kept && lazy.get() == nullptr)) {
            return usage.error();
        }
        const std::string path = kept ? *lazy.get() : std::string();
        if (n.kind == NodeKind::Tensor) {
            const auto& t = pickle::tensorOf(a, n.value);
            collectGlobals(a, n.value, lazy, uses, usage, true, marks);
            TensorEntry e;
            e.node = ni;
            e.path = path;
            e.value = n.value;
            e.dtype = t.dtype;
            e.shape = t.shape;
            e.stride = t.stride;
            e.storageOffset = t.storageOffset;
            e.numel = elementCount(t.shape);
            e.nbytes = e.numel * elementSize(t.dtype);
            e.requiresGrad = t.isParameter ? t.parameterRequiresGrad : t.requiresGrad;
            e.isParameter = t.isParameter;
            e.form = t.form;
            e.contiguous = isCContiguous(t.shape, t.stride);
            if (t.storage.valid() && a[t.storage].kind == Kind::Storage) {
                e.storage = StorageIndex{static_cast<std::uint32_t>(a[t.storage].i)};
                StorageEntry& s = c.storages.at(e.storage);
                e.location = s.location;
                ++s.tensorCount;
                if (t.form == pickle::TensorForm::Strided && e.numel > 0) {
                    // In the tensor's element size, not the storage's: an UntypedStorage's numel
                    // counts bytes (viewByteExtent).
                    const ByteExtent reach = viewByteExtent(t.dtype, t.storageOffset, t.shape, t.stride);
                    if (reach.end > s.nbytes) {
                        return makeError(ErrorCode::Corrupt, "tensor '" + path + "' reaches byte " +
                                                                 std::to_string(reach.end) + " of storage " + s.key +
                                                                 ", which holds only " + std::to_string(s.nbytes) +
                                                                 " bytes");
                    }
                    extents.push_back({e.storage, reach.begin, reach.end});
                } else if (t.form != pickle::TensorForm::Strided) {
                    extents.push_back({e.storage, 0, s.nbytes});  // exotic forms: count the whole storage
                }
            } else if (!t.device.empty()) {
                e.location = t.device;
            } else if (t.form == pickle::TensorForm::Meta) {
                e.location = "meta";
            } else {
                e.location = componentLocation(a, t.rawArgs);
            }
            n.tensor = c.tensors.nextIndex();
            n.tensorCount = 1;
            n.bytes = e.dataBytes();  // a meta tensor holds none
            c.tensors.push_back(std::move(e));
        } else if (n.kind == NodeKind::Module || n.kind == NodeKind::Object) {
            ObjectEntry o;
            o.node = ni;
            o.path = path;
            o.type = objectTypeName(a, n.value);
            o.isModule = n.kind == NodeKind::Module;
            // Node::object indexes c.objects, not the arena's objects (which also hold the ones no
            // node shows: numpy dtypes, reduce arguments).
            n.object = c.objects.nextIndex();
            c.objects.push_back(std::move(o));
        }
    }

    // Union of the byte ranges tensors reach, per storage. Storages no indexed tensor views
    // (quantizer scales inside rebuild arguments) count as fully reached: they are not waste.
    std::sort(extents.begin(), extents.end(), [](const Extent& x, const Extent& y) {
        return std::tie(x.storage, x.begin, x.end) < std::tie(y.storage, y.begin, y.end);
    });
    std::vector<std::uint64_t> reachedBy(c.storages.size(), 0);
    for (std::size_t i = 0; i < extents.size();) {
        const StorageIndex s = extents[i].storage;
        std::uint64_t reached = 0;
        std::uint64_t curBegin = extents[i].begin;
        std::uint64_t curEnd = extents[i].end;
        for (++i; i < extents.size() && extents[i].storage == s; ++i) {
            if (extents[i].begin > curEnd) {
                reached += curEnd - curBegin;
                curBegin = extents[i].begin;
                curEnd = extents[i].end;
            } else {
                curEnd = std::max(curEnd, extents[i].end);
            }
        }
        reachedBy[s.value()] = reached + (curEnd - curBegin);
    }
    for (std::uint32_t i = 0; i < c.storages.size(); ++i) {
        StorageEntry& s = c.storages[StorageIndex{i}];
        s.reachedBytes = s.tensorCount == 0 ? s.nbytes : reachedBy[i];
    }

    // Subtree totals: children come after parents, so one reverse pass suffices.
    for (auto i = static_cast<std::uint32_t>(c.nodes.size()); i-- > 1;) {
        const Node& n = c.nodes[NodeIndex{i}];
        Node& p = c.nodes[n.parent];
        p.tensorCount += n.tensorCount;
        p.bytes += n.bytes;
    }
    for (auto& n : c.nodes) {
        n.stateDictLike = isStateDictLike(a, n, c.nodes);
    }
    for (auto& [q, paths] : uses) {
        c.globals.push_back({q, std::move(paths)});
    }
    if (c.undecodable.count > 0) {
        findUndecodable(c);
    }
    return {};
}

}  // namespace ckpt::detail
