#include "diff/elements.h"

#include "checkpoint/tensor_bytes.h"
#include "util/bytes.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>

namespace ckpt::diff::detail {
namespace {

constexpr std::uint64_t kGatherSlack = std::uint64_t{64} << 20U;

template <class U> U load(const std::byte* p)
{
    U u;
    std::memcpy(&u, p, sizeof(U));
    return u;
}

template <class U, class Fn> void decodeWith(Bytes bytes, std::size_t first, std::size_t count, double* out, Fn&& fn)
{
    const std::byte* p = bytes.data() + first * sizeof(U);
    for (std::size_t i = 0; i < count; ++i, p += sizeof(U)) {
        out[i] = fn(load<U>(p));
    }
}

// Every byte of a float8 type as its double, built once per type (util/dtype's float8ToDouble).
const std::array<double, 256>& float8Table(DType t)
{
    static constexpr std::array<DType, 5> kKinds{DType::Float8_e5m2, DType::Float8_e4m3fn, DType::Float8_e5m2fnuz,
                                                 DType::Float8_e4m3fnuz, DType::Float8_e8m0fnu};
    static const auto tables = [] {
        std::array<std::array<double, 256>, kKinds.size()> all{};
        for (std::size_t k = 0; k < kKinds.size(); ++k) {
            for (std::size_t b = 0; b < 256; ++b) {
                all.at(k).at(b) = float8ToDouble(kKinds.at(k), static_cast<std::uint8_t>(b));
            }
        }
        return all;
    }();
    const auto* it = std::find(kKinds.begin(), kKinds.end(), t);
    return tables.at(it == kKinds.end() ? 0 : static_cast<std::size_t>(it - kKinds.begin()));
}

template <class T> double asDouble(T v)
{
    return static_cast<double>(v);
}

}  // namespace

Expected<void> readTensorBytes(const Checkpoint& c, const TensorEntry& t, TensorBytes& out)
{
    out.bytes = {};
    out.owned.clear();
    // A quantized tensor's storage holds its integer values in the same strided layout; a nested
    // one is indexed as its flat buffer of values (checkpoint/layout.h), its layout compared apart.
    const bool quantized = t.form == pickle::TensorForm::Quantized;
    const bool nested = t.form == pickle::TensorForm::Nested;
    if (!t.storage.valid() || (t.form != pickle::TensorForm::Strided && !quantized && !nested)) {
        return makeError(ErrorCode::Unsupported, "tensor '" + t.path + "' has no plain strided storage");
    }
    const StorageEntry& s = c.storages[t.storage];
    const std::uint64_t es = elementSize(t.dtype);
    if (t.numel != 0 && (t.shape.size() != t.stride.size() || t.storageOffset < 0 ||
                         std::any_of(t.stride.begin(), t.stride.end(), [](std::int64_t d) { return d < 0; }))) {
        return makeError(ErrorCode::Corrupt, "tensor '" + t.path + "' has an inconsistent view");
    }
    const std::uint64_t end = viewByteExtent(t.dtype, t.storageOffset, t.shape, t.stride).end;
    if (es == 0 || !s.present || end > s.nbytes) {
        return makeError(ErrorCode::Truncated, "tensor '" + t.path + "' reaches past the bytes its storage has");
    }
    if (t.numel == 0) {
        return {};
    }
    if (s.inMapping() && isCContiguous(t.shape, t.stride)) {
        const std::uint64_t at = s.fileOffset + static_cast<std::uint64_t>(t.storageOffset) * es;
        if (at + t.nbytes > c.bytes.size()) {
            return makeError(ErrorCode::Truncated, "tensor '" + t.path + "' reaches past the end of the file");
        }
        out.bytes = c.bytes.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(t.nbytes));
        return {};
    }
    // An assembled storage (a set's view, set_view.h) may be a whole ZeRO param group: a contiguous
    // tensor reads its own bytes only, never the group.
    // Its memory is reserved once the first bytes arrive: a tensor its set cannot assemble (chunks
    // that repeat elements, set_view.h) is refused by the read before anything is allocated, and one
    // larger than memory is a Limit error, not an abort.
    if (s.assembled && isCContiguous(t.shape, t.stride)) {
        std::optional<Error> failed;
        auto read =
            c.streamStorage(t.storage, static_cast<std::uint64_t>(t.storageOffset) * es, t.nbytes, [&](Bytes b) {
                if (out.owned.capacity() < t.nbytes) {
                    try {
                        out.owned.reserve(static_cast<std::size_t>(t.nbytes));
                    } catch (const std::bad_alloc&) {
                        failed = makeError(ErrorCode::Limit, "tensor '" + t.path + "' is " + humanBytes(t.nbytes) +
                                                                 ", more than this machine can hold to compare");
                        return false;
                    }
                }
                out.owned.insert(out.owned.end(), b.begin(), b.end());
                return true;
            });
        if (failed) {
            return *failed;
        }
        if (!read) {
            return c.withPath(read.error());
        }
        out.bytes = out.owned;
        return {};
    }
    // A view repeating its storage (stride 0) would be materialised in full: bounded as convert
    // bounds safetensors output, so a hostile shape cannot ask for gigabytes.
    if (t.nbytes > 4 * s.nbytes + kGatherSlack) {
        return makeError(ErrorCode::Limit, "tensor '" + t.path + "' repeats its storage's bytes more than 4 times");
    }
    std::vector<std::byte> scratch;
    auto storage = c.storageData(t.storage, scratch);
    if (!storage) {
        return c.withPath(storage.error());
    }
    if (storage->size() < end) {
        return makeError(ErrorCode::Truncated, "tensor '" + t.path + "' reaches past the bytes its storage has");
    }
    out.owned.reserve(static_cast<std::size_t>(t.nbytes));
    forEachCOrderRun(t.shape, t.stride, t.storageOffset, static_cast<std::size_t>(es),
                     [&](std::uint64_t at, std::uint64_t n) {
                         const Bytes run = storage->subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(n));
                         out.owned.insert(out.owned.end(), run.begin(), run.end());
                         return true;
                     });
    out.bytes = out.owned;
    return {};
}

bool hasNumericValue(DType t)
{
    switch (t) {
    case DType::Float64:
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Int64:
    case DType::Int32:
    case DType::Int16:
    case DType::Int8:
    case DType::UInt8:
    case DType::UInt16:
    case DType::UInt32:
    case DType::UInt64:
    case DType::Bool:
    case DType::Complex128:
    case DType::Complex64:
    case DType::Complex32:
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

std::size_t partsPerElement(DType t)
{
    return isComplex(t) ? 2 : 1;
}

DType partType(DType t)
{
    switch (t) {
    case DType::Complex128:
        return DType::Float64;
    case DType::Complex64:
        return DType::Float32;
    case DType::Complex32:
        return DType::Float16;
    default:
        return t;
    }
}

void decode(DType t, Bytes bytes, std::size_t first, std::size_t count, double* out)
{
    switch (t) {
    case DType::Float64:
        decodeWith<std::uint64_t>(bytes, first, count, out, [](auto u) { return std::bit_cast<double>(u); });
        break;
    case DType::Float32:
        decodeWith<std::uint32_t>(bytes, first, count, out,
                                  [](auto u) { return static_cast<double>(std::bit_cast<float>(u)); });
        break;
    case DType::Float16:
        decodeWith<std::uint16_t>(bytes, first, count, out, [](auto u) { return halfToDouble(u); });
        break;
    case DType::BFloat16:
        decodeWith<std::uint16_t>(bytes, first, count, out,
                                  [](auto u) { return static_cast<double>(bfloat16ToFloat(u)); });
        break;
    case DType::Int64:
        decodeWith<std::int64_t>(bytes, first, count, out, asDouble<std::int64_t>);
        break;
    case DType::Int32:
        decodeWith<std::int32_t>(bytes, first, count, out, asDouble<std::int32_t>);
        break;
    case DType::Int16:
        decodeWith<std::int16_t>(bytes, first, count, out, asDouble<std::int16_t>);
        break;
    case DType::Int8:
        decodeWith<std::int8_t>(bytes, first, count, out, asDouble<std::int8_t>);
        break;
    case DType::UInt8:
        decodeWith<std::uint8_t>(bytes, first, count, out, asDouble<std::uint8_t>);
        break;
    case DType::UInt16:
        decodeWith<std::uint16_t>(bytes, first, count, out, asDouble<std::uint16_t>);
        break;
    case DType::UInt32:
        decodeWith<std::uint32_t>(bytes, first, count, out, asDouble<std::uint32_t>);
        break;
    case DType::UInt64:
        decodeWith<std::uint64_t>(bytes, first, count, out, asDouble<std::uint64_t>);
        break;
    case DType::Bool:
        decodeWith<std::uint8_t>(bytes, first, count, out, [](auto u) { return u != 0 ? 1.0 : 0.0; });
        break;
    case DType::Float8_e5m2:
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2fnuz:
    case DType::Float8_e4m3fnuz:
    case DType::Float8_e8m0fnu: {
        const auto& table = float8Table(t);
        decodeWith<std::uint8_t>(bytes, first, count, out, [&](auto u) { return table[u]; });
        break;
    }
    default:
        std::memset(out, 0, count * sizeof(double));
        break;
    }
}

DType quantizedIntType(DType t)
{
    switch (t) {
    case DType::QInt8:
        return DType::Int8;
    case DType::QUInt8:
        return DType::UInt8;
    case DType::QInt32:
        return DType::Int32;
    default:
        return DType::Unknown;
    }
}

}  // namespace ckpt::diff::detail
