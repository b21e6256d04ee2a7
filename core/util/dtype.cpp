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
    std::string_view storage;      // legacy typed storage class, "" = untyped (v3)
    std::string_view safetensors;  // "" = not representable
};

// NOLINTNEXTLINE(cert-err58-cpp)
constexpr std::array<DTypeRow, kDTypeCount> kRows{{
    {DType::Float64, "float64", 8, "DoubleStorage", "F64"},
    {DType::Float32, "float32", 4, "FloatStorage", "F32"},
    {DType::Float16, "float16", 2, "HalfStorage", "F16"},
    {DType::BFloat16, "bfloat16", 2, "BFloat16Storage", "BF16"},
    {DType::Int64, "int64", 8, "LongStorage", "I64"},
    {DType::Int32, "int32", 4, "IntStorage", "I32"},
    {DType::Int16, "int16", 2, "ShortStorage", "I16"},
    {DType::Int8, "int8", 1, "CharStorage", "I8"},
    {DType::UInt8, "uint8", 1, "ByteStorage", "U8"},
    {DType::Bool, "bool", 1, "BoolStorage", "BOOL"},
    {DType::Complex128, "complex128", 16, "ComplexDoubleStorage", ""},
    {DType::Complex64, "complex64", 8, "ComplexFloatStorage", "C64"},
    {DType::Complex32, "complex32", 4, "", ""},
    {DType::QInt8, "qint8", 1, "QInt8Storage", ""},
    {DType::QUInt8, "quint8", 1, "QUInt8Storage", ""},
    {DType::QInt32, "qint32", 4, "QInt32Storage", ""},
    {DType::QUInt4x2, "quint4x2", 1, "QUInt4x2Storage", ""},
    {DType::QUInt2x4, "quint2x4", 1, "QUInt2x4Storage", ""},
    {DType::Float8_e5m2, "float8_e5m2", 1, "", "F8_E5M2"},
    {DType::Float8_e4m3fn, "float8_e4m3fn", 1, "", "F8_E4M3"},
    {DType::Float8_e5m2fnuz, "float8_e5m2fnuz", 1, "", "F8_E5M2FNUZ"},
    {DType::Float8_e4m3fnuz, "float8_e4m3fnuz", 1, "", "F8_E4M3FNUZ"},
    {DType::Float8_e8m0fnu, "float8_e8m0fnu", 1, "", "F8_E8M0"},
    {DType::Float4_e2m1fn_x2, "float4_e2m1fn_x2", 1, "", ""},
    {DType::UInt16, "uint16", 2, "", "U16"},
    {DType::UInt32, "uint32", 4, "", "U32"},
    {DType::UInt64, "uint64", 8, "", "U64"},
    {DType::Bits8, "bits8", 1, "", ""},
    {DType::Bits16, "bits16", 2, "", ""},
    {DType::Bits1x8, "bits1x8", 1, "", ""},
    {DType::Bits2x4, "bits2x4", 1, "", ""},
    {DType::Bits4x2, "bits4x2", 1, "", ""},
    {DType::Unknown, "unknown", 0, "", ""},
}};

const DTypeRow& row(DType t)
{
    return kRows.at(static_cast<std::size_t>(t));
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
    return row(t).safetensors;
}

std::optional<DType> dtypeFromSafetensors(std::string_view name)
{
    for (const auto& r : kRows) {
        if (!r.safetensors.empty() && r.safetensors == name) {
            return r.type;
        }
    }
    return std::nullopt;
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
