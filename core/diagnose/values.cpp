#include "diagnose/values.h"

#include "checkpoint/tensor_bytes.h"
#include "diagnose/rules.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
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

double halfToDouble(std::uint16_t h)
{
    const int sign = (h >> 15) & 1;
    const int exp = (h >> 10) & 0x1f;
    const int man = h & 0x3ff;
    double v = 0;
    if (exp == 0) {
        v = std::ldexp(man, -24);
    } else if (exp == 31) {
        v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    } else {
        v = std::ldexp(man + 1024, exp - 25);
    }
    return sign ? -v : v;
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
    static double value(Bits u) { return std::bit_cast<float>(static_cast<std::uint32_t>(u) << 16); }
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
        const bool neg = (b & 0x80) != 0;
        double v = 0;
        Cls c = Cls::Finite;
        switch (t) {
        case DType::Float8_e5m2:
            v = halfToDouble(static_cast<std::uint16_t>(b << 8));
            c = std::isnan(v) ? Cls::Nan : std::isinf(v) ? (neg ? Cls::NegInf : Cls::PosInf) : Cls::Finite;
            break;
        case DType::Float8_e4m3fn: {  // bias 7, no Inf, NaN = S.1111.111
            const int e = (b >> 3) & 0xf;
            const int m = b & 7;
            if (e == 15 && m == 7) {
                c = Cls::Nan;
            } else {
                v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
            }
            v = neg ? -v : v;
            break;
        }
        case DType::Float8_e4m3fnuz:    // bias 8, the only NaN is 0x80, no Inf, no -0
        case DType::Float8_e5m2fnuz: {  // bias 16, likewise
            const bool e4 = t == DType::Float8_e4m3fnuz;
            const int manBits = e4 ? 3 : 2;
            const int bias = e4 ? 8 : 16;
            const int e = (b & 0x7f) >> manBits;
            const int m = b & ((1 << manBits) - 1);
            if (b == 0x80) {
                c = Cls::Nan;
            } else {
                v = e == 0 ? std::ldexp(m, 1 - bias - manBits) : std::ldexp((1 << manBits) + m, e - bias - manBits);
                v = neg ? -v : v;
            }
            break;
        }
        case DType::Float8_e8m0fnu:  // exponent only, 0xFF = NaN
            if (b == 0xff) {
                c = Cls::Nan;
            } else {
                v = std::ldexp(1.0, b - 127);
            }
            break;
        default:
            v = b;
            break;
        }
        tb.cls[static_cast<std::size_t>(b)] = c;
        tb.value[static_cast<std::size_t>(b)] = c == Cls::Nan ? std::numeric_limits<double>::quiet_NaN() : v;
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
    std::uint64_t last = static_cast<std::uint64_t>(v.offset);
    for (std::size_t i = 0; i < v.shape.size(); ++i) {
        if (v.stride[i] < 0) {
            return makeError(ErrorCode::Corrupt, "tensor has a negative stride");
        }
        last += static_cast<std::uint64_t>(v.shape[i] - 1) * static_cast<std::uint64_t>(v.stride[i]);
    }
    if ((last + 1) * es > storageBytes) {
        return makeError(ErrorCode::Corrupt, "tensor view reaches byte " + std::to_string((last + 1) * es) +
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
    forEachElement(v, storage, R::size, [&](const std::byte* p) {
        const Sample x = R::sample(p);
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
            const Sample x = R::sample(p);
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
        s.preview += (shown ? ", " : "") + R::text(p);
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
    return v;
}

namespace {

Expected<Bytes> tensorStorage(const Checkpoint& ckpt, std::uint32_t tensor, std::vector<std::byte>& scratch)
{
    if (tensor >= ckpt.tensors.size()) {
        return makeError(ErrorCode::Usage, "no tensor #" + std::to_string(tensor));
    }
    const auto& t = ckpt.tensors[tensor];
    if (t.storage == kNoIndex || t.storage >= ckpt.storages.size()) {
        return makeError(ErrorCode::Unsupported, "`" + t.path + "` has no storage in the file (" +
                                                     std::string(dtypeName(t.dtype)) + " on " + t.location + ")");
    }
    if (!ckpt.storages[t.storage].present) {
        return makeError(ErrorCode::Truncated, "the storage of `" + t.path + "` is missing from the file");
    }
    return ckpt.storageData(t.storage, scratch);
}

}  // namespace

Expected<TensorStats> tensorStats(const Checkpoint& ckpt, std::uint32_t tensor, const StatsOptions& opts,
                                  std::stop_token stop)
{
    std::vector<std::byte> scratch;
    auto data = tensorStorage(ckpt, tensor, scratch);
    if (!data) {
        return data.error();
    }
    auto stats = viewStats(viewOf(ckpt, ckpt.tensors[tensor]), *data, opts, std::move(stop));
    if (auto same = ckpt.checkUnchanged(); !same) {
        return same.error();
    }
    return stats;
}

Expected<NonFinite> tensorNonFinite(const Checkpoint& ckpt, std::uint32_t tensor, std::vector<std::byte>& scratch)
{
    auto data = tensorStorage(ckpt, tensor, scratch);
    if (!data) {
        return data.error();
    }
    return countNonFinite(viewOf(ckpt, ckpt.tensors[tensor]), *data);
}

// ---- the nonfinite-values rule ------------------------------------------------------------------

Expected<void> valueRules(const Checkpoint& ckpt, Findings& out, std::stop_token stop)
{
    struct Hit {
        std::uint32_t tensor;
        NonFinite counts;
    };
    std::vector<Hit> hits;
    std::vector<std::string> unreadable;
    std::vector<std::byte> scratch;
    std::uint64_t scanned = 0;
    for (std::uint32_t i = 0; i < ckpt.tensors.size(); ++i) {
        if (stop.stop_requested()) {
            return makeError(ErrorCode::Cancelled, "value scan cancelled");
        }
        const auto& t = ckpt.tensors[i];
        if ((!isFloatingPoint(t.dtype) && !isComplex(t.dtype)) || t.storage == kNoIndex || t.numel == 0) {
            continue;
        }
        auto counts = tensorNonFinite(ckpt, i, scratch);
        if (!counts) {
            unreadable.push_back(t.path + " (" + counts.error().message + ")");
            continue;
        }
        ++scanned;
        if (counts->total() > 0) {
            hits.push_back({i, *counts});
        }
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
                                        : withCommas(c.inf - c.negInf) + " +Inf, " + withCommas(c.negInf) + " -Inf");
    }
    if (hits.size() > kShown) {
        f.detail += "; ...";
    }
    f.detail += ". The checkpoint loads, but these weights poison every output they touch: training diverged or "
                "an overflow (often float16) was saved; resume from an earlier checkpoint.";
    if (!unreadable.empty()) {
        f.detail += " Not scanned: " + unreadable.front() +
                    (unreadable.size() > 1 ? " and " + std::to_string(unreadable.size() - 1) + " more" : "") + ".";
    }
    out.push_back(std::move(f));
    return {};
}

}  // namespace ckpt::diagnose
