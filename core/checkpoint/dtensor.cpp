#include "checkpoint/dtensor.h"

#include "util/dtype.h"

#include <algorithm>

namespace ckpt::dtensor {

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

namespace {

std::optional<std::int64_t> integer(const Arena& a, ValueId id)
{
    return id.valid() && a[id].kind == Kind::Int ? std::optional(a[id].i) : std::nullopt;
}

// The product of an int or a (nested) tuple of ints: a _FlatLayout's size.
std::optional<std::int64_t> flatSize(const Arena& a, ValueId id, int depth = 0)
{
    if (auto one = integer(a, id)) {
        return *one;
    }
    if (!id.valid() || a[id].kind != Kind::Tuple || depth > 8) {
        return std::nullopt;
    }
    std::int64_t n = 1;
    for (const auto i : a[id].items) {
        auto s = flatSize(a, i, depth + 1);
        if (!s || *s < 0 || (*s > 0 && n > (std::int64_t{1} << 40) / *s)) {
            return std::nullopt;
        }
        n *= *s;
    }
    return n;
}

}  // namespace

std::optional<std::vector<std::int64_t>> intList(const Arena& a, ValueId id)
{
    if (!id.valid() || (a[id].kind != Kind::Size && a[id].kind != Kind::Tuple && a[id].kind != Kind::List)) {
        return std::nullopt;
    }
    std::vector<std::int64_t> out;
    for (const auto i : a[id].items) {
        if (a[i].kind != Kind::Int) {
            return std::nullopt;
        }
        out.push_back(a[i].i);
    }
    return out;
}

ValueId stateField(const Arena& a, ValueId state, std::string_view name)
{
    if (!state.valid()) {
        return {};
    }
    const auto& v = a[state];
    if (v.kind == Kind::Dict) {
        return pickle::dictGet(a, v.items, name);
    }
    if (v.kind == Kind::Tuple && v.items.size() == 2) {
        for (const auto part : v.items) {
            if (a[part].kind == Kind::Dict) {
                if (auto f = pickle::dictGet(a, a[part].items, name); f.valid()) {
                    return f;
                }
            }
        }
    }
    return {};
}

ValueId objectField(const Arena& a, ValueId obj, std::string_view name)
{
    if (!obj.valid() || a[obj].kind != Kind::Object) {
        return {};
    }
    return stateField(a, pickle::objectOf(a, obj).state, name);
}

std::optional<Parts> partsOf(const Arena& a, const pickle::TensorInfo& t)
{
    if (!t.subclassType.valid() || a[t.subclassType].kind != Kind::Global || !t.subclassState.valid() ||
        pickle::globalOf(a, t.subclassType).name != "DTensor") {
        return std::nullopt;
    }
    Parts p;
    const ValueId local = stateField(a, t.subclassState, "_local_tensor");
    if (local.valid() && a[local].kind == Kind::Tensor) {
        const auto& lt = pickle::tensorOf(a, local);
        if (lt.form == pickle::TensorForm::Strided && lt.storage.valid() && a[lt.storage].kind == Kind::Storage) {
            p.local = local;
        }
    }
    const ValueId spec = stateField(a, t.subclassState, "_spec");
    p.mesh = objectField(a, spec, "mesh");
    p.placements = objectField(a, spec, "placements");
    if (p.placements.valid() && a[p.placements].kind != Kind::Tuple && a[p.placements].kind != Kind::List) {
        p.placements = {};
    }
    return p;
}

std::optional<std::vector<std::int64_t>> meshShape(const Arena& a, ValueId mesh)
{
    if (const ValueId t = objectField(a, mesh, "mesh"); t.valid() && a[t].kind == Kind::Tensor) {
        const auto& shape = pickle::tensorOf(a, t).shape;
        return std::vector<std::int64_t>(shape.begin(), shape.end());
    }
    const ValueId layout = objectField(a, mesh, "_layout");
    if (const ValueId axes = objectField(a, layout, "axes"); axes.valid()) {
        if (a[axes].kind != Kind::Tuple && a[axes].kind != Kind::List) {
            return std::nullopt;
        }
        std::vector<std::int64_t> out;
        for (const auto axis : a[axes].items) {
            auto n = flatSize(a, objectField(a, axis, "shape"));
            if (!n) {
                return std::nullopt;
            }
            out.push_back(*n);
        }
        return out;
    }
    const ValueId shape = objectField(a, layout, "shape");
    if (auto one = integer(a, shape)) {
        return std::vector<std::int64_t>{*one};
    }
    return intList(a, shape);  // a nested (hierarchical) layout is not a plain tuple: nullopt
}

std::string placementsText(const Arena& a, ValueId placements)
{
    if (!placements.valid()) {
        return "?";
    }
    std::string out;
    for (const auto p : a[placements].items) {
        out += out.empty() ? "" : ", ";
        if (a[p].kind != Kind::Object) {
            out += "?";
            continue;
        }
        const std::string name = pickle::objectOf(a, p).callable.name;
        out += name + "(";
        if (auto d = integer(a, objectField(a, p, "dim"))) {
            out += std::to_string(*d);
            if (auto sf = integer(a, objectField(a, p, "split_factor"))) {
                out += ", split_factor=" + std::to_string(*sf);
            }
        }
        out += ")";
    }
    return out;
}

std::optional<LocalPiece> localPiece(const Arena& a, const pickle::TensorInfo& t)
{
    const auto parts = partsOf(a, t);
    if (!parts || !parts->local.valid()) {
        return std::nullopt;
    }
    const auto& local = pickle::tensorOf(a, parts->local);
    LocalPiece p;
    p.shape.assign(local.shape.begin(), local.shape.end());
    p.bytes = elementSize(local.dtype);
    for (const auto d : p.shape) {
        p.bytes *= static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0));
    }
    p.placements = placementsText(a, parts->placements);
    p.mesh = meshShape(a, parts->mesh);
    return p;
}

std::uint64_t heldBytes(const Arena& a, const pickle::TensorInfo& t, std::uint64_t nbytes)
{
    const auto piece = localPiece(a, t);
    return piece ? piece->bytes : nbytes;
}

}  // namespace ckpt::dtensor
