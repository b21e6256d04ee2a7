// numpy values as pickled (`numpy.core.multiarray.scalar`, `_reconstruct` + BUILD), decoded without
// numpy: every accessor checks kinds and bounds, since the values come from the file.
#include "pickle/value.h"

#include <algorithm>
#include <bit>
#include <cstdlib>

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

// The scalar's bytes as a little-endian unsigned number (`n` bytes from `at`).
std::uint64_t loadUnsigned(const std::string& bytes, std::size_t at, std::size_t n)
{
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) {
        v |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
    }
    return v;
}

double loadFloat(const std::string& bytes, std::size_t at, std::size_t n)
{
    const std::uint64_t bits = loadUnsigned(bytes, at, n);
    if (n == 2) {
        return halfToDouble(static_cast<std::uint16_t>(bits));
    }
    if (n == 4) {
        return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
    }
    return std::bit_cast<double>(bits);
}

}  // namespace

std::optional<NumpyItem> numpyScalarItem(const NumpyInfo& np)
{
    if (!np.isScalar || np.dtype.size() < 3) {
        return std::nullopt;
    }
    const char order = np.dtype[0];
    const char kind = np.dtype[1];
    const int size = std::atoi(np.dtype.c_str() + 2);
    const auto want = static_cast<std::size_t>(size);
    if (np.data.size() != want || size <= 0 || size > 16) {
        return std::nullopt;
    }
    std::string bytes = np.data;
    if (order == '>') {
        const std::size_t part = kind == 'c' ? want / 2 : want;  // complex: swap each half
        for (std::size_t at = 0; at < want; at += part) {
            std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                         bytes.begin() + static_cast<std::ptrdiff_t>(at + part));
        }
    }
    NumpyItem out;
    switch (kind) {
    case 'b':
        out.type = NumpyItem::Type::Bool;
        out.boolean = loadUnsigned(bytes, 0, want) != 0;
        return want == 1 ? std::optional(out) : std::nullopt;
    case 'i': {
        if (want != 1 && want != 2 && want != 4 && want != 8) {
            return std::nullopt;
        }
        std::uint64_t u = loadUnsigned(bytes, 0, want);
        if (want < 8 && (u >> (8 * want - 1)) != 0) {
            u |= ~0ULL << (8 * want);  // sign-extend
        }
        out.type = NumpyItem::Type::Int;
        out.integer = static_cast<std::int64_t>(u);
        return out;
    }
    case 'u': {
        if (want > 8) {
            return std::nullopt;
        }
        const std::uint64_t u = loadUnsigned(bytes, 0, want);
        if (u > static_cast<std::uint64_t>(INT64_MAX)) {
            return std::nullopt;
        }
        out.type = NumpyItem::Type::Int;
        out.integer = static_cast<std::int64_t>(u);
        return out;
    }
    case 'f':
        if (want != 2 && want != 4 && want != 8) {
            return std::nullopt;
        }
        out.type = NumpyItem::Type::Float;
        out.real = loadFloat(bytes, 0, want);
        out.floatBytes = size;
        return out;
    case 'c':
        if (want != 8 && want != 16) {
            return std::nullopt;
        }
        out.type = NumpyItem::Type::Complex;
        out.real = loadFloat(bytes, 0, want / 2);
        out.imag = loadFloat(bytes, want / 2, want / 2);
        out.floatBytes = size / 2;
        return out;
    default:
        return std::nullopt;
    }
}

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
