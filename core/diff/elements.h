// Internal to the diff stage: a tensor's C-order bytes as one span, and its elements as doubles.
#pragma once

#include "checkpoint/checkpoint.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

namespace ckpt::diff::detail {

// A tensor's C-order bytes: a view of the mapping for a contiguous tensor in a stored record or a
// plain file (every torch.save tensor, every safetensors one), else gathered into `owned` (views
// over part of a storage in another order, deflated records).
struct TensorBytes {
    Bytes bytes;
    std::vector<std::byte> owned;
};

// The view is checked against its storage first: the index records a view past its storage's end
// without refusing the file, and such a tensor has no bytes to compare.
Expected<void> readTensorBytes(const Checkpoint& c, const TensorEntry& t, TensorBytes& out);

// Whether elements of `t` can be read as numbers; complex types as two numbers each.
[[nodiscard]] bool hasNumericValue(DType t);
// Numbers per element: 2 for complex types, 1 otherwise.
[[nodiscard]] std::size_t partsPerElement(DType t);
// The scalar type of one part of a complex type (Complex64 -> Float32); `t` otherwise.
[[nodiscard]] DType partType(DType t);

// Decodes `count` parts of type `t` (partType) starting at part `first` of `bytes` into `out`.
void decode(DType t, Bytes bytes, std::size_t first, std::size_t count, double* out);

// (A quantized tensor's quantizer, how its integers map to values, is checkpoint/layout.h's.)
// The integer type a quantized dtype stores (QInt8 -> Int8); Unknown for packed sub-byte types.
[[nodiscard]] DType quantizedIntType(DType t);

}  // namespace ckpt::diff::detail
