// numpy values as pickled (`numpy.core.multiarray.scalar`, `_reconstruct` + BUILD), decoded without
// numpy: every accessor checks kinds and bounds, since the values come from the file.
#include "pickle/value.h"

namespace ckpt::pickle {

namespace {

const Value* at(const Arena& a, ValueId id)
{
    return id.valid() && id.v < a.size() ? &a[id] : nullptr;
}

const ObjectInfo* objectAt(const Arena& a, ValueId id)
{
    const Value* v = at(a, id);
    if (v == nullptr || v->kind != Kind::Object || v->i < 0 || static_cast<std::size_t>(v->i) >= a.objects.size()) {
        return nullptr;
    }
    return &a.objects[static_cast<std::size_t>(v->i)];
}

const Value* tupleAt(const Arena& a, ValueId id)
{
    const Value* v = at(a, id);
    return v != nullptr && v->kind == Kind::Tuple ? v : nullptr;
}

bool isNumpyName(const GlobalRef& g, std::string_view name)
{
    return (g.module == "numpy.core.multiarray" || g.module == "numpy._core.multiarray") && g.name == name;
}

// A `numpy.dtype(code, False, True)` object with its BUILD state `(3, '<', ...)` -> "<f8".
bool numpyDtype(const Arena& a, ValueId id, std::string& out)
{
    const ObjectInfo* o = objectAt(a, id);
    if (o == nullptr || o->callable.module != "numpy" || o->callable.name != "dtype") {
        return false;
    }
    const Value* args = tupleAt(a, o->args);
    if (args == nullptr || args->items.empty()) {
        return false;
    }
    const Value* code = at(a, args->items[0]);
    if (code == nullptr || code->kind != Kind::Str || code->text.empty()) {
        return false;
    }
    char order = '|';
    if (const Value* st = tupleAt(a, o->state); st != nullptr && st->items.size() >= 2) {
        const Value* bo = at(a, st->items[1]);
        if (bo != nullptr && bo->kind == Kind::Str && bo->text.size() == 1) {
            order = bo->text[0];
        }
    }
    if (order == '=') {
        order = '<';  // native order on every machine torch.save runs on that we know of
    }
    out = std::string(1, order) + code->text;
    return true;
}

bool intTuple(const Arena& a, ValueId id, std::vector<std::int64_t>& out)
{
    const Value* t = tupleAt(a, id);
    if (t == nullptr) {
        return false;
    }
    out.clear();
    for (ValueId item : t->items) {
        const Value* v = at(a, item);
        if (v == nullptr || v->kind != Kind::Int) {
            return false;
        }
        out.push_back(v->i);
    }
    return true;
}

}  // namespace

bool decodeNumpy(const Arena& a, ValueId id, NumpyInfo& out)
{
    const ObjectInfo* o = objectAt(a, id);
    if (o == nullptr) {
        return false;
    }
    if (isNumpyName(o->callable, "scalar")) {
        const Value* args = tupleAt(a, o->args);
        if (args == nullptr || args->items.size() != 2) {
            return false;
        }
        const Value* data = at(a, args->items[1]);
        if (data == nullptr || (data->kind != Kind::Bytes && !(data->kind == Kind::Str && data->flag)) ||
            !numpyDtype(a, args->items[0], out.dtype)) {
            return false;
        }
        out.isScalar = true;
        out.shape.clear();
        out.data = data->text;
        return true;
    }
    if (isNumpyName(o->callable, "_reconstruct")) {
        // BUILD state: (version, shape, dtype, is_fortran, raw bytes)
        const Value* st = tupleAt(a, o->state);
        if (st == nullptr || st->items.size() != 5) {
            return false;
        }
        // Python 2 pickled the bytes as a str.
        const Value* raw = at(a, st->items[4]);
        if (raw == nullptr || (raw->kind != Kind::Bytes && !(raw->kind == Kind::Str && raw->flag)) ||
            !intTuple(a, st->items[1], out.shape) || !numpyDtype(a, st->items[2], out.dtype)) {
            return false;
        }
        out.isScalar = false;
        out.data = raw->text;
        return true;
    }
    return false;
}

}  // namespace ckpt::pickle
