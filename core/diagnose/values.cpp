#include "diagnose/values.h"

#include "checkpoint/layout.h"
#include "checkpoint/tensor_bytes.h"
#include "diagnose/rules.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>

namespace ckpt::diagnose {
namespace {

enum class Cls : std::uint8_t { Finite, Nan, PosInf, NegInf };

template <class U> U loadBits(const std::byte* p)
{
    U u;
    std::memcpy(&u, p, sizeof(U));
    return u;
}

// IEEE-754 layouts (all-ones exponent = Inf/NaN): float64/32/16, bfloat16, float8_e5m2.
template <class U, U ExpMask, U ManMask, U SignMask> struct Ieee {
    using Bits = U;
    static constexpr std::size_t size = sizeof(U);
    static bool nonFinite(U u) { return (u & ExpMask) == ExpMask; }
    static Cls classify(U u)
    {
        if ((u & ExpMask) != ExpMask) {
            return Cls::Finite;
        }
        if ((u & ManMask) != 0) {
            return Cls::Nan;
        }
        return (u & SignMask) ? Cls::NegInf : Cls::PosInf;
    }
};

struct F64 : Ieee<std::uint64_t, 0x7ff0000000000000ULL, 0x000fffffffffffffULL, 0x8000000000000000ULL> {
    static double value(Bits u) { return std::bit_cast<double>(u); }
};
struct F32 : Ieee<std::uint32_t, 0x7f800000U, 0x007fffffU, 0x80000000U> {
    static double value(Bits u) { return std::bit_cast<float>(u); }
};
struct F16 : Ieee<std::uint16_t, 0x7c00, 0x03ff, 0x8000> {
    static double value(Bits u) { return halfToDouble(u); }
};
struct BF16 : Ieee<std::uint16_t, 0x7f80, 0x007f, 0x8000> {
    static double value(Bits u) { return bfloat16ToFloat(u); }
};

// One-byte float formats are decoded through 256-entry tables built once.
struct ByteTable {
    std::array<Cls, 256> cls{};
    std::array<double, 256> value{};
};

ByteTable makeTable(DType t)
{
    ByteTable tb;
    for (int b = 0; b < 256; ++b) {
        const double v = float8ToDouble(t, static_cast<std::uint8_t>(b));
        const Cls c = std::isnan(v) ? Cls::Nan : std::isinf(v) ? (v < 0 ? Cls::NegInf : Cls::PosInf) : Cls::Finite;
        tb.cls[static_cast<std::size_t>(b)] = c;
        tb.value[static_cast<std::size_t>(b)] = v;
    }
    return tb;
}

template <DType T> struct F8 {
    using Bits = std::uint8_t;
    static constexpr std::size_t size = 1;
    static const ByteTable& table()
    {
        static const ByteTable tb = makeTable(T);
        return tb;
    }
    static bool nonFinite(Bits u) { return table().cls[u] != Cls::Finite; }
    static Cls classify(Bits u) { return table().cls[u]; }
    static double value(Bits u) { return table().value[u]; }
};

// ---- counting -------------------------------------------------------------------------------

void addClass(NonFinite& r, Cls c)
{
    r.nan += c == Cls::Nan ? 1 : 0;
    r.inf += (c == Cls::PosInf || c == Cls::NegInf) ? 1 : 0;
    r.negInf += c == Cls::NegInf ? 1 : 0;
}

// Counts non-finite scalars among n contiguous ones: a branch-free pass that GCC vectorises,
// in blocks small enough for a 32-bit counter.
template <class F> std::uint64_t quickCount(const std::byte* p, std::size_t n)
{
    std::uint64_t bad = 0;
    constexpr std::size_t kBlock = std::size_t{1} << 20;
    for (std::size_t i = 0; i < n;) {
        const std::size_t end = std::min(n, i + kBlock);
        std::uint32_t c = 0;
        for (; i < end; ++i) {
            c += F::nonFinite(loadBits<typename F::Bits>(p + i * F::size)) ? 1U : 0U;
        }
        bad += c;
    }
    return bad;
}

template <class F> NonFinite countReal(const std::byte* p, std::size_t n)
{
    NonFinite r;
    if (quickCount<F>(p, n) == 0) {
        return r;
    }
    for (std::size_t i = 0; i < n; ++i) {
        addClass(r, F::classify(loadBits<typename F::Bits>(p + i * F::size)));
    }
    return r;
}

template <class F> void addComplex(NonFinite& r, const std::byte* p)
{
    const Cls re = F::classify(loadBits<typename F::Bits>(p));
    const Cls im = F::classify(loadBits<typename F::Bits>(p + F::size));
    r.nan += (re == Cls::Nan || im == Cls::Nan) ? 1 : 0;
    r.inf += (re == Cls::PosInf || re == Cls::NegInf || im == Cls::PosInf || im == Cls::NegInf) ? 1 : 0;
}

template <class F> NonFinite countComplex(const std::byte* p, std::size_t n)
{
    NonFinite r;
    if (quickCount<F>(p, 2 * n) == 0) {
        return r;
    }
    for (std::size_t i = 0; i < n; ++i) {
        addComplex<F>(r, p + 2 * i * F::size);
    }
    return r;
}

// ---- dispatch -------------------------------------------------------------------------------

// Calls fn.template operator()<Codec, IsComplex>() for floating and complex dtypes; returns false
// for every other dtype.
template <class Fn> bool dispatchFloat(DType t, Fn&& fn)
{
    switch (t) {
    case DType::Float64:
        fn.template operator()<F64, false>();
        return true;
    case DType::Float32:
        fn.template operator()<F32, false>();
        return true;
    case DType::Float16:
        fn.template operator()<F16, false>();
        return true;
    case DType::BFloat16:
        fn.template operator()<BF16, false>();
        return true;
    case DType::Float8_e5m2:
        fn.template operator()<F8<DType::Float8_e5m2>, false>();
        return true;
    case DType::Float8_e4m3fn:
        fn.template operator()<F8<DType::Float8_e4m3fn>, false>();
        return true;
    case DType::Float8_e5m2fnuz:
        fn.template operator()<F8<DType::Float8_e5m2fnuz>, false>();
        return true;
    case DType::Float8_e4m3fnuz:
        fn.template operator()<F8<DType::Float8_e4m3fnuz>, false>();
        return true;
    case DType::Float8_e8m0fnu:
        fn.template operator()<F8<DType::Float8_e8m0fnu>, false>();
        return true;
    case DType::Complex128:
        fn.template operator()<F64, true>();
        return true;
    case DType::Complex64:
        fn.template operator()<F32, true>();
        return true;
    case DType::Complex32:
        fn.template operator()<F16, true>();
        return true;
    default:
        return false;
    }
}

// ---- views ------------------------------------------------------------------------------------

std::uint64_t numelOf(const TensorView& v)
{
    std::uint64_t n = 1;
    for (auto d : v.shape) {
        n *= static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0));
    }
    return n;
}

// Checks that every element of the view lies inside a storage of `storageBytes`.
Expected<void> checkBounds(const TensorView& v, std::size_t storageBytes)
{
    const auto es = elementSize(v.dtype);
    if (es == 0) {
        return makeError(ErrorCode::Unsupported, "tensor has an unknown dtype");
    }
    if (v.shape.size() != v.stride.size()) {
        return makeError(ErrorCode::Corrupt, "tensor shape and stride differ in length");
    }
    if (numelOf(v) == 0) {
        return {};
    }
    if (v.offset < 0) {
        return makeError(ErrorCode::Corrupt, "tensor has a negative storage offset");
    }
    if (std::any_of(v.stride.begin(), v.stride.end(), [](std::int64_t s) { return s < 0; })) {
        return makeError(ErrorCode::Corrupt, "tensor has a negative stride");
    }
    const ByteExtent reach = viewByteExtent(v.dtype, v.offset, v.shape, v.stride);
    if (reach.end > storageBytes) {
        return makeError(ErrorCode::Corrupt, "tensor view reaches byte " + std::to_string(reach.end) +
                                                 " of a storage of " + std::to_string(storageBytes) + " bytes");
    }
    return {};
}

// Visits a view's elements in C order as pointers into `storage` (`size` bytes each, the reader's
// width); stops when fn returns false.
template <class Fn> void forEachElement(const TensorView& v, Bytes storage, std::size_t size, Fn&& fn)
{
    forEachCOrderRun(v.shape, v.stride, v.offset, size, [&](std::uint64_t at, std::uint64_t bytes) {
        const std::byte* p = storage.data() + at;
        for (const std::byte* end = p + bytes; p != end; p += size) {
            if (!fn(p)) {
                return false;
            }
        }
        return true;
    });
}

// The same elements as `v` with its dimensions ordered by stride, largest first, and broadcast
// (stride-0) ones outermost: a visit whose result does not depend on order then reads a transposed
// or permuted tensor front to back, in long runs, instead of jumping a row per element.
TensorView inStorageOrder(const TensorView& v)
{
    std::vector<std::size_t> order(v.shape.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    const auto key = [&](std::size_t d) {
        return v.stride[d] == 0 ? std::numeric_limits<std::int64_t>::max() : v.stride[d];
    };
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key(a) > key(b); });
    TensorView s = v;
    for (std::size_t k = 0; k < order.size(); ++k) {
        s.shape[k] = v.shape[order[k]];
        s.stride[k] = v.stride[order[k]];
    }
    return s;
}

std::vector<std::byte> byteSwapped(Bytes data, std::size_t width)
{
    std::vector<std::byte> out(data.begin(), data.end());
    if (width > 1) {
        for (std::size_t i = 0; i + width <= out.size(); i += width) {
            std::reverse(out.begin() + static_cast<long>(i), out.begin() + static_cast<long>(i + width));
        }
    }
    return out;
}

std::size_t scalarWidth(DType t)
{
    return isComplex(t) ? elementSize(t) / 2 : elementSize(t);
}

// ---- statistics -------------------------------------------------------------------------------

struct Sample {
    bool nan = false;
    bool inf = false;
    bool negInf = false;
    double v = 0;
};

std::string formatReal(double d)
{
    if (std::isnan(d)) {
        return "nan";
    }
    if (std::isinf(d)) {
        return d < 0 ? "-inf" : "inf";
    }
    std::array<char, 32> buf{};
    std::snprintf(buf.data(), buf.size(), "%.6g", d);
    return buf.data();
}

// A reader for one dtype: sample() classifies and converts, text() prints exactly.
template <class F, bool Complex> struct FloatReader {
    static constexpr std::size_t size = Complex ? 2 * F::size : F::size;
    static Sample sample(const std::byte* p)
    {
        const auto a = loadBits<typename F::Bits>(p);
        if constexpr (Complex) {
            const auto b = loadBits<typename F::Bits>(p + F::size);
            const Cls ca = F::classify(a);
            const Cls cb = F::classify(b);
            Sample s;
            s.nan = ca == Cls::Nan || cb == Cls::Nan;
            s.inf = (ca == Cls::PosInf || ca == Cls::NegInf || cb == Cls::PosInf || cb == Cls::NegInf);
            s.v = std::hypot(F::value(a), F::value(b));
            return s;
        } else {
            const Cls c = F::classify(a);
            return {c == Cls::Nan, c == Cls::PosInf || c == Cls::NegInf, c == Cls::NegInf, F::value(a)};
        }
    }
    static std::string text(const std::byte* p)
    {
        const double re = F::value(loadBits<typename F::Bits>(p));
        if constexpr (Complex) {
            const double im = F::value(loadBits<typename F::Bits>(p + F::size));
            return formatReal(re) + (std::signbit(im) ? "-" : "+") + formatReal(std::fabs(im)) + "j";
        } else {
            return formatReal(re);
        }
    }
};

template <class I> struct IntReader {
    static constexpr std::size_t size = sizeof(I);
    static Sample sample(const std::byte* p) { return {false, false, false, static_cast<double>(loadBits<I>(p))}; }
    static std::string text(const std::byte* p) { return std::to_string(loadBits<I>(p)); }
};

struct BoolReader {
    static constexpr std::size_t size = 1;
    static Sample sample(const std::byte* p) { return {false, false, false, p[0] != std::byte{0} ? 1.0 : 0.0}; }
    static std::string text(const std::byte* p) { return p[0] != std::byte{0} ? "True" : "False"; }
};

template <class Fn> bool dispatchAll(DType t, Fn&& fn)
{
    bool handled = false;
    dispatchFloat(t, [&]<class F, bool C>() {
        fn.template operator()<FloatReader<F, C>>();
        handled = true;
    });
    if (handled) {
        return true;
    }
    switch (t) {
    case DType::Int64:
        fn.template operator()<IntReader<std::int64_t>>();
        return true;
    case DType::Int32:
    case DType::QInt32:
        fn.template operator()<IntReader<std::int32_t>>();
        return true;
    case DType::Int16:
        fn.template operator()<IntReader<std::int16_t>>();
        return true;
    case DType::Int8:
    case DType::QInt8:
        fn.template operator()<IntReader<std::int8_t>>();
        return true;
    case DType::UInt64:
        fn.template operator()<IntReader<std::uint64_t>>();
        return true;
    case DType::UInt32:
        fn.template operator()<IntReader<std::uint32_t>>();
        return true;
    case DType::UInt16:
    case DType::Bits16:
        fn.template operator()<IntReader<std::uint16_t>>();
        return true;
    case DType::Bool:
        fn.template operator()<BoolReader>();
        return true;
    case DType::UInt8:
    case DType::QUInt8:
    case DType::QUInt4x2:
    case DType::QUInt2x4:
    case DType::Bits8:
    case DType::Bits1x8:
    case DType::Bits2x4:
    case DType::Bits4x2:
    case DType::Float4_e2m1fn_x2:  // packed pairs: shown as their raw bytes
        fn.template operator()<IntReader<std::uint8_t>>();
        return true;
    default:
        return false;
    }
}

template <class R>
Expected<TensorStats> statsWith(const TensorView& v, Bytes storage, const StatsOptions& opts, std::stop_token stop)
{
    TensorStats s;
    s.dtype = v.dtype;
    s.numel = numelOf(v);
    // Pass 1: classes, range and moments (Welford, so huge tensors keep their precision).
    double mean = 0;
    double m2 = 0;
    double lo = std::numeric_limits<double>::infinity();
    double hi = -std::numeric_limits<double>::infinity();
    std::uint64_t seen = 0;
    const auto value = [&](Sample x) {
        if (v.dequantize) {
            x.v = (x.v - v.zeroPoint) * v.scale;
        }
        return x;
    };
    forEachElement(v, storage, R::size, [&](const std::byte* p) {
        const Sample x = value(R::sample(p));
        s.nan += x.nan ? 1 : 0;
        s.inf += x.inf ? 1 : 0;
        s.negInf += x.negInf ? 1 : 0;
        if (!x.nan && !x.inf) {
            ++s.finite;
            lo = std::min(lo, x.v);
            hi = std::max(hi, x.v);
            const double d = x.v - mean;
            mean += d / static_cast<double>(s.finite);
            m2 += d * (x.v - mean);
        }
        return (++seen & 0xFFFFF) != 0 || !stop.stop_requested();
    });
    if (stop.stop_requested()) {
        return makeError(ErrorCode::Cancelled, "statistics cancelled");
    }
    if (s.finite > 0) {
        s.min = lo;
        s.max = hi;
        s.mean = mean;
        s.std = std::sqrt(m2 / static_cast<double>(s.finite));
    }
    // Pass 2: the histogram over [min, max].
    if (opts.bins > 0 && s.finite > 0) {
        s.histogram.assign(opts.bins, 0);
        s.histLow = s.min;
        s.histHigh = s.max;
        const double width = (s.max - s.min) / static_cast<double>(opts.bins);
        forEachElement(inStorageOrder(v), storage, R::size, [&](const std::byte* p) {
            const Sample x = value(R::sample(p));
            if (!x.nan && !x.inf) {
                std::size_t b = width > 0 ? static_cast<std::size_t>((x.v - s.min) / width) : 0;
                s.histogram[std::min(b, opts.bins - 1)] += 1;
            }
            return true;
        });
    }
    // The preview, in logical order.
    std::size_t shown = 0;
    s.preview = "[";
    forEachElement(v, storage, R::size, [&](const std::byte* p) {
        if (shown == opts.previewCount) {
            s.preview += ", ...";
            return false;
        }
        s.preview += (shown ? ", " : "") + (v.dequantize ? formatReal(value(R::sample(p)).v) : R::text(p));
        ++shown;
        return true;
    });
    s.preview += "]";
    return s;
}

}  // namespace

NonFinite countNonFinite(DType t, Bytes data)
{
    NonFinite r;
    dispatchFloat(t, [&]<class F, bool C>() {
        if constexpr (C) {
            r = countComplex<F>(data.data(), data.size() / (2 * F::size));
        } else {
            r = countReal<F>(data.data(), data.size() / F::size);
        }
    });
    return r;
}

Expected<NonFinite> countNonFinite(const TensorView& v, Bytes storage)
{
    if (!isFloatingPoint(v.dtype) && !isComplex(v.dtype)) {
        return NonFinite{};
    }
    if (auto b = checkBounds(v, storage.size()); !b) {
        return b.error();
    }
    std::vector<std::byte> swapped;
    if (v.bigEndian && scalarWidth(v.dtype) > 1) {
        swapped = byteSwapped(storage, scalarWidth(v.dtype));
        storage = swapped;
    }
    const auto es = elementSize(v.dtype);
    const TensorView o = inStorageOrder(v);
    NonFinite r;
    // One dtype dispatch per tensor. In storage order a contiguous or transposed tensor is a single
    // run and gets the vectorised count whole.
    dispatchFloat(v.dtype, [&]<class F, bool C>() {
        forEachCOrderRun(o.shape, o.stride, o.offset, es, [&](std::uint64_t at, std::uint64_t bytes) {
            const std::byte* p = storage.data() + at;
            // Stepped slices give one-element runs, where the block count's setup costs several times
            // one classification.
            if (bytes == es) {
                if constexpr (C) {
                    addComplex<F>(r, p);
                } else {
                    addClass(r, F::classify(loadBits<typename F::Bits>(p)));
                }
                return true;
            }
            const auto n = static_cast<std::size_t>(bytes / es);
            NonFinite part;
            if constexpr (C) {
                part = countComplex<F>(p, n);
            } else {
                part = countReal<F>(p, n);
            }
            r.nan += part.nan;
            r.inf += part.inf;
            r.negInf += part.negInf;
            return true;
        });
    });
    return r;
}

Expected<TensorStats> viewStats(const TensorView& v, Bytes storage, const StatsOptions& opts, std::stop_token stop)
{
    if (auto b = checkBounds(v, storage.size()); !b) {
        return b.error();
    }
    std::vector<std::byte> swapped;
    if (v.bigEndian && scalarWidth(v.dtype) > 1) {
        swapped = byteSwapped(storage, scalarWidth(v.dtype));
        storage = swapped;
    }
    std::optional<Expected<TensorStats>> result;
    const bool known = dispatchAll(v.dtype, [&]<class R>() { result.emplace(statsWith<R>(v, storage, opts, stop)); });
    if (!known || !result) {
        return makeError(ErrorCode::Unsupported, "no statistics for dtype " + std::string(dtypeName(v.dtype)));
    }
    return std::move(*result);
}

TensorView viewOf(const Checkpoint& ckpt, const TensorEntry& t)
{
    TensorView v;
    v.dtype = t.dtype;
    v.shape = t.shape;
    v.stride = t.stride;
    v.offset = t.storageOffset;
    v.bigEndian = ckpt.byteorder == "big";
    if (const auto q = quantizerOf(ckpt, t); q && q->perTensorAffine) {
        v.dequantize = true;
        v.scale = q->scale;
        v.zeroPoint = static_cast<double>(q->zeroPoint);
    }
    return v;
}

namespace {

Expected<Bytes> tensorStorage(const Checkpoint& ckpt, TensorIndex tensor, std::vector<std::byte>& scratch)
{
    if (!ckpt.tensors.contains(tensor)) {
        return makeError(ErrorCode::Usage, "no tensor #" + std::to_string(tensor.value()));
    }
    const auto& t = ckpt.tensors[tensor];
    if (!ckpt.storages.contains(t.storage)) {
        return makeError(ErrorCode::Unsupported, "`" + t.path + "` has no storage in the file (" +
                                                     std::string(dtypeName(t.dtype)) + " on " + t.location + ")");
    }
    if (!ckpt.storages[t.storage].present) {
        return makeError(ErrorCode::Truncated, "the storage of `" + t.path + "` is missing from the file");
    }
    return ckpt.storageData(t.storage, scratch);
}

}  // namespace

Expected<TensorStats> tensorStats(const Checkpoint& ckpt, TensorIndex tensor, const StatsOptions& opts,
                                  std::stop_token stop)
{
    std::vector<std::byte> scratch;
    auto data = tensorStorage(ckpt, tensor, scratch);
    if (!data) {
        return data.error();
    }
    const TensorEntry& t = ckpt.tensors[tensor];
    if (t.form == pickle::TensorForm::Quantized && !viewOf(ckpt, t).dequantize) {
        return makeError(ErrorCode::Unsupported, "`" + t.path + "` is quantized with " +
                                                     quantizerOf(ckpt, t).value_or(Quantizer{}).text +
                                                     ": statistics of its integer codes would not be its values");
    }
    auto stats = viewStats(viewOf(ckpt, t), *data, opts, std::move(stop));
    if (auto same = ckpt.checkUnchanged(); !same) {
        return same.error();
    }
    return stats;
}

Expected<NonFinite> tensorNonFinite(const Checkpoint& ckpt, TensorIndex tensor, std::vector<std::byte>& scratch)
{
    auto data = tensorStorage(ckpt, tensor, scratch);
    if (!data) {
        return data.error();
    }
    return countNonFinite(viewOf(ckpt, ckpt.tensors[tensor]), *data);
}

// ---- the nonfinite-values rule ------------------------------------------------------------------
//
// Each storage's bytes are read once, streamed (a deflated record a chunk at a time), into counts
// per block of elements. A tensor's counts then come from those blocks: zero at once when the
// range it reaches holds no NaN/Inf (nearly always), by block sums plus two edge blocks when it is
// contiguous, and by walking the view only otherwise. Broadcast (stride-0) dimensions multiply
// counts instead of being walked, so a 454-byte file viewing one float as 2^40 elements costs one
// element's work, and the walks together are capped at a few times the storage bytes scanned:
// past that, or for a view that overlaps itself, the count covers the storage range it reaches.

namespace {

constexpr std::uint64_t kBlockElements = 16384;

NonFinite& operator+=(NonFinite& a, const NonFinite& b)
{
    a.nan += b.nan;
    a.inf += b.inf;
    a.negInf += b.negInf;
    return a;
}

NonFinite operator-(const NonFinite& a, const NonFinite& b)
{
    return {a.nan - b.nan, a.inf - b.inf, a.negInf - b.negInf};
}

NonFinite times(const NonFinite& a, std::uint64_t m)
{
    return {a.nan * m, a.inf * m, a.negInf * m};
}

// prefix[i]: the counts over elements [0, i * kBlockElements).
struct BlockCounts {
    std::vector<NonFinite> prefix{NonFinite{}};
    std::uint64_t elements = 0;
    [[nodiscard]] NonFinite blocks(std::uint64_t b0, std::uint64_t b1) const
    {
        const std::uint64_t last = prefix.size() - 1;
        return prefix[std::min(b1, last)] - prefix[std::min(b0, last)];
    }
};

// `scanned` counts the bytes read, for `progress` (may be empty) with the scan's `total`.
Expected<BlockCounts> scanStorage(const Checkpoint& ckpt, StorageIndex storage, DType dtype,
                                  const std::stop_token& stop, std::uint64_t& scanned, std::uint64_t total,
                                  const std::function<void(std::uint64_t, std::uint64_t)>& progress)
{
    const std::size_t es = elementSize(dtype);
    const bool swap = ckpt.byteorder == "big" && scalarWidth(dtype) > 1;
    const std::uint64_t blockBytes = kBlockElements * es;
    BlockCounts out;
    out.elements = ckpt.storages[storage].nbytes / es;
    NonFinite running;
    auto block = [&](Bytes b) {
        if (swap) {
            const auto swapped = byteSwapped(b, scalarWidth(dtype));
            running += countNonFinite(dtype, swapped);
        } else {
            running += countNonFinite(dtype, b);
        }
        out.prefix.push_back(running);
    };
    std::vector<std::byte> carry;  // a block split between two pieces of the stream
    auto read = ckpt.streamStorage(storage, 0, out.elements * es, [&](Bytes piece) {
        scanned += piece.size();
        if (!carry.empty()) {
            const std::size_t take = std::min<std::size_t>(piece.size(), blockBytes - carry.size());
            carry.insert(carry.end(), piece.begin(), piece.begin() + static_cast<std::ptrdiff_t>(take));
            piece = piece.subspan(take);
            if (carry.size() == blockBytes) {
                block(carry);
                carry.clear();
            }
        }
        while (piece.size() >= blockBytes) {
            block(piece.first(blockBytes));
            piece = piece.subspan(blockBytes);
        }
        carry.assign(piece.begin(), piece.end());
        if (progress) {
            progress(scanned, total);
        }
        return !stop.stop_requested();
    });
    if (!read) {
        return read.error();
    }
    if (!carry.empty()) {
        block(carry);
    }
    return out;
}

// A view with its broadcast dimensions taken out, and how many times each element repeats.
struct Collapsed {
    TensorView view;
    std::uint64_t repeat = 1;
    std::uint64_t first = 0;  // elements of the storage it reaches: [first, end)
    std::uint64_t end = 0;
};

Collapsed collapse(const TensorView& v)
{
    Collapsed c;
    c.view = v;
    c.view.shape.clear();
    c.view.stride.clear();
    c.first = static_cast<std::uint64_t>(v.offset);
    std::uint64_t last = c.first;
    for (std::size_t d = 0; d < v.shape.size(); ++d) {
        if (v.stride[d] == 0 && v.shape[d] > 1) {
            c.repeat *= static_cast<std::uint64_t>(v.shape[d]);
            continue;
        }
        c.view.shape.push_back(v.shape[d]);
        c.view.stride.push_back(v.stride[d]);
        last += static_cast<std::uint64_t>(v.shape[d] - 1) * static_cast<std::uint64_t>(v.stride[d]);
    }
    c.end = last + 1;
    return c;
}

// Counts one tensor from its storage's blocks; `data` is the storage's bytes when they can be read
// at random (the mapping, or a deflated record small enough to inflate), else empty.
class TensorCounter {
public:
    TensorCounter(const BlockCounts& blocks, Bytes data, bool haveData, std::uint64_t& workLeft)
        : blocks_(blocks), data_(data), haveData_(haveData), workLeft_(workLeft)
    {
    }

    // Exact unless `approximate` is set (then the storage range the view reaches was counted).
    NonFinite count(const TensorView& v, bool& approximate)
    {
        const Collapsed c = collapse(v);
        const std::uint64_t b0 = c.first / kBlockElements;
        const std::uint64_t b1 = (c.end + kBlockElements - 1) / kBlockElements;
        if (blocks_.blocks(b0, b1).total() == 0) {
            return {};
        }
        const std::uint64_t numel = numelOf(c.view);
        if (isCContiguous(c.view.shape, c.view.stride)) {
            return times(range(c.first, c.first + numel, c.view, approximate), c.repeat);
        }
        if (haveData_ && numel <= blocks_.elements && numel <= workLeft_) {
            workLeft_ -= numel;
            auto r = countNonFinite(c.view, data_);
            if (r) {
                return times(*r, c.repeat);
            }
        }
        approximate = true;
        return times(range(c.first, c.end, c.view, approximate), c.repeat);
    }

private:
    NonFinite range(std::uint64_t a, std::uint64_t b, const TensorView& v, bool& approximate)
    {
        const std::uint64_t inner0 = (a + kBlockElements - 1) / kBlockElements;
        const std::uint64_t inner1 = b / kBlockElements;
        if (inner0 >= inner1) {
            return direct(a, b, v, approximate);
        }
        NonFinite r = blocks_.blocks(inner0, inner1);
        r += direct(a, inner0 * kBlockElements, v, approximate);
        r += direct(inner1 * kBlockElements, b, v, approximate);
        return r;
    }
    // [a, b) inside at most two blocks: read directly, or the whole blocks when the bytes cannot be.
    NonFinite direct(std::uint64_t a, std::uint64_t b, const TensorView& v, bool& approximate)
    {
        if (a >= b) {
            return {};
        }
        const std::uint64_t b0 = a / kBlockElements;
        const std::uint64_t b1 = (b + kBlockElements - 1) / kBlockElements;
        if (blocks_.blocks(b0, b1).total() == 0) {
            return {};
        }
        if (!haveData_) {
            approximate = true;
            return blocks_.blocks(b0, b1);
        }
        TensorView run = v;
        run.shape = {static_cast<std::int64_t>(b - a)};
        run.stride = {1};
        run.offset = static_cast<std::int64_t>(a);
        auto r = countNonFinite(run, data_);
        return r ? *r : NonFinite{};
    }

    const BlockCounts& blocks_;
    Bytes data_;
    bool haveData_;
    std::uint64_t& workLeft_;
};

}  // namespace

Expected<void> valueRules(const Checkpoint& ckpt, Findings& out, std::stop_token stop,
                          const std::function<void(std::uint64_t, std::uint64_t)>& progress)
{
    struct Hit {
        TensorIndex tensor;
        NonFinite counts;
        bool approximate;
    };
    std::vector<Hit> hits;
    std::vector<std::string> unreadable;       // "path (why)", for the detail
    std::vector<std::string> unreadablePaths;  // the key paths, for the finding's paths
    std::uint64_t scanned = 0;
    // Tensors grouped by what is scanned once: a storage read as one dtype.
    std::map<std::pair<StorageIndex, DType>, std::vector<TensorIndex>> groups;
    std::uint64_t storageElements = 0;
    for (std::uint32_t n = 0; n < ckpt.tensors.size(); ++n) {
        const TensorIndex i{n};
        const auto& t = ckpt.tensors[i];
        if ((!isFloatingPoint(t.dtype) && !isComplex(t.dtype)) || !t.storage.valid() || t.numel == 0 ||
            t.form != pickle::TensorForm::Strided) {
            continue;
        }
        if (!ckpt.storages[t.storage].present) {
            unreadable.push_back(t.path + " (its storage is missing from the file)");
            unreadablePaths.push_back(t.path);
            continue;
        }
        auto& g = groups[{t.storage, t.dtype}];
        if (g.empty()) {
            storageElements += ckpt.storages[t.storage].nbytes / std::max<std::size_t>(1, elementSize(t.dtype));
        }
        g.push_back(i);
    }
    std::uint64_t workLeft = 4 * storageElements + (std::uint64_t{1} << 24);
    std::uint64_t totalBytes = 0;  // what the scan reads, for `progress`
    for (const auto& [key, members] : groups) {
        totalBytes += ckpt.storages[key.first].nbytes / std::max<std::size_t>(1, elementSize(key.second)) *
                      elementSize(key.second);
    }
    std::uint64_t scannedBytes = 0;
    std::vector<std::byte> scratch;
    for (const auto& [key, members] : groups) {
        const auto [storage, dtype] = key;
        if (stop.stop_requested()) {
            return makeError(ErrorCode::Cancelled, "value scan cancelled");
        }
        auto blocks = scanStorage(ckpt, storage, dtype, stop, scannedBytes, totalBytes, progress);
        if (!blocks) {
            if (blocks.error().code == ErrorCode::Cancelled) {
                return makeError(ErrorCode::Cancelled, "value scan cancelled");
            }
            for (auto i : members) {
                unreadable.push_back(ckpt.tensors[i].path + " (" + blocks.error().message + ")");
                unreadablePaths.push_back(ckpt.tensors[i].path);
            }
            continue;
        }
        const StorageEntry& st = ckpt.storages[storage];
        Bytes data;
        bool haveData = st.inMapping();
        if (haveData) {
            data = ckpt.bytes.subspan(static_cast<std::size_t>(st.fileOffset), static_cast<std::size_t>(st.nbytes));
        } else if (blocks->prefix.back().total() > 0) {
            auto whole = ckpt.storageData(storage, scratch);  // refuses what the memory budget cannot hold
            haveData = whole.ok();
            data = haveData ? *whole : Bytes{};
        }
        std::vector<std::byte> swapped;
        if (haveData && ckpt.byteorder == "big" && scalarWidth(dtype) > 1) {
            swapped = byteSwapped(data, scalarWidth(dtype));
            data = swapped;
        }
        TensorCounter counter(*blocks, data, haveData, workLeft);
        for (auto i : members) {
            TensorView v = viewOf(ckpt, ckpt.tensors[i]);
            v.bigEndian = false;  // `data` is already in host order
            bool approximate = false;
            const NonFinite c = counter.count(v, approximate);
            ++scanned;
            if (c.total() > 0) {
                hits.push_back({i, c, approximate});
            }
        }
    }
    std::sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) { return a.tensor < b.tensor; });
    if (!unreadable.empty()) {
        // Asked for values, a tensor left out must not read as a clean bill: "no findings" said so
        // of a DCP tensor its set cannot assemble.
        Finding u;
        u.code = "values-unscanned";
        u.severity = Severity::Warning;
        u.title = plural(unreadable.size(), "tensor's values were", "tensors' values were") + " not scanned";
        u.detail = "Their bytes could not be read, so --values says nothing about them: " + unreadable.front() +
                   (unreadable.size() > 1 ? " and " + std::to_string(unreadable.size() - 1) + " more" : "") +
                   ". Loading them fails the same way.";
        for (const auto& path : unreadablePaths) {
            u.paths.push_back(path);
        }
        out.push_back(std::move(u));
    }
    if (hits.empty()) {
        return {};
    }
    Finding f;
    f.code = "nonfinite-values";
    f.severity = Severity::Warning;
    std::uint64_t nan = 0;
    std::uint64_t inf = 0;
    for (const auto& h : hits) {
        nan += h.counts.nan;
        inf += h.counts.inf;
        f.paths.push_back(ckpt.tensors[h.tensor].path);
    }
    f.title = plural(hits.size(), "tensor holds", "tensors hold") + " NaN or Inf values";
    f.detail = plural(hits.size(), "tensor", "tensors") + " of the " + withCommas(scanned) +
               " floating-point ones scanned hold " + plural(nan, "NaN", "NaNs") + " and " +
               plural(inf, "infinity", "infinities") + ": ";
    constexpr std::size_t kShown = 10;
    for (std::size_t k = 0; k < hits.size() && k < kShown; ++k) {
        const auto& t = ckpt.tensors[hits[k].tensor];
        const auto& c = hits[k].counts;
        f.detail += std::string(k ? "; " : "") + "`" + t.path + "` (" + std::string(dtypeName(t.dtype)) + ", " +
                    plural(t.numel, "value", "values") + "): " + withCommas(c.nan) + " NaN, " +
                    (isComplex(t.dtype) ? withCommas(c.inf) + " Inf"
                                        : withCommas(c.inf - c.negInf) + " +Inf, " + withCommas(c.negInf) + " -Inf") +
                    (hits[k].approximate ? " in the storage range it reaches" : "");
    }
    if (hits.size() > kShown) {
        f.detail += "; ...";
    }
    f.detail += ". The checkpoint loads, but these weights poison every output they touch: training diverged or "
                "an overflow (often float16) was saved; resume from an earlier checkpoint.";
    out.push_back(std::move(f));
    return {};
}

}  // namespace ckpt::diagnose
