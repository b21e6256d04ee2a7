// The value tree the restricted unpickler builds and the pickler writes back.
//
// All values of one checkpoint live in an Arena and refer to each other by ValueId, never by
// pointer: pickles share objects through their memo (tied weights, a tensor in both `model` and
// `ema`) and hostile ones can be cyclic or 100k levels deep, so values must be cheap to share,
// safe to cycle, and destroyed without recursion. Nothing here ever calls Python: a GLOBAL the
// unpickler does not know stays an opaque Object that keeps its qualified name, its arguments
// and its BUILD state, so it can be shown, flagged and written back unchanged.
#pragma once

#include "pickle/compact.h"
#include "util/dtype.h"

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::pickle {

struct ValueId {
    std::uint32_t v = std::numeric_limits<std::uint32_t>::max();
    [[nodiscard]] bool valid() const { return v != std::numeric_limits<std::uint32_t>::max(); }
    friend bool operator==(ValueId a, ValueId b) = default;
};

enum class Kind : std::uint8_t {
    None,
    Bool,          // flag
    Int,           // i (fits in int64)
    BigInt,        // text = little-endian two's complement bytes (LONG1/LONG4 beyond 64 bits)
    Float,         // f
    Str,           // text (UTF-8 unless the file's bytes were not); flag = a Python 2 str
                   // (BINSTRING): text is its raw bytes, which torch.load decodes as UTF-8
    Bytes,         // text (raw bytes); flag = bytearray
    Tuple,         // items
    List,          // items
    Dict,          // items = k0, v0, k1, v1, ... in insertion order; flag = collections.OrderedDict;
                   // attrs = the BUILD state (OrderedDict's `{'_metadata': ...}`), if any
    Set,           // items; flag = frozenset
    Global,        // i = index into Arena::globals: a class or function referenced as a value
    DType,         // i = static_cast<int>(ckpt::DType)
    Device,        // text = type ("cuda"), i = index or -1 (torch.device)
    Size,          // items (torch.Size)
    Storage,       // i = index into Arena::storages (a resolved persistent id)
    PersistentId,  // items[0] = a persistent id we do not resolve (tar-era string keys, ints)
    Tensor,        // i = index into Arena::tensors (a recognised rebuild call)
    Object,        // i = index into Arena::objects (anything else that was called or instantiated)
};

using IdList = SmallVector<ValueId>;

// 48 bytes: a 40 000-tensor state dict makes about 400 000 of them. A value is an Int or a Float,
// never both, so the two share their bytes; text and items are the compact containers of
// pickle/compact.h (std::string and std::vector made this 72).
struct Value {
    Kind kind = Kind::None;
    bool flag = false;
    ValueId attrs;
    union {
        std::int64_t i = 0;
        double f;
    };
    Text text;
    IdList items;
};
static_assert(sizeof(Value) == 48);

// A reference to `module.name`, Python-2 names already mapped to Python 3 (`__builtin__` ->
// `builtins`, `copy_reg` -> `copyreg`), as torch's weights-only unpickler does.
struct GlobalRef {
    std::string module;
    std::string name;
    [[nodiscard]] std::string qualified() const { return module + "." + name; }
    friend bool operator<(const GlobalRef& a, const GlobalRef& b)
    {
        return a.module != b.module ? a.module < b.module : a.name < b.name;
    }
};

// The process-wide copy of `g`, kept until exit. Only for recognised rebuild functions, a small
// fixed set, so the table stays a few entries long whatever the files hold. Thread-safe.
[[nodiscard]] const GlobalRef* internGlobal(const GlobalRef& g);
// An empty GlobalRef, for tensors made by hand before their rebuild function is set.
[[nodiscard]] const GlobalRef& noGlobal();

// A storage named by a persistent id: zip `('storage', cls, key, location, numel)`, legacy
// 6-tuple with view metadata. One StorageRef per distinct key; tensors sharing a key share it.
struct StorageRef {
    Text key;
    Text location;  // "cpu", "cuda:3", "mps", ... as saved
    ckpt::DType dtype = ckpt::DType::Unknown;
    std::uint64_t numel = 0;   // elements of dtype (bytes for UntypedStorage)
    bool untyped = false;      // `torch.UntypedStorage` (new dtypes, `_rebuild_tensor_v3`)
    Text className;            // `FloatStorage`, `UntypedStorage`, ...
    ValueId legacyView;        // legacy 6th element (view_key, offset, numel) or invalid
    bool conflicting = false;  // the same key was declared again with another dtype or size
    bool classInTorch = true;  // the class GLOBAL's module is `torch`, not torch.save's `torch.storage`
};
// The storage class as its GLOBAL names it: `torch.FloatStorage`, `torch.storage.UntypedStorage`
// (what torch.save writes for the new dtypes, and the only spelling weights_only allows).
[[nodiscard]] std::string storageClassGlobal(const StorageRef& s);

enum class TensorForm : std::uint8_t {
    Strided,        // _rebuild_tensor / _v2 / _v3, legacy Tensor BUILD
    Quantized,      // _rebuild_qtensor
    Sparse,         // _rebuild_sparse_tensor / _rebuild_sparse_csr_tensor
    Meta,           // _rebuild_meta_tensor_no_storage
    Wrapper,        // _rebuild_wrapper_subclass (no storage)
    DeviceFromCpu,  // _rebuild_device_tensor_from_cpu_tensor / _numpy / _rebuild_xla_tensor
    Nested,         // _rebuild_nested_tensor
};

struct TensorInfo {
    TensorForm form = TensorForm::Strided;
    // The rebuild function as written: one shared copy per distinct function (internGlobal), not
    // a 64-byte GlobalRef and a heap string per tensor.
    const GlobalRef* rebuild = &noGlobal();
    ValueId rawArgs;  // the original argument tuple (kept for exotic forms)
    ValueId storage;  // a Kind::Storage value, invalid for storage-less forms
    ckpt::DType dtype = ckpt::DType::Unknown;
    std::int64_t storageOffset = 0;  // elements
    SmallVector<std::int64_t> shape;
    SmallVector<std::int64_t> stride;
    bool requiresGrad = false;
    ValueId backwardHooks;  // always an empty OrderedDict in practice
    ValueId metadata;       // math bits dict (v2 7th / v3 8th argument), if present
    Text device;            // for storage-less forms ("meta", "xla:0", ...)
    // nn.Parameter wrapping (_rebuild_parameter / _rebuild_parameter_with_state)
    bool isParameter = false;
    bool parameterRequiresGrad = true;
    ValueId parameterHooks;
    ValueId parameterState;  // _with_state 4th argument
    // torch._tensor._rebuild_from_type_v2(func, new_type, args, state)
    ValueId subclassType;  // a Global value, invalid when not wrapped
    ValueId subclassState;
};

enum class ObjectForm : std::uint8_t { Reduce, NewObj, NewObjEx, Inst, Obj };

struct ObjectInfo {
    GlobalRef callable;  // class or function
    ObjectForm form = ObjectForm::Reduce;
    ValueId args;                    // a Tuple value (may be empty)
    ValueId kwargs;                  // NEWOBJ_EX keyword dict, if any
    ValueId state;                   // BUILD argument, if any
    std::vector<ValueId> listItems;  // APPEND/APPENDS onto the object
    std::vector<ValueId> dictItems;  // SETITEM/SETITEMS onto the object: k0, v0, k1, v1, ...
};

class Arena {
public:
    ValueId add(Value v);
    [[nodiscard]] const Value& operator[](ValueId id) const { return blocks_[id.v >> kBlockBits][id.v & kBlockMask]; }
    Value& operator[](ValueId id) { return blocks_[id.v >> kBlockBits][id.v & kBlockMask]; }
    [[nodiscard]] std::size_t size() const { return size_; }
    // Approximate heap bytes held, for the read's memory budget (util/budget.h): every value,
    // string and item list as created, plus what charge() adds for lists that grow later.
    [[nodiscard]] std::uint64_t chargedBytes() const { return charged_; }
    void charge(std::uint64_t bytes) { charged_ += bytes; }

    Arena() = default;
    Arena(const Arena& other);
    Arena& operator=(const Arena& other);
    Arena(Arena&&) noexcept = default;
    Arena& operator=(Arena&&) noexcept = default;
    ~Arena() = default;

    ValueId none();
    ValueId boolean(bool b);
    ValueId integer(std::int64_t n);
    ValueId real(double d);
    ValueId str(Text s);
    ValueId bytes(Text raw);
    ValueId tuple(IdList items);
    ValueId list(IdList items);
    ValueId dict(IdList keyValuePairs, bool ordered);
    ValueId global(GlobalRef g);
    ValueId dtype(ckpt::DType t);
    ValueId tensor(TensorInfo t);
    ValueId object(ObjectInfo o);
    ValueId storage(std::uint32_t storageIndex);

    std::vector<GlobalRef> globals;
    std::vector<StorageRef> storages;
    std::vector<TensorInfo> tensors;
    std::vector<ObjectInfo> objects;

private:
    // Values live in blocks of 4096: growing never moves existing values (a million-value pickle
    // neither copies itself on reallocation nor needs twice its memory) and costs one allocation
    // per block (std::deque's 512-byte nodes would cost one per five values). Nothing to reserve.
    static constexpr std::uint32_t kBlockBits = 12;
    static constexpr std::uint32_t kBlockSize = 1U << kBlockBits;
    static constexpr std::uint32_t kBlockMask = kBlockSize - 1;
    std::vector<std::unique_ptr<Value[]>> blocks_;
    std::size_t size_ = 0;
    std::uint64_t charged_ = 0;
    // None, the bools and the ints from -1 to 256 are made once and shared, as CPython shares
    // them: they are immutable, and a state dict's offsets, sizes, strides and flags were a fifth
    // of its values. Invalid until first made.
    static constexpr std::int64_t kSmallIntMin = -1;
    static constexpr std::int64_t kSmallIntMax = 256;
    ValueId none_;
    std::array<ValueId, 2> bools_{};
    std::array<ValueId, kSmallIntMax - kSmallIntMin + 1> smallInts_{};
};

// Convenience accessors used by every consumer of the tree.
[[nodiscard]] const TensorInfo& tensorOf(const Arena& a, ValueId id);  // id must be Kind::Tensor
[[nodiscard]] const ObjectInfo& objectOf(const Arena& a, ValueId id);  // id must be Kind::Object
[[nodiscard]] const GlobalRef& globalOf(const Arena& a, ValueId id);   // id must be Kind::Global
[[nodiscard]] std::string_view kindName(Kind k);
// The value of string key `key` in a dict's item list (k0, v0, k1, v1, ...): the first such pair,
// or invalid.
[[nodiscard]] ValueId dictGet(const Arena& a, std::span<const ValueId> items, std::string_view key);

// Every value `id` holds directly: items and attributes, a tensor's arguments, storage, metadata
// and subclass state, an object's arguments, state and appended items. Values refer to one another
// by id, so the same child may come twice and a memoized pickle may even hold itself.
[[nodiscard]] std::vector<ValueId> childrenOf(const Arena& a, ValueId id);
// How deep a walk that visits each value once goes below `root`, counted in levels and given up
// once past `limit` (it returns limit + 1 then). Iterative, so a hostile pickle nested 100 000
// deep costs a vector here, not the stack: the recursive rewrites ask this first and refuse
// beyond their limit (frames are several times larger under AddressSanitizer, where 9 000 levels
// overflowed an 8 MiB stack).
[[nodiscard]] std::uint32_t nestingDepth(const Arena& a, ValueId root, std::uint32_t limit);

// A dict key as a key-path component: strings as written, ints in decimal, others in a short
// Python-like repr (`(1, 2)`, `True`, `None`).
[[nodiscard]] std::string keyText(const Arena& a, ValueId key);

// A short Python-like repr of a scalar/small value for display (strings quoted, long lists elided).
[[nodiscard]] std::string shortRepr(const Arena& a, ValueId id, std::size_t maxLen = 80);

// numpy values the unpickler leaves as Objects (`numpy.core.multiarray.scalar`, `_reconstruct` +
// BUILD), decoded without numpy: dtype code (`<f8`), shape, and the raw element bytes.
struct NumpyInfo {
    bool isScalar = false;
    std::string dtype;  // numpy code with byte order, e.g. "<f8", "|b1"
    std::vector<std::int64_t> shape;
    std::string data;  // raw bytes as pickled
};
[[nodiscard]] bool decodeNumpy(const Arena& a, ValueId id, NumpyInfo& out);

// A numpy scalar's number, as `.item()` gives it: what the display shows (`0.7`, not the
// reconstruct arguments) and what the weights-only transform writes in its place. `floatBytes` is
// the scalar's own width (2, 4 or 8), so a float32 can be shown at its own precision.
struct NumpyItem {
    enum class Type : std::uint8_t { Bool, Int, Float, Complex };
    Type type = Type::Int;
    bool boolean = false;
    std::int64_t integer = 0;
    double real = 0;
    double imag = 0;
    int floatBytes = 8;
};
// Empty when the scalar has no Python number (a datetime, a string, a long double, a uint64
// beyond int64, bytes that do not match its dtype).
[[nodiscard]] std::optional<NumpyItem> numpyScalarItem(const NumpyInfo& np);

}  // namespace ckpt::pickle
