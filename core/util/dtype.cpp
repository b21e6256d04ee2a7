#include "util/dtype.h"

#include <array>
#include <bit>
#include <cmath>
#include <limits>

namespace ckpt {
namespace {

struct DTypeRow {
    DType type;
    std::string_view name;
    std::uint32_t size;
    std::string_view storage;  // legacy typed storage class, "" = untyped (v3)
};

constexpr std::array<DTypeRow, kDTypeCount> kRows{{
    {DType::Float64, "float64", 8, "DoubleStorage"},
    {DType::Float32, "float32", 4, "FloatStorage"},
    {DType::Float16, "float16", 2, "HalfStorage"},
    {DType::BFloat16, "bfloat16", 2, "BFloat16Storage"},
    {DType::Int64, "int64", 8, "LongStorage"},
    {DType::Int32, "int32", 4, "IntStorage"},
    {DType::Int16, "int16", 2, "ShortStorage"},
    {DType::Int8, "int8", 1, "CharStorage"},
    {DType::UInt8, "uint8", 1, "ByteStorage"},
    {DType::Bool, "bool", 1, "BoolStorage"},
    {DType::Complex128, "complex128", 16, "ComplexDoubleStorage"},
    {DType::Complex64, "complex64", 8, "ComplexFloatStorage"},
    {DType::Complex32, "complex32", 4, ""},
    {DType::QInt8, "qint8", 1, "QInt8Storage"},
    {DType::QUInt8, "quint8", 1, "QUInt8Storage"},
    {DType::QInt32, "qint32", 4, "QInt32Storage"},
    {DType::QUInt4x2, "quint4x2", 1, "QUInt4x2Storage"},
    {DType::QUInt2x4, "quint2x4", 1, "QUInt2x4Storage"},
    {DType::Float8_e5m2, "float8_e5m2", 1, ""},
    {DType::Float8_e4m3fn, "float8_e4m3fn", 1, ""},
    {DType::Float8_e5m2fnuz, "float8_e5m2fnuz", 1, ""},
    {DType::Float8_e4m3fnuz, "float8_e4m3fnuz", 1, ""},
    {DType::Float8_e8m0fnu, "float8_e8m0fnu", 1, ""},
    {DType::Float4_e2m1fn_x2, "float4_e2m1fn_x2", 1, ""},
    {DType::UInt16, "uint16", 2, ""},
    {DType::UInt32, "uint32", 4, ""},
    {DType::UInt64, "uint64", 8, ""},
    {DType::Bits8, "bits8", 1, ""},
    {DType::Bits16, "bits16", 2, ""},
    {DType::Bits1x8, "bits1x8", 1, ""},
    {DType::Bits2x4, "bits2x4", 1, ""},
    {DType::Bits4x2, "bits4x2", 1, ""},
    {DType::Unknown, "unknown", 0, ""},
}};

const DTypeRow& row(DType t)
{
    return kRows.at(static_cast<std::size_t>(t));
}

struct SafetensorsRow {
    std::string_view code;
    std::uint64_t bits;
    DType type;  // Unknown: no torch dtype (the sub-byte floats)
};

// safetensors' Dtype enum in declaration order, which is by alignment: its writer sorts tensors by
// this position, descending (docs/format.md §10).
constexpr std::array<SafetensorsRow, 22> kSafetensors{{
    {"BOOL", 8, DType::Bool},
    {"F4", 4, DType::Unknown},
    {"F6_E2M3", 6, DType::Unknown},
    {"F6_E3M2", 6, DType::Unknown},
    {"U8", 8, DType::UInt8},
    {"I8", 8, DType::Int8},
    {"F8_E5M2", 8, DType::Float8_e5m2},
    {"F8_E4M3", 8, DType::Float8_e4m3fn},
    {"F8_E8M0", 8, DType::Float8_e8m0fnu},
    {"F8_E4M3FNUZ", 8, DType::Float8_e4m3fnuz},
    {"F8_E5M2FNUZ", 8, DType::Float8_e5m2fnuz},
    {"I16", 16, DType::Int16},
    {"U16", 16, DType::UInt16},
    {"F16", 16, DType::Float16},
    {"BF16", 16, DType::BFloat16},
    {"I32", 32, DType::Int32},
    {"U32", 32, DType::UInt32},
    {"F32", 32, DType::Float32},
    {"C64", 64, DType::Complex64},
    {"F64", 64, DType::Float64},
    {"I64", 64, DType::Int64},
    {"U64", 64, DType::UInt64},
}};

const SafetensorsRow* safetensorsRow(DType t)
{
    for (const auto& r : kSafetensors) {
        if (r.type == t && t != DType::Unknown) {
            return &r;
        }
    }
    return nullptr;
}

const SafetensorsRow* safetensorsRow(std::string_view code)
{
    for (const auto& r : kSafetensors) {
        if (r.code == code) {
            return &r;
        }
    }
    return nullptr;
}

struct Alias {
    std::string_view name;
    DType type;
};
// torch exposes these attribute aliases; a pickled dtype GLOBAL always uses the canonical name,
// but hand-written references (and `--against` text files) may use the aliases.
constexpr std::array<Alias, 10> kAliases{{
    {"float", DType::Float32},
    {"double", DType::Float64},
    {"half", DType::Float16},
    {"long", DType::Int64},
    {"int", DType::Int32},
    {"short", DType::Int16},
    {"cfloat", DType::Complex64},
    {"cdouble", DType::Complex128},
    {"chalf", DType::Complex32},
    {"complex", DType::Complex64},
}};

}  // namespace

std::string_view dtypeName(DType t)
{
    return row(t).name;
}

std::optional<DType> dtypeFromName(std::string_view name)
{
    if (name.starts_with("torch.")) {
        name.remove_prefix(6);
    }
    for (const auto& r : kRows) {
        if (r.type != DType::Unknown && r.name == name) {
            return r.type;
        }
    }
    for (const auto& a : kAliases) {
        if (a.name == name) {
            return a.type;
        }
    }
    return std::nullopt;
}

std::uint32_t elementSize(DType t)
{
    return row(t).size;
}

std::string_view storageClassName(DType t)
{
    return row(t).storage;
}

std::optional<DType> dtypeFromStorageClass(std::string_view name)
{
    if (name == "UntypedStorage" || name == "TypedStorage") {
        return DType::UInt8;
    }
    for (const auto& r : kRows) {
        if (!r.storage.empty() && r.storage == name) {
            return r.type;
        }
    }
    return std::nullopt;
}

std::string_view safetensorsName(DType t)
{
    const SafetensorsRow* r = safetensorsRow(t);
    return r == nullptr ? std::string_view() : r->code;
}

std::optional<DType> dtypeFromSafetensors(std::string_view name)
{
    const SafetensorsRow* r = safetensorsRow(name);
    if (r == nullptr || r->type == DType::Unknown) {
        return std::nullopt;
    }
    return r->type;
}

std::optional<std::uint64_t> safetensorsBits(std::string_view code)
{
    const SafetensorsRow* r = safetensorsRow(code);
    return r == nullptr ? std::nullopt : std::optional(r->bits);
}

std::optional<std::size_t> safetensorsAlignmentRank(DType t)
{
    const SafetensorsRow* r = safetensorsRow(t);
    return r == nullptr ? std::nullopt : std::optional(static_cast<std::size_t>(r - kSafetensors.data()));
}

double halfToDouble(std::uint16_t bits)
{
    const bool negative = (bits & 0x8000U) != 0;
    const unsigned exponent = (bits >> 10U) & 0x1FU;
    const unsigned mantissa = bits & 0x3FFU;
    if (exponent == 31 && mantissa != 0) {
        const std::uint64_t sign = negative ? 1ULL << 63U : 0;
        return std::bit_cast<double>(sign | 0x7FF0000000000000ULL | (std::uint64_t{mantissa} << 42U));
    }
    double v = 0;
    if (exponent == 0) {
        v = std::ldexp(mantissa, -24);  // zero and subnormals
    } else if (exponent == 31) {
        v = std::numeric_limits<double>::infinity();
    } else {
        v = std::ldexp(mantissa + 1024, static_cast<int>(exponent) - 25);
    }
    return negative ? -v : v;
}

double float8ToDouble(DType t, std::uint8_t bits)
{
    const int b = bits;
    const bool neg = (b & 0x80) != 0;
    constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
    switch (t) {
    case DType::Float8_e5m2:
        return halfToDouble(static_cast<std::uint16_t>(b << 8));
    case DType::Float8_e4m3fn: {  // bias 7, no Inf, NaN = S.1111.111
        const int e = (b >> 3) & 0xf;
        const int m = b & 7;
        if (e == 15 && m == 7) {
            return kNan;
        }
        const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
        return neg ? -v : v;
    }
    case DType::Float8_e4m3fnuz:    // bias 8, the only NaN is 0x80, no Inf, no -0
    case DType::Float8_e5m2fnuz: {  // bias 16, likewise
        if (b == 0x80) {
            return kNan;
        }
        const bool e4 = t == DType::Float8_e4m3fnuz;
        const int manBits = e4 ? 3 : 2;
        const int bias = e4 ? 8 : 16;
        const int e = (b & 0x7f) >> manBits;
        const int m = b & ((1 << manBits) - 1);
        const double v =
            e == 0 ? std::ldexp(m, 1 - bias - manBits) : std::ldexp((1 << manBits) + m, e - bias - manBits);
        return neg ? -v : v;
    }
    case DType::Float8_e8m0fnu:  // exponent only, 0xFF = NaN
        return b == 0xff ? kNan : std::ldexp(1.0, b - 127);
    default:
        return 0;
    }
}

bool isFloatingPoint(DType t)
{
    switch (t) {
    case DType::Float64:
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float8_e5m2:
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2fnuz:
    case DType::Float8_e4m3fnuz:
    case DType::Float8_e8m0fnu:
        return true;
    default:
        return false;
    }
}

bool isComplex(DType t)
{
    return t == DType::Complex128 || t == DType::Complex64 || t == DType::Complex32;
}

}  // namespace ckpt
