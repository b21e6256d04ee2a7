// Torch element types, with the three spellings a checkpoint uses for them: torch's dtype name
// (`float32`), the legacy storage class (`FloatStorage`, docs/format.md §4.2) and safetensors' code (`F32`).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ckpt {

enum class DType : std::uint8_t {
    Float64,
    Float32,
    Float16,
    BFloat16,
    Int64,
    Int32,
    Int16,
    Int8,
    UInt8,
    Bool,
    Complex128,
    Complex64,
    Complex32,
    QInt8,
    QUInt8,
    QInt32,
    QUInt4x2,
    QUInt2x4,
    Float8_e5m2,
    Float8_e4m3fn,
    Float8_e5m2fnuz,
    Float8_e4m3fnuz,
    Float8_e8m0fnu,
    Float4_e2m1fn_x2,
    UInt16,
    UInt32,
    UInt64,
    Bits8,
    Bits16,
    Bits1x8,
    Bits2x4,
    Bits4x2,
    Unknown,
};

inline constexpr int kDTypeCount = static_cast<int>(DType::Unknown) + 1;

// `float32`, `bfloat16`, ... as torch prints them without the `torch.` prefix.
[[nodiscard]] std::string_view dtypeName(DType t);
[[nodiscard]] std::optional<DType>
dtypeFromName(std::string_view name);              // accepts torch attribute aliases (float, half, long, ...)
[[nodiscard]] std::uint32_t elementSize(DType t);  // bytes; 0 for Unknown

// Typed storage class of the zip/legacy persistent id (`FloatStorage`); empty for dtypes that
// torch saves through UntypedStorage + `_rebuild_tensor_v3`.
[[nodiscard]] std::string_view storageClassName(DType t);
[[nodiscard]] std::optional<DType> dtypeFromStorageClass(std::string_view name);  // `UntypedStorage` -> UInt8

// safetensors' dtype codes (docs/format.md §10), from one table.
[[nodiscard]] std::string_view safetensorsName(DType t);  // empty when safetensors has no such type
[[nodiscard]] std::optional<DType> dtypeFromSafetensors(std::string_view name);  // nullopt for F4, F6_*
// Bits per element of every code safetensors knows, the sub-byte floats without a torch dtype
// included, so their sizes can still be checked.
[[nodiscard]] std::optional<std::uint64_t> safetensorsBits(std::string_view code);
// The type's position in safetensors' Dtype enum, which is ordered by alignment (its writer sorts
// tensors by it, descending); nullopt when safetensors has no such type.
[[nodiscard]] std::optional<std::size_t> safetensorsAlignmentRank(DType t);

// IEEE half-precision bits as the double they hold, exactly; a NaN keeps its sign and payload, as
// numpy's and c10's conversions keep them.
[[nodiscard]] double halfToDouble(std::uint16_t bits);

// bfloat16 bits as the float they hold, exactly: its top half (c10::BFloat16's conversion), NaNs
// and signs kept. The one decoder of bf16 for values, diff and consolidation's .float().
[[nodiscard]] inline float bfloat16ToFloat(std::uint16_t bits)
{
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16U);
}

// One byte of a float8 type (Float8_e5m2, _e4m3fn, _e5m2fnuz, _e4m3fnuz, _e8m0fnu) as the double it
// holds, exactly, following c10's definitions (e5m2 is half's upper byte; the fn/fnuz kinds have no
// Inf; e8m0 is an exponent alone); a NaN encoding gives a quiet NaN. 0 for other types.
[[nodiscard]] double float8ToDouble(DType t, std::uint8_t bits);

// Whether a value of this type can be NaN/Inf (used by the non-finite scan).
[[nodiscard]] bool isFloatingPoint(DType t);
[[nodiscard]] bool isComplex(DType t);

}  // namespace ckpt
