#include "pickle/pickler.h"

#include "pickle/compat.h"
#include "pickle/opcodes.h"
#include "pickle/text.h"

#include <bit>
#include <optional>
#include <unordered_map>

namespace ckpt::pickle {
namespace {

constexpr std::uint32_t kNoMemo = 0xFFFFFFFFU;
constexpr std::size_t kBatch = 1000;  // CPython's _BATCHSIZE

// Where a batch of APPENDS/SETITEMS takes its items from.
enum class Source : std::uint8_t { ListItems, DictItems, SetItems, ObjectList, ObjectDict };

// The pickler is iterative like the unpickler: a 100 000-deep list must not overflow the C++
// stack, so every nested save is a task on an explicit stack, executed last-in first-out.
struct Task {
    enum Type : std::uint8_t {
        Save,        // id
        Op,          // a = opcode byte
        Global,      // a = index into Writer::names_
        Put,         // id: memoise (BINPUT/LONG_BINPUT)
        TupleEnd,    // id, a = item count: TUPLEn / TUPLE, or POP + GET if a cycle memoised it meanwhile
        Batch,       // id, sub = Source, a = first item
        TensorCall,  // id, sub = layer: GLOBAL fn, args, REDUCE
        TensorArgs,  // id, sub = layer: the argument tuple of that layer
        EmptyOrderedDict,
        Bool,  // a = 0/1
    } type;
    std::uint8_t sub = 0;
    ValueId id;
    std::uint32_t a = 0;
};

enum Layer : std::uint8_t { kSubclass, kParameter, kBase };

// TUPLE1-3 for short tuples, else MARK ... TUPLE (the MARK is the caller's).
std::uint8_t tupleOp(std::size_t n)
{
    return n > 3 ? std::uint8_t{op::TUPLE} : static_cast<std::uint8_t>(op::TUPLE1 + n - 1);
}

class Writer {
public:
    explicit Writer(const Arena& a) : a_(a), memo_(a.size(), kNoMemo), active_(a.size(), 0) {}

    Expected<std::string> run(ValueId root)
    {
        if (!valid(root)) {
            return makeError(ErrorCode::Internal, "pickler: root value id out of range");
        }
        out_.reserve(64 + a_.size() * 8);
        out_.push_back(static_cast<char>(op::PROTO));
        out_.push_back(2);
        tasks_.push_back(Task{Task::Save, 0, root, 0});
        while (!tasks_.empty() && !error_) {
            const Task t = tasks_.back();
            tasks_.pop_back();
            execute(t);
        }
        if (error_) {
            return *error_;
        }
        out_.push_back(static_cast<char>(op::STOP));
        return std::move(out_);
    }

private:
    [[nodiscard]] bool valid(ValueId id) const { return id.valid() && id.v < a_.size(); }
    void fail(ErrorCode code, std::string message)
    {
        if (!error_) {
            error_ = makeError(code, std::move(message));
        }
    }
    void push(Task::Type type, ValueId id = {}, std::uint32_t a = 0, std::uint8_t sub = 0)
    {
        tasks_.push_back(Task{type, sub, id, a});
    }
    void pushSave(ValueId id) { push(Task::Save, id); }
    void pushOp(std::uint8_t code) { push(Task::Op, {}, code); }

    // ---- primitive writers --------------------------------------------------------------------
    void byte(std::uint8_t b) { out_.push_back(static_cast<char>(b)); }
    void le(std::uint64_t v, int width)
    {
        for (int n = 0; n < width; ++n) {
            out_.push_back(static_cast<char>((v >> (8 * n)) & 0xFFU));
        }
    }
    void writeInt(std::int64_t v)
    {
        if (v >= 0 && v <= 0xFF) {
            byte(op::BININT1);
            le(static_cast<std::uint64_t>(v), 1);
        } else if (v >= 0 && v <= 0xFFFF) {
            byte(op::BININT2);
            le(static_cast<std::uint64_t>(v), 2);
        } else if (v >= -0x80000000LL && v <= 0x7FFFFFFFLL) {
            byte(op::BININT);
            le(static_cast<std::uint64_t>(v), 4);
        } else {
            std::string bytes;
            for (int n = 0; n < 8; ++n) {
                bytes.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * n)) & 0xFFU));
            }
            writeLong(detail::normalizeLong(bytes));
        }
    }
    void writeLong(std::string_view bytes)
    {
        if (bytes.size() < 256) {
            byte(op::LONG1);
            le(bytes.size(), 1);
        } else {
            byte(op::LONG4);
            le(bytes.size(), 4);
        }
        out_.append(bytes);
    }
    void writeFloat(double d)
    {
        byte(op::BINFLOAT);
        const auto bits = std::bit_cast<std::uint64_t>(d);
        for (int n = 7; n >= 0; --n) {
            out_.push_back(static_cast<char>((bits >> (8 * n)) & 0xFFU));
        }
    }
    void writeStr(std::string_view s)
    {
        if (s.size() > 0xFFFFFFFFULL) {
            fail(ErrorCode::Limit, "a string of " + std::to_string(s.size()) + " bytes does not fit protocol 2");
            return;
        }
        byte(op::BINUNICODE);
        le(s.size(), 4);
        out_.append(s);
    }
    void writeMemo(std::uint32_t index, bool get)
    {
        if (index < 256) {
            byte(get ? op::BINGET : op::BINPUT);
            le(index, 1);
        } else {
            byte(get ? op::LONG_BINGET : op::LONG_BINPUT);
            le(index, 4);
        }
    }
    void put(ValueId id)
    {
        memo_[id.v] = nextMemo_;
        active_[id.v] = 0;
        writeMemo(nextMemo_++, false);
    }
    // GLOBAL in the Python-2 spelling CPython writes at protocol 2; memoised by name, as CPython
    // memoises the class object, so 40 000 tensors cost one `_rebuild_tensor_v2` line.
    std::uint32_t nameIndex(std::string module, std::string name)
    {
        if (module.find('\n') != std::string::npos || name.find('\n') != std::string::npos) {
            // GLOBAL is line-based; such a name (possible through STACK_GLOBAL) cannot be written
            fail(ErrorCode::Unsupported, "global name with a line break cannot be written at protocol 2");
            module.clear();
            name.clear();
        }
        detail::mapToPython2(module, name);
        std::string key = module + '\n' + name;
        auto [it, inserted] = nameIndex_.try_emplace(std::move(key), static_cast<std::uint32_t>(names_.size()));
        if (inserted) {
            names_.push_back(Name{std::move(module), std::move(name), kNoMemo});
        }
        return it->second;
    }
    void writeGlobal(std::uint32_t index)
    {
        Name& n = names_[index];
        if (n.memo != kNoMemo) {
            writeMemo(n.memo, true);
            return;
        }
        byte(op::GLOBAL);
        out_ += n.module;
        out_.push_back('\n');
        out_ += n.name;
        out_.push_back('\n');
        n.memo = nextMemo_;
        writeMemo(nextMemo_++, false);
    }
    void writeGlobal(std::string module, std::string name)
    {
        writeGlobal(nameIndex(std::move(module), std::move(name)));
    }
    void writeEmptyOrderedDict()
    {
        writeGlobal("collections", "OrderedDict");
        byte(op::EMPTY_TUPLE);
        byte(op::REDUCE);
    }
    void writeIntTuple(const std::vector<std::int64_t>& dims)
    {
        if (dims.empty()) {
            byte(op::EMPTY_TUPLE);
            return;
        }
        if (dims.size() > 3) {
            byte(op::MARK);
        }
        for (std::int64_t d : dims) {
            writeInt(d);
        }
        byte(tupleOp(dims.size()));
    }
    void writeStorage(const Value& v)
    {
        if (v.i < 0 || static_cast<std::size_t>(v.i) >= a_.storages.size()) {
            fail(ErrorCode::Internal, "pickler: storage index out of range");
            return;
        }
        const StorageRef& s = a_.storages[static_cast<std::size_t>(v.i)];
        std::string cls = s.className;
        if (s.untyped) {
            cls = "UntypedStorage";  // written as torch.save writes it, whatever module was read
        } else if (cls.empty() || dtypeFromStorageClass(cls) != s.dtype) {
            cls = std::string(storageClassName(s.dtype));
        }
        if (cls.empty()) {
            fail(ErrorCode::Unsupported, "storage '" + s.key + "' of dtype " + std::string(dtypeName(s.dtype)) +
                                             " has no typed storage class; mark it untyped");
            return;
        }
        byte(op::MARK);
        writeStr("storage");
        // torch.save names the class by its __module__; 2.6+'s weights_only allowlist knows
        // `torch.storage.UntypedStorage` only (docs/format.md §5.2).
        writeGlobal(s.untyped ? "torch.storage" : "torch", cls);
        writeStr(s.key);
        writeStr(s.location);
        writeInt(static_cast<std::int64_t>(s.numel));
        byte(op::TUPLE);
        byte(op::BINPERSID);
    }
    void writeBytes(const Value& v)
    {
        if (v.text.empty()) {
            writeGlobal("builtins", "bytes");
            byte(op::EMPTY_TUPLE);
            byte(op::REDUCE);
            return;
        }
        std::string latin;
        latin.reserve(v.text.size() * 2);
        for (char c : v.text) {
            detail::appendUtf8(latin, static_cast<unsigned char>(c));
        }
        writeGlobal("_codecs", "encode");
        writeStr(latin);
        writeStr("latin1");
        byte(op::TUPLE2);
        byte(op::REDUCE);
    }

    // ---- tasks --------------------------------------------------------------------------------
    void execute(const Task& t)
    {
        switch (t.type) {
        case Task::Save:
            save(t.id);
            break;
        case Task::Op:
            byte(static_cast<std::uint8_t>(t.a));
            break;
        case Task::Global:
            writeGlobal(t.a);
            break;
        case Task::Put:
            put(t.id);
            break;
        case Task::TupleEnd:
            tupleEnd(t.id, t.a);
            break;
        case Task::Batch:
            batch(t.id, static_cast<Source>(t.sub), t.a);
            break;
        case Task::TensorCall:
            tensorCall(t.id, static_cast<Layer>(t.sub));
            break;
        case Task::TensorArgs:
            tensorArgs(t.id, static_cast<Layer>(t.sub));
            break;
        case Task::EmptyOrderedDict:
            writeEmptyOrderedDict();
            break;
        case Task::Bool:
            byte(t.a != 0 ? op::NEWTRUE : op::NEWFALSE);
            break;
        }
    }

    // Values whose memo is written after their parts (tuples, objects, tensors) could meet
    // themselves while their parts are written; only tuples can (CPython's POP/GET trick).
    bool enter(ValueId id, std::string_view what)
    {
        if (active_[id.v] != 0) {
            fail(ErrorCode::Unsupported,
                 std::string(what) + " contains itself in its own arguments; it cannot be pickled");
            return false;
        }
        active_[id.v] = 1;
        return true;
    }

    void save(ValueId id)
    {
        if (!valid(id)) {
            fail(ErrorCode::Internal, "pickler: value id out of range");
            return;
        }
        if (memo_[id.v] != kNoMemo) {
            writeMemo(memo_[id.v], true);
            return;
        }
        const Value& v = a_[id];
        switch (v.kind) {
        case Kind::None:
            byte(op::NONE);
            return;
        case Kind::Bool:
            byte(v.flag ? op::NEWTRUE : op::NEWFALSE);
            return;
        case Kind::Int:
            writeInt(v.i);
            return;
        case Kind::BigInt:
            writeLong(v.text);
            return;
        case Kind::Float:
            writeFloat(v.f);
            return;
        case Kind::Str:
            if (v.flag && !detail::isValidUtf8(v.text)) {
                // What torch.load(encoding='latin1') reads a Python 2 str as: a UTF-8 file
                // could not be loaded at all, and numpy turns it back into the same bytes.
                writeStr(detail::decodeByteString(v.text));
            } else {
                writeStr(v.text);
            }
            return;
        case Kind::Bytes:
            if (v.flag) {
                writeGlobal("builtins", "bytearray");
                if (v.text.empty()) {
                    byte(op::EMPTY_TUPLE);
                } else {
                    writeBytes(v);
                    byte(op::TUPLE1);
                }
                byte(op::REDUCE);
            } else {
                writeBytes(v);
            }
            put(id);
            return;
        case Kind::Tuple:
            saveTuple(id, v);
            return;
        case Kind::List:
            byte(op::EMPTY_LIST);
            put(id);
            push(Task::Batch, id, 0, static_cast<std::uint8_t>(Source::ListItems));
            return;
        case Kind::Dict:
            if (v.flag) {
                writeEmptyOrderedDict();
                put(id);
                if (valid(v.attrs) && a_[v.attrs].kind == Kind::Dict) {
                    pushOp(op::BUILD);
                    pushSave(v.attrs);
                }
            } else {
                byte(op::EMPTY_DICT);
                put(id);
            }
            push(Task::Batch, id, 0, static_cast<std::uint8_t>(Source::DictItems));
            return;
        case Kind::Set:
            if (!enter(id, v.flag ? "a frozenset" : "a set")) {
                return;
            }
            writeGlobal("builtins", v.flag ? "frozenset" : "set");
            byte(op::EMPTY_LIST);
            push(Task::Put, id);
            pushOp(op::REDUCE);
            pushOp(op::TUPLE1);
            push(Task::Batch, id, 0, static_cast<std::uint8_t>(Source::SetItems));
            return;
        case Kind::Global: {
            if (v.i < 0 || static_cast<std::size_t>(v.i) >= a_.globals.size()) {
                fail(ErrorCode::Internal, "pickler: global index out of range");
                return;
            }
            const GlobalRef& g = a_.globals[static_cast<std::size_t>(v.i)];
            writeGlobal(g.module, g.name);
            return;
        }
        case Kind::DType:
            writeGlobal("torch", std::string(dtypeName(static_cast<ckpt::DType>(v.i))));
            return;
        case Kind::Device:
            writeGlobal("torch", "device");
            writeStr(v.text);
            if (v.i >= 0) {
                writeInt(v.i);
                byte(op::TUPLE2);
            } else {
                byte(op::TUPLE1);
            }
            byte(op::REDUCE);
            put(id);
            return;
        case Kind::Size:
            if (!enter(id, "a torch.Size")) {
                return;
            }
            writeGlobal("torch", "Size");
            push(Task::Put, id);
            pushOp(op::REDUCE);
            pushOp(op::TUPLE1);
            saveItemsAsTuple(id, v.items.size());
            return;
        case Kind::Storage:
            writeStorage(v);
            return;
        case Kind::PersistentId:
            if (v.items.size() != 1) {
                fail(ErrorCode::Internal, "pickler: persistent id without exactly one item");
                return;
            }
            pushOp(op::BINPERSID);
            pushSave(v.items[0]);
            return;
        case Kind::Tensor:
            saveTensor(id, v);
            return;
        case Kind::Object:
            saveObject(id, v);
            return;
        }
    }

    // The tuple of a value's own items (Size dims): MARK/TUPLEn written around saved items.
    void saveItemsAsTuple(ValueId id, std::size_t n)
    {
        const auto& items = a_[id].items;
        if (n == 0) {
            pushOp(op::EMPTY_TUPLE);
            return;
        }
        pushOp(tupleOp(n));
        for (std::size_t k = n; k-- > 0;) {
            pushSave(items[k]);
        }
        if (n > 3) {
            pushOp(op::MARK);
        }
    }

    void saveTuple(ValueId id, const Value& v)
    {
        const std::size_t n = v.items.size();
        if (n == 0) {
            byte(op::EMPTY_TUPLE);
            return;
        }
        // A tuple can reach itself through a list or dict (memoised before their items); a
        // second re-entry means the cycle runs through something that is not, and never ends.
        if (active_[id.v] >= 2) {
            fail(ErrorCode::Unsupported, "a tuple contains itself through values that cannot be memoised first");
            return;
        }
        ++active_[id.v];
        if (n > 3) {
            byte(op::MARK);
        }
        push(Task::TupleEnd, id, static_cast<std::uint32_t>(n));
        for (std::size_t k = n; k-- > 0;) {
            pushSave(v.items[k]);
        }
    }

    void tupleEnd(ValueId id, std::uint32_t n)
    {
        if (active_[id.v] > 0) {
            --active_[id.v];
        }
        if (memo_[id.v] != kNoMemo) {  // the tuple was completed inside itself: drop this copy
            if (n > 3) {
                byte(op::POP_MARK);
            } else {
                for (std::uint32_t k = 0; k < n; ++k) {
                    byte(op::POP);
                }
            }
            writeMemo(memo_[id.v], true);
            return;
        }
        byte(tupleOp(n));
        put(id);
    }

    std::span<const ValueId> sourceItems(ValueId id, Source s) const
    {
        const Value& v = a_[id];
        switch (s) {
        case Source::ListItems:
        case Source::DictItems:
        case Source::SetItems:
            return v.items;
        case Source::ObjectList:
            return a_.objects[static_cast<std::size_t>(v.i)].listItems;
        case Source::ObjectDict:
            return a_.objects[static_cast<std::size_t>(v.i)].dictItems;
        }
        return {};
    }

    // CPython's _batch_appends/_batch_setitems: chunks of 1000, a lone item as APPEND/SETITEM.
    void batch(ValueId id, Source s, std::uint32_t start)
    {
        std::span<const ValueId> items = sourceItems(id, s);
        const bool pairs = s == Source::DictItems || s == Source::ObjectDict;
        const std::size_t width = pairs ? 2 : 1;
        const std::size_t count = items.size() / width;
        if (start >= count) {
            return;
        }
        const std::size_t end = std::min<std::size_t>(count, start + kBatch);
        if (end < count) {
            push(Task::Batch, id, static_cast<std::uint32_t>(end), static_cast<std::uint8_t>(s));
        }
        const bool lone = end - start == 1;
        pushOp(pairs ? (lone ? op::SETITEM : op::SETITEMS) : (lone ? op::APPEND : op::APPENDS));
        for (std::size_t k = end * width; k-- > start * width;) {
            pushSave(items[k]);
        }
        if (!lone) {
            pushOp(op::MARK);
        }
    }

    // ---- tensors ------------------------------------------------------------------------------
    const TensorInfo* tensorInfo(const Value& v)
    {
        if (v.i < 0 || static_cast<std::size_t>(v.i) >= a_.tensors.size()) {
            fail(ErrorCode::Internal, "pickler: tensor index out of range");
            return nullptr;
        }
        return &a_.tensors[static_cast<std::size_t>(v.i)];
    }

    void saveTensor(ValueId id, const Value& v)
    {
        const TensorInfo* t = tensorInfo(v);
        if (t == nullptr || !enter(id, "a tensor")) {
            return;
        }
        const Layer outer = valid(t->subclassType) ? kSubclass : t->isParameter ? kParameter : kBase;
        push(Task::Put, id);
        push(Task::TensorCall, id, 0, outer);
    }

    bool stridedStorage(const TensorInfo& t, const StorageRef*& s)
    {
        if (!valid(t.storage) || a_[t.storage].kind != Kind::Storage || a_[t.storage].i < 0 ||
            static_cast<std::size_t>(a_[t.storage].i) >= a_.storages.size()) {
            fail(ErrorCode::Unsupported, "a strided tensor without a storage cannot be pickled");
            return false;
        }
        s = &a_.storages[static_cast<std::size_t>(a_[t.storage].i)];
        return true;
    }

    // Strided tensors are written from their fields (so edits to shape/storage show), in torch's
    // current form: v2 for typed storages, v3 (dtype argument) for untyped ones.
    static bool useV3(const TensorInfo& t, const StorageRef& s) { return s.untyped || s.dtype != t.dtype; }

    std::uint32_t layerFunction(const TensorInfo& t, Layer layer)
    {
        switch (layer) {
        case kSubclass:
            return nameIndex("torch._tensor", "_rebuild_from_type_v2");
        case kParameter:
            return nameIndex("torch._utils",
                             valid(t.parameterState) ? "_rebuild_parameter_with_state" : "_rebuild_parameter");
        case kBase:
            if (t.form == TensorForm::Strided) {
                const StorageRef* s = nullptr;
                if (!stridedStorage(t, s)) {
                    return 0;
                }
                return nameIndex("torch._utils", useV3(t, *s) ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
            }
            return nameIndex(t.rebuild->module, t.rebuild->name);
        }
        return 0;
    }

    static Layer innerOf(const TensorInfo& t, Layer layer)
    {
        return layer == kSubclass && t.isParameter ? kParameter : kBase;
    }

    void tensorCall(ValueId id, Layer layer)
    {
        const TensorInfo* t = tensorInfo(a_[id]);
        if (t == nullptr) {
            return;
        }
        const std::uint32_t fn = layerFunction(*t, layer);
        if (error_) {
            return;
        }
        writeGlobal(fn);
        pushOp(op::REDUCE);
        push(Task::TensorArgs, id, 0, layer);
    }

    void tensorArgs(ValueId id, Layer layer)
    {
        const TensorInfo* tp = tensorInfo(a_[id]);
        if (tp == nullptr) {
            return;
        }
        const TensorInfo& t = *tp;
        switch (layer) {
        case kSubclass: {
            // (func, new_type, args, state)
            const Layer inner = innerOf(t, layer);
            const std::uint32_t fn = layerFunction(t, inner);
            if (error_) {
                return;
            }
            byte(op::MARK);
            pushOp(op::TUPLE);
            if (valid(t.subclassState)) {
                pushSave(t.subclassState);
            } else {
                pushOp(op::NONE);
            }
            push(Task::TensorArgs, id, 0, inner);
            pushSave(t.subclassType);
            push(Task::Global, {}, fn);
            return;
        }
        case kParameter:
            // (data, requires_grad, backward_hooks[, state])
            byte(op::MARK);
            pushOp(op::TUPLE);
            if (valid(t.parameterState)) {
                pushSave(t.parameterState);
            }
            push(Task::EmptyOrderedDict);
            push(Task::Bool, {}, t.parameterRequiresGrad ? 1 : 0);
            push(Task::TensorCall, id, 0, kBase);
            return;
        case kBase:
            if (t.form != TensorForm::Strided) {
                if (!valid(t.rawArgs)) {
                    fail(ErrorCode::Unsupported, "a " + t.rebuild->qualified() + " tensor without its arguments");
                    return;
                }
                pushSave(t.rawArgs);
                return;
            }
            const StorageRef* s = nullptr;
            if (!stridedStorage(t, s)) {
                return;
            }
            byte(op::MARK);
            writeStorage(a_[t.storage]);
            writeInt(t.storageOffset);
            writeIntTuple(t.shape);
            writeIntTuple(t.stride);
            byte(t.requiresGrad ? op::NEWTRUE : op::NEWFALSE);
            writeEmptyOrderedDict();
            if (useV3(t, *s)) {
                writeGlobal("torch", std::string(dtypeName(t.dtype)));
            }
            if (valid(t.metadata) && a_[t.metadata].kind == Kind::Dict) {
                pushOp(op::TUPLE);
                pushSave(t.metadata);
            } else {
                byte(op::TUPLE);
            }
            return;
        }
    }

    // ---- objects ------------------------------------------------------------------------------
    void saveObject(ValueId id, const Value& v)
    {
        if (v.i < 0 || static_cast<std::size_t>(v.i) >= a_.objects.size()) {
            fail(ErrorCode::Internal, "pickler: object index out of range");
            return;
        }
        const ObjectInfo& o = a_.objects[static_cast<std::size_t>(v.i)];
        if (!enter(id, "object " + o.callable.qualified())) {
            return;
        }
        // Reverse order: the state and items come after the memo, as in CPython's save_reduce.
        if (valid(o.state)) {
            pushOp(op::BUILD);
            pushSave(o.state);
        }
        push(Task::Batch, id, 0, static_cast<std::uint8_t>(Source::ObjectDict));
        push(Task::Batch, id, 0, static_cast<std::uint8_t>(Source::ObjectList));
        push(Task::Put, id);

        const bool hasArgs = valid(o.args) && !(a_[o.args].kind == Kind::Tuple && a_[o.args].items.empty());
        const bool hasKwargs = valid(o.kwargs) && !(a_[o.kwargs].kind == Kind::Dict && a_[o.kwargs].items.empty());
        bool newobj = o.form == ObjectForm::NewObj || o.form == ObjectForm::NewObjEx;
        if ((o.form == ObjectForm::Inst || o.form == ObjectForm::Obj) && !hasArgs) {
            newobj = true;  // cls() without arguments: what INST/OBJ do for classes
        }
        if (o.form == ObjectForm::NewObjEx && hasKwargs) {
            // cls.__new__(cls, *args, **kwargs) at protocol 2
            writeGlobal("copyreg", "__newobj_ex__");
            writeGlobal(o.callable.module, o.callable.name);
            pushOp(op::REDUCE);
            pushOp(op::TUPLE3);
            pushSave(o.kwargs);
            saveArgs(o.args);
            return;
        }
        writeGlobal(o.callable.module, o.callable.name);
        pushOp(newobj ? op::NEWOBJ : op::REDUCE);
        saveArgs(o.args);
    }

    void saveArgs(ValueId args)
    {
        if (valid(args)) {
            pushSave(args);
        } else {
            pushOp(op::EMPTY_TUPLE);
        }
    }

    struct Name {
        std::string module;
        std::string name;
        std::uint32_t memo;
    };

    const Arena& a_;
    std::string out_;
    std::vector<std::uint32_t> memo_;
    std::vector<std::uint8_t> active_;
    std::uint32_t nextMemo_ = 0;
    std::vector<Name> names_;
    std::unordered_map<std::string, std::uint32_t> nameIndex_;
    std::vector<Task> tasks_;
    std::optional<Error> error_;
};

}  // namespace

Expected<std::string> picklePersistent(const Arena& arena, ValueId root)
{
    Writer w(arena);
    return w.run(root);
}

}  // namespace ckpt::pickle
