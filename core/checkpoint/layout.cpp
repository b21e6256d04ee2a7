#include "checkpoint/layout.h"

#include "checkpoint/tensor_bytes.h"
#include "util/shape_text.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <optional>

namespace ckpt {
namespace {

constexpr std::uint64_t kMaxLayoutInts = std::uint64_t{1} << 22U;  // 32 MiB of int64s
constexpr std::size_t kShownComponents = 4;

// The int64 values of a small tensor value in C order.
Expected<std::vector<std::int64_t>> int64Values(const Checkpoint& c, pickle::ValueId v, const std::string& what)
{
    const pickle::Arena& a = c.arena;
    if (!v.valid() || a[v].kind != pickle::Kind::Tensor) {
        return makeError(ErrorCode::Corrupt, what + " is not a tensor");
    }
    const pickle::TensorInfo& t = pickle::tensorOf(a, v);
    std::uint64_t numel = 1;
    for (auto d : t.shape) {
        numel *= static_cast<std::uint64_t>(std::max<std::int64_t>(0, d));
    }
    if (t.dtype != DType::Int64 || !t.storage.valid() || a[t.storage].kind != pickle::Kind::Storage ||
        t.shape.size() != t.stride.size() || numel > kMaxLayoutInts) {
        return makeError(ErrorCode::Corrupt, what + " is not an int64 tensor with a storage");
    }
    const StorageIndex si{static_cast<std::uint32_t>(a[t.storage].i)};
    if (si.value() >= c.storages.size() || !c.storages[si].present) {
        return makeError(ErrorCode::Truncated, what + "'s storage is missing from the file");
    }
    std::vector<std::byte> scratch;
    auto data = c.storageData(si, scratch);
    if (!data) {
        return data.error();
    }
    if (viewByteExtent(t.dtype, t.storageOffset, t.shape, t.stride).end > data->size()) {
        return makeError(ErrorCode::Corrupt, what + " reaches past its storage");
    }
    std::vector<std::int64_t> out;
    out.reserve(static_cast<std::size_t>(numel));
    const std::vector<std::int64_t> shape = t.shape;
    const std::vector<std::int64_t> stride = t.stride;
    forEachCOrderRun(shape, stride, t.storageOffset, sizeof(std::int64_t), [&](std::uint64_t at, std::uint64_t n) {
        for (std::uint64_t k = 0; k < n; k += sizeof(std::int64_t)) {
            std::int64_t x = 0;
            std::memcpy(&x, data->data() + at + k, sizeof x);
            out.push_back(x);
        }
        return true;
    });
    return out;
}

}  // namespace

std::vector<SparsePart> sparseParts(const Checkpoint& c, const TensorEntry& t)
{
    const pickle::Arena& a = c.arena;
    if (t.form != pickle::TensorForm::Sparse || !t.value.valid()) {
        return {};
    }
    const pickle::TensorInfo& info = pickle::tensorOf(a, t.value);
    if (!info.rawArgs.valid() || a[info.rawArgs].items.size() != 2) {
        return {};
    }
    const pickle::Value& data = a[a[info.rawArgs].items[1]];
    if (data.kind != pickle::Kind::Tuple || data.items.size() < 3) {
        return {};
    }
    // COO: (indices, values, size[, is_coalesced]); CSR/CSC/BSR/BSC: (compressed, plain, values, size).
    const bool coo = a[data.items[2]].kind != pickle::Kind::Tensor;
    static constexpr std::array<const char*, 2> kCoo{"indices", "values"};
    static constexpr std::array<const char*, 3> kCompressed{"compressed indices", "plain indices", "values"};
    std::vector<SparsePart> out;
    for (std::size_t i = 0; i < (coo ? kCoo.size() : kCompressed.size()); ++i) {
        if (a[data.items[i]].kind != pickle::Kind::Tensor) {
            return {};
        }
        const pickle::TensorInfo& p = pickle::tensorOf(a, data.items[i]);
        out.push_back({coo ? kCoo.at(i) : kCompressed.at(i), p.dtype, p.shape, data.items[i]});
    }
    return out;
}

TensorEntry entryOf(const Checkpoint& c, pickle::ValueId tensor, const std::string& path)
{
    const pickle::Arena& a = c.arena;
    const pickle::TensorInfo& p = pickle::tensorOf(a, tensor);
    TensorEntry e;
    e.path = path;
    e.value = tensor;
    e.dtype = p.dtype;
    e.shape = p.shape;
    e.stride = p.stride;
    e.storageOffset = p.storageOffset;
    e.numel = 1;
    for (auto d : p.shape) {
        e.numel *= static_cast<std::uint64_t>(std::max<std::int64_t>(0, d));
    }
    e.nbytes = e.numel * elementSize(p.dtype);
    e.form = p.form;
    e.contiguous = isCContiguous(p.shape, p.stride);
    if (p.storage.valid() && a[p.storage].kind == pickle::Kind::Storage &&
        static_cast<std::size_t>(a[p.storage].i) < c.storages.size()) {
        e.storage = StorageIndex{static_cast<std::uint32_t>(a[p.storage].i)};
        e.location = c.storages[e.storage].location;
    }
    return e;
}

std::optional<std::int64_t> sparseNnz(const Checkpoint& c, const TensorEntry& t)
{
    const auto parts = sparseParts(c, t);
    if (parts.empty() || parts.back().shape.empty()) {
        return std::nullopt;
    }
    return parts.back().shape.front();
}

namespace {

// A jagged nested tensor's components (_rebuild_njt's keyword dict, docs/format.md §4.4): component
// i is values.narrow(ragged_idx - 1, offsets[i], length i), its length lengths[i] when the tensor
// has lengths (a narrow()ed one) and offsets[i + 1] - offsets[i] otherwise. Offsets count elements
// into the buffer, as a strided nested tensor's do.
Expected<std::vector<NestedComponent>> jaggedComponents(const Checkpoint& c, const TensorEntry& t,
                                                        const pickle::Value& kwargs)
{
    const pickle::Arena& a = c.arena;
    const std::string what = "jagged nested tensor '" + t.path + "'";
    auto offsets = int64Values(c, pickle::dictGet(a, kwargs.items, "offsets"), what + " offsets");
    if (!offsets) {
        return offsets.error();
    }
    const pickle::ValueId lengthsId = pickle::dictGet(a, kwargs.items, "lengths");
    std::optional<std::vector<std::int64_t>> lengths;
    if (lengthsId.valid() && a[lengthsId].kind != pickle::Kind::None) {
        auto read = int64Values(c, lengthsId, what + " lengths");
        if (!read) {
            return read.error();
        }
        lengths = std::move(*read);
    }
    const pickle::ValueId raggedId = pickle::dictGet(a, kwargs.items, "_ragged_idx");
    const std::int64_t ragged = raggedId.valid() && a[raggedId].kind == pickle::Kind::Int ? a[raggedId].i : 1;
    const std::size_t n = offsets->empty() ? 0 : offsets->size() - 1;
    if (ragged < 1 || static_cast<std::size_t>(ragged) > t.shape.size() || (lengths && lengths->size() != n)) {
        return makeError(ErrorCode::Corrupt, what + " has a ragged dimension or lengths that do not fit its values");
    }
    const auto dim = static_cast<std::size_t>(ragged - 1);
    std::vector<NestedComponent> out(n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t start = (*offsets)[i];
        const std::int64_t length = lengths ? (*lengths)[i] : (*offsets)[i + 1] - start;
        if (start < 0 || length < 0 || start > t.shape[dim] || length > t.shape[dim] - start) {
            return makeError(ErrorCode::Corrupt, what + " component " + std::to_string(i) + " reaches past its values");
        }
        out[i].shape.assign(t.shape.begin(), t.shape.end());
        out[i].shape[dim] = length;
        out[i].stride.assign(t.stride.begin(), t.stride.end());
        out[i].offset = start * t.stride[dim];
    }
    return out;
}

}  // namespace

bool isJagged(const Checkpoint& c, const TensorEntry& t)
{
    return t.form == pickle::TensorForm::Nested && t.value.valid() &&
           pickle::tensorOf(c.arena, t.value).rebuild->name == "_rebuild_njt";
}

Expected<std::vector<NestedComponent>> nestedComponents(const Checkpoint& c, const TensorEntry& t)
{
    if (t.form != pickle::TensorForm::Nested || !t.value.valid()) {
        return makeError(ErrorCode::Unsupported, "tensor '" + t.path + "' is not a nested tensor");
    }
    const pickle::TensorInfo& info = pickle::tensorOf(c.arena, t.value);
    const pickle::Value& args = c.arena[info.rawArgs];
    if (isJagged(c, t)) {
        if (args.items.size() != 1 || c.arena[args.items[0]].kind != pickle::Kind::Dict) {
            return makeError(ErrorCode::Corrupt, "jagged nested tensor '" + t.path + "' has unexpected arguments");
        }
        return jaggedComponents(c, t, c.arena[args.items[0]]);
    }
    if (args.items.size() != 4) {
        return makeError(ErrorCode::Corrupt, "nested tensor '" + t.path + "' has unexpected arguments");
    }
    const pickle::TensorInfo* sizesInfo =
        c.arena[args.items[1]].kind == pickle::Kind::Tensor ? &pickle::tensorOf(c.arena, args.items[1]) : nullptr;
    auto sizes = int64Values(c, args.items[1], "nested tensor '" + t.path + "' sizes");
    auto strides = int64Values(c, args.items[2], "nested tensor '" + t.path + "' strides");
    auto offsets = int64Values(c, args.items[3], "nested tensor '" + t.path + "' offsets");
    for (const auto* r : {&sizes, &strides, &offsets}) {
        if (!*r) {
            return r->error();
        }
    }
    // sizes is [n, dim] (or [n] of 1-d components written as [n, 1]); an empty nested tensor is [0].
    const std::size_t n = offsets->size();
    const std::size_t dim = n == 0 || sizesInfo == nullptr || sizesInfo->shape.size() < 2
                                ? 0
                                : static_cast<std::size_t>(sizesInfo->shape[1]);
    if (sizes->size() != n * dim || strides->size() != n * dim) {
        return makeError(ErrorCode::Corrupt, "nested tensor '" + t.path +
                                                 "' has sizes, strides and offsets of "
                                                 "different lengths");
    }
    std::vector<NestedComponent> out(n);
    for (std::size_t i = 0; i < n; ++i) {
        out[i].shape.assign(sizes->begin() + static_cast<std::ptrdiff_t>(i * dim),
                            sizes->begin() + static_cast<std::ptrdiff_t>((i + 1) * dim));
        out[i].stride.assign(strides->begin() + static_cast<std::ptrdiff_t>(i * dim),
                             strides->begin() + static_cast<std::ptrdiff_t>((i + 1) * dim));
        out[i].offset = (*offsets)[i];
    }
    return out;
}

std::string tensorShapeText(const Checkpoint& c, const TensorEntry& t)
{
    if (t.form == pickle::TensorForm::Sparse) {
        const auto nnz = sparseNnz(c, t);
        return "sparse " + shapeText(t.shape) + (nnz ? ", nnz " + std::to_string(*nnz) : std::string());
    }
    if (t.form != pickle::TensorForm::Nested) {
        return shapeText(t.shape);
    }
    auto comps = nestedComponents(c, t);
    if (!comps) {
        return "nested (components unreadable)";
    }
    std::string s = (isJagged(c, t) ? "jagged " : "nested ") + std::to_string(comps->size()) + ":";
    for (std::size_t i = 0; i < comps->size() && i < kShownComponents; ++i) {
        s += (i ? ", " : " ") + shapeText((*comps)[i].shape);
    }
    return s + (comps->size() > kShownComponents ? ", ..." : "");
}

namespace {

// A per-channel quantizer's scales or zero points: a tensor inside the rebuild arguments, named by
// dtype, length and a hash of the bytes it views, so two files compare by content.
std::string componentText(const Checkpoint& c, pickle::ValueId v)
{
    const pickle::Arena& a = c.arena;
    if (!v.valid() || a[v].kind != pickle::Kind::Tensor) {
        return pickle::shortRepr(a, v, 60);
    }
    const pickle::TensorInfo& t = pickle::tensorOf(a, v);
    std::uint64_t numel = 1;
    for (const auto d : t.shape) {
        numel *= static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0));
    }
    std::string text = std::string(dtypeName(t.dtype)) + "[" + std::to_string(numel) + "]";
    if (!t.storage.valid() || a[t.storage].kind != pickle::Kind::Storage || t.storageOffset < 0) {
        return text;
    }
    const StorageIndex si{static_cast<std::uint32_t>(a[t.storage].i)};
    std::vector<std::byte> scratch;
    auto data = si.value() < c.storages.size() ? c.storageData(si, scratch)
                                               : Expected<Bytes>(makeError(ErrorCode::Corrupt, ""));
    const std::uint64_t es = elementSize(t.dtype);
    const std::uint64_t from = static_cast<std::uint64_t>(t.storageOffset) * es;
    if (!data || from + numel * es > data->size()) {
        return text + " (unreadable)";
    }
    std::array<char, 24> hex{};
    std::snprintf(hex.data(), hex.size(), " #%016llx",
                  static_cast<unsigned long long>(
                      hashBytes(data->subspan(static_cast<std::size_t>(from), static_cast<std::size_t>(numel * es)))));
    return text + hex.data();
}

template <class T> T loadAs(Bytes b)
{
    T v{};
    std::memcpy(&v, b.data(), sizeof(T));  // the files are little-endian, as the hosts we run on
    return v;
}

// One element of a per-channel quantizer's tensor as a double (scales are float64, zero points
// int64, or float for per_channel_affine_float_qparams).
std::optional<double> elementValue(DType t, Bytes b)
{
    switch (t) {
    case DType::Float64:
        return loadAs<double>(b);
    case DType::Float32:
        return static_cast<double>(loadAs<float>(b));
    case DType::Float16:
        return halfToDouble(loadAs<std::uint16_t>(b));
    case DType::BFloat16:
        return static_cast<double>(bfloat16ToFloat(loadAs<std::uint16_t>(b)));
    case DType::Int64:
        return static_cast<double>(loadAs<std::int64_t>(b));
    case DType::Int32:
        return static_cast<double>(loadAs<std::int32_t>(b));
    default:
        return std::nullopt;
    }
}

// A per-channel quantizer's scales or zero points: the first values, and the range of all.
std::optional<Quantizer::Values> componentValues(const Checkpoint& c, pickle::ValueId v)
{
    const pickle::Arena& a = c.arena;
    if (!v.valid() || a[v].kind != pickle::Kind::Tensor) {
        return std::nullopt;
    }
    const pickle::TensorInfo& t = pickle::tensorOf(a, v);
    Quantizer::Values out;
    out.dtype = t.dtype;
    out.count = 1;
    for (const auto d : t.shape) {
        out.count *= static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0));
    }
    const std::uint64_t es = elementSize(t.dtype);
    if (!t.storage.valid() || a[t.storage].kind != pickle::Kind::Storage || t.storageOffset < 0 || es == 0 ||
        t.shape.size() > 1 || (t.shape.size() == 1 && !t.stride.empty() && t.stride[0] != 1)) {
        return out;
    }
    const StorageIndex si{static_cast<std::uint32_t>(a[t.storage].i)};
    std::vector<std::byte> scratch;
    auto data = si.value() < c.storages.size() ? c.storageData(si, scratch)
                                               : Expected<Bytes>(makeError(ErrorCode::Corrupt, ""));
    const std::uint64_t from = static_cast<std::uint64_t>(t.storageOffset) * es;
    if (!data || from + out.count * es > data->size()) {
        return out;
    }
    for (std::uint64_t i = 0; i < out.count; ++i) {
        const auto x = elementValue(t.dtype, data->subspan(static_cast<std::size_t>(from + i * es), es));
        if (!x) {
            return out;
        }
        if (out.values.size() < Quantizer::kShownValues) {
            out.values.push_back(*x);
        }
        out.min = out.min ? std::min(*out.min, *x) : *x;
        out.max = out.max ? std::max(*out.max, *x) : *x;
    }
    return out;
}

std::string number(double x)
{
    std::array<char, 32> buf{};
    std::snprintf(buf.data(), buf.size(), "%.6g", x);
    return buf.data();
}

std::string rangeText(const Quantizer::Values& v)
{
    if (!v.min) {
        return std::string(dtypeName(v.dtype)) + "[" + std::to_string(v.count) + "] (unreadable)";
    }
    return *v.min == *v.max ? "all " + number(*v.min) : number(*v.min) + " to " + number(*v.max);
}

}  // namespace

std::string Quantizer::summary() const
{
    if (perTensorAffine) {
        return "scale " + number(scale) + ", zero point " + std::to_string(zeroPoint);
    }
    std::string s = scheme;
    if (axis) {
        s += " on axis " + std::to_string(*axis);
    }
    if (scales) {
        s += ": " + std::to_string(scales->count) + " scales " + rangeText(*scales);
    }
    if (zeroPoints) {
        s += ", zero points " + rangeText(*zeroPoints);
    }
    return s;
}

std::optional<Quantizer> quantizerOf(const Checkpoint& c, const TensorEntry& t)
{
    if (t.form != pickle::TensorForm::Quantized || !t.value.valid()) {
        return std::nullopt;
    }
    const pickle::Arena& a = c.arena;
    const pickle::TensorInfo& info = pickle::tensorOf(a, t.value);
    Quantizer q;
    if (!info.rawArgs.valid() || a[info.rawArgs].items.size() < 5) {
        q.text = "unknown";
        return q;
    }
    const pickle::ValueId params = a[info.rawArgs].items[4];
    if (!params.valid() || a[params].kind != pickle::Kind::Tuple || a[params].items.empty()) {
        q.text = pickle::shortRepr(a, params, 120);
        return q;
    }
    const auto& p = a[params].items;
    const pickle::ValueId scheme = p[0];
    const std::string schemeName =
        a[scheme].kind == pickle::Kind::Global ? pickle::globalOf(a, scheme).name : pickle::shortRepr(a, scheme, 40);
    q.scheme = schemeName;
    if (schemeName == "per_tensor_affine" && p.size() == 3 && a[p[1]].kind == pickle::Kind::Float &&
        a[p[2]].kind == pickle::Kind::Int) {
        q.perTensorAffine = true;
        q.scale = a[p[1]].f;
        q.zeroPoint = a[p[2]].i;
        q.text =
            schemeName + ", scale " + pickle::shortRepr(a, p[1], 40) + ", zero point " + std::to_string(q.zeroPoint);
        return q;
    }
    q.text = schemeName;
    if (p.size() == 4) {
        q.scales = componentValues(c, p[1]);
        q.zeroPoints = componentValues(c, p[2]);
        if (a[p[3]].kind == pickle::Kind::Int) {
            q.axis = a[p[3]].i;
        }
    }
    for (std::size_t i = 1; i < p.size(); ++i) {
        static const char* const kNames[] = {"", "scales ", "zero points ", "axis "};
        q.text += std::string(", ") + (i < 4 ? kNames[i] : "") + componentText(c, p[i]);  // NOLINT
    }
    return q;
}

}  // namespace ckpt
