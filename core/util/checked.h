// Size arithmetic on numbers a file declares: a shape of [2^62, 4] or a chunk of 2^62 float32
// elements must fail, not wrap to a small buffer that is then written past. Every element count,
// byte size and offset computed from a file goes through these.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

namespace ckpt {

// a * b and a + b into `out`, computed in out's type; false (and `out` unspecified) when the
// result does not fit.
template <class T> [[nodiscard]] bool checkedMul(std::type_identity_t<T> a, std::type_identity_t<T> b, T& out)
{
    return !__builtin_mul_overflow(a, b, &out);
}
template <class T> [[nodiscard]] bool checkedAdd(std::type_identity_t<T> a, std::type_identity_t<T> b, T& out)
{
    return !__builtin_add_overflow(a, b, &out);
}

// The element count of `shape`, nullopt when a dimension is negative or the product overflows
// (int64, as torch's numel is).
[[nodiscard]] inline std::optional<std::uint64_t> checkedNumel(const std::vector<std::int64_t>& shape)
{
    std::int64_t n = 1;
    for (const auto d : shape) {
        if (d < 0 || !checkedMul(n, d, n)) {
            return std::nullopt;
        }
    }
    return static_cast<std::uint64_t>(n);
}

// The bytes of `numel` elements of `elementSize` bytes, nullopt past what a size_t (and so a
// buffer or a file offset) can hold.
[[nodiscard]] inline std::optional<std::uint64_t> checkedBytes(std::uint64_t numel, std::uint64_t elementSize)
{
    std::uint64_t n = 0;
    if (!checkedMul(numel, elementSize, n) || n > static_cast<std::uint64_t>(INT64_MAX)) {
        return std::nullopt;
    }
    return n;
}

}  // namespace ckpt
