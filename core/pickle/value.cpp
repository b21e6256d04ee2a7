#include "pickle/value.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <utility>

namespace ckpt::pickle {

const GlobalRef* internGlobal(const GlobalRef& g)
{
    static std::mutex lock;
    static std::set<GlobalRef> table;  // a node per entry: pointers stay valid
    const std::lock_guard<std::mutex> hold(lock);
    return &*table.insert(g).first;
}

const GlobalRef& noGlobal()
{
    static const GlobalRef empty;
    return empty;
}

ValueId Arena::add(Value v)
{
    if ((size_ & kBlockMask) == 0) {
        blocks_.push_back(std::make_unique<Value[]>(kBlockSize));
    }
    const auto id = static_cast<std::uint32_t>(size_++);
    charged_ += sizeof(Value) + v.text.size() + v.items.size() * sizeof(ValueId);
    (*this)[ValueId{id}] = std::move(v);
    return ValueId{id};
}

Arena::Arena(const Arena& other)
    : globals(other.globals), storages(other.storages), tensors(other.tensors), objects(other.objects)
{
    blocks_.reserve(other.blocks_.size());
    for (std::size_t b = 0; b < other.blocks_.size(); ++b) {
        blocks_.push_back(std::make_unique<Value[]>(kBlockSize));
        const std::size_t n = std::min<std::size_t>(kBlockSize, other.size_ - b * kBlockSize);
        std::copy_n(other.blocks_[b].get(), n, blocks_[b].get());
    }
    size_ = other.size_;
    charged_ = other.charged_;
    none_ = other.none_;
    bools_ = other.bools_;
    smallInts_ = other.smallInts_;
}

Arena& Arena::operator=(const Arena& other)
{
    if (this != &other) {
        Arena copy(other);
        *this = std::move(copy);
    }
    return *this;
}

namespace {
Value make(Kind k)
{
    Value v;
    v.kind = k;
    return v;
}
}  // namespace

ValueId Arena::none()
{
    if (!none_.valid()) {
        none_ = add(make(Kind::None));
    }
    return none_;
}

ValueId Arena::boolean(bool b)
{
    ValueId& shared = bools_[b ? 1 : 0];
    if (!shared.valid()) {
        Value v = make(Kind::Bool);
        v.flag = b;
        shared = add(std::move(v));
    }
    return shared;
}

ValueId Arena::integer(std::int64_t n)
{
    ValueId* shared =
        n >= kSmallIntMin && n <= kSmallIntMax ? &smallInts_[static_cast<std::size_t>(n - kSmallIntMin)] : nullptr;
    if (shared != nullptr && shared->valid()) {
        return *shared;
    }
    Value v = make(Kind::Int);
    v.i = n;
    const ValueId id = add(std::move(v));
    if (shared != nullptr) {
        *shared = id;
    }
    return id;
}

ValueId Arena::real(double d)
{
    Value v = make(Kind::Float);
    v.f = d;
    return add(std::move(v));
}

ValueId Arena::str(Text s)
{
    Value v = make(Kind::Str);
    v.text = std::move(s);
    return add(std::move(v));
}

ValueId Arena::bytes(Text raw)
{
    Value v = make(Kind::Bytes);
    v.text = std::move(raw);
    return add(std::move(v));
}

ValueId Arena::tuple(IdList items)
{
    Value v = make(Kind::Tuple);
    v.items = std::move(items);
    return add(std::move(v));
}

ValueId Arena::list(IdList items)
{
    Value v = make(Kind::List);
    v.items = std::move(items);
    return add(std::move(v));
}

ValueId Arena::dict(IdList keyValuePairs, bool ordered)
{
    Value v = make(Kind::Dict);
    v.items = std::move(keyValuePairs);
    v.flag = ordered;
    return add(std::move(v));
}

ValueId Arena::global(GlobalRef g)
{
    Value v = make(Kind::Global);
    v.i = static_cast<std::int64_t>(globals.size());
    charged_ += sizeof(GlobalRef) + g.module.size() + g.name.size();
    globals.push_back(std::move(g));
    return add(std::move(v));
}

ValueId Arena::dtype(ckpt::DType t)
{
    Value v = make(Kind::DType);
    v.i = static_cast<std::int64_t>(t);
    return add(std::move(v));
}

ValueId Arena::tensor(TensorInfo t)
{
    Value v = make(Kind::Tensor);
    v.i = static_cast<std::int64_t>(tensors.size());
    charged_ += sizeof(TensorInfo) + (t.shape.size() + t.stride.size()) * sizeof(std::int64_t);
    tensors.push_back(std::move(t));
    return add(std::move(v));
}

ValueId Arena::object(ObjectInfo o)
{
    Value v = make(Kind::Object);
    v.i = static_cast<std::int64_t>(objects.size());
    charged_ += sizeof(ObjectInfo) + (o.listItems.size() + o.dictItems.size()) * sizeof(ValueId);
    objects.push_back(std::move(o));
    return add(std::move(v));
}

ValueId Arena::storage(std::uint32_t storageIndex)
{
    Value v = make(Kind::Storage);
    v.i = storageIndex;
    return add(std::move(v));
}

const TensorInfo& tensorOf(const Arena& a, ValueId id)
{
    return a.tensors.at(static_cast<std::size_t>(a[id].i));
}

const ObjectInfo& objectOf(const Arena& a, ValueId id)
{
    return a.objects.at(static_cast<std::size_t>(a[id].i));
}

const GlobalRef& globalOf(const Arena& a, ValueId id)
{
    return a.globals.at(static_cast<std::size_t>(a[id].i));
}

ValueId dictGet(const Arena& a, std::span<const ValueId> items, std::string_view key)
{
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        if (a[items[i]].kind == Kind::Str && a[items[i]].text == key) {
            return items[i + 1];
        }
    }
    return {};
}

std::vector<ValueId> childrenOf(const Arena& a, ValueId id)
{
    std::vector<ValueId> kids;
    if (!id.valid() || id.v >= a.size()) {
        return kids;
    }
    const Value& v = a[id];
    kids.assign(v.items.begin(), v.items.end());
    kids.push_back(v.attrs);
    if (v.kind == Kind::Tensor) {
        const TensorInfo& t = tensorOf(a, id);
        kids.insert(kids.end(), {t.rawArgs, t.storage, t.backwardHooks, t.metadata, t.parameterHooks, t.parameterState,
                                 t.subclassType, t.subclassState});
    } else if (v.kind == Kind::Object) {
        const ObjectInfo& o = objectOf(a, id);
        kids.insert(kids.end(), {o.args, o.kwargs, o.state});
        kids.insert(kids.end(), o.listItems.begin(), o.listItems.end());
        kids.insert(kids.end(), o.dictItems.begin(), o.dictItems.end());
    }
    std::erase_if(kids, [&](ValueId k) { return !k.valid() || k.v >= a.size(); });
    return kids;
}

std::uint32_t nestingDepth(const Arena& a, ValueId root, std::uint32_t limit)
{
    if (!root.valid() || root.v >= a.size()) {
        return 0;
    }
    struct Frame {
        std::vector<ValueId> kids;
        std::size_t next = 0;
    };
    std::vector<bool> seen(a.size(), false);
    std::vector<Frame> stack;
    seen[root.v] = true;
    stack.push_back({childrenOf(a, root), 0});
    std::uint32_t deepest = 0;
    while (!stack.empty()) {
        deepest = std::max(deepest, static_cast<std::uint32_t>(stack.size() - 1));
        if (deepest > limit) {
            return limit + 1;
        }
        Frame& top = stack.back();
        if (top.next == top.kids.size()) {
            stack.pop_back();
            continue;
        }
        const ValueId kid = top.kids[top.next++];
        if (!seen[kid.v]) {
            seen[kid.v] = true;
            stack.push_back({childrenOf(a, kid), 0});
        }
    }
    return deepest;
}

std::string_view kindName(Kind k)
{
    switch (k) {
    case Kind::None:
        return "none";
    case Kind::Bool:
        return "bool";
    case Kind::Int:
        return "int";
    case Kind::BigInt:
        return "bigint";
    case Kind::Float:
        return "float";
    case Kind::Str:
        return "str";
    case Kind::Bytes:
        return "bytes";
    case Kind::Tuple:
        return "tuple";
    case Kind::List:
        return "list";
    case Kind::Dict:
        return "dict";
    case Kind::Set:
        return "set";
    case Kind::Global:
        return "global";
    case Kind::DType:
        return "dtype";
    case Kind::Device:
        return "device";
    case Kind::Size:
        return "size";
    case Kind::Storage:
        return "storage";
    case Kind::PersistentId:
        return "persistent_id";
    case Kind::Tensor:
        return "tensor";
    case Kind::Object:
        return "object";
    }
    return "unknown";
}

std::string storageClassGlobal(const StorageRef& s)
{
    if (s.className.empty() || (s.untyped && !s.classInTorch)) {
        return "torch.storage." + (s.className.empty() ? std::string("UntypedStorage") : s.className.str());
    }
    return "torch." + s.className.str();
}

}  // namespace ckpt::pickle
