// Tensors that are not one strided view of one storage, as people read them. A nested tensor
// (torch.nested, docs/format.md §4.4) is indexed as its flat buffer of values (TensorEntry's dtype,
// shape, stride and offset are the buffer's, so statistics and comparisons see the real values);
// its components' shapes live in three small int64 tensors beside it and are read from there.
#pragma once

#include "checkpoint/checkpoint.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ckpt {

struct NestedComponent {
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> stride;
    std::int64_t offset = 0;  // elements into the buffer
    friend bool operator==(const NestedComponent&, const NestedComponent&) = default;
};

// `_rebuild_nested_tensor(buffer, sizes, strides, offsets)`: row i of `sizes` and `strides` and
// element i of `offsets` are component i's view of the buffer. An error when the tensor is not a
// nested one or those tensors cannot be read.
// A jagged one (`torch.nested.nested_tensor(..., layout=torch.jagged)`, 2.x's NestedTensor,
// pickled as `_rebuild_njt({"values", "offsets", "lengths", "_ragged_idx", ...})`) is indexed the same
// way, as its values buffer ([sum of the ragged lengths, ...]); its components are views of it.
Expected<std::vector<NestedComponent>> nestedComponents(const Checkpoint& c, const TensorEntry& t);
// Whether a nested tensor has the jagged layout rather than the strided one.
[[nodiscard]] bool isJagged(const Checkpoint& c, const TensorEntry& t);

// A sparse tensor's stored tensors (`_rebuild_sparse_tensor(layout, data)`): COO's indices and
// values, a compressed layout's compressed and plain indices and values; empty when unreadable.
struct SparsePart {
    std::string name;  // "indices", "values", ...
    DType dtype = DType::Unknown;
    std::vector<std::int64_t> shape;
    pickle::ValueId value;  // the tensor in the arena
};
[[nodiscard]] std::vector<SparsePart> sparseParts(const Checkpoint& c, const TensorEntry& t);
// A tensor of the arena that no node shows (a sparse tensor's part) as an index entry, so its bytes
// can be read like any strided tensor's; `path` names it in errors.
[[nodiscard]] TensorEntry entryOf(const Checkpoint& c, pickle::ValueId tensor, const std::string& path);
// The stored values' count: the values tensor's first dimension.
[[nodiscard]] std::optional<std::int64_t> sparseNnz(const Checkpoint& c, const TensorEntry& t);

// The shape column: `[2, 3]`; a nested tensor as `nested 2: [2, 3], [2, 2]` (its components, the
// first few; `jagged 2: ...` for the jagged layout); a sparse one as `sparse [4, 4], nnz 3` (its dense shape and stored
// values).
[[nodiscard]] std::string tensorShapeText(const Checkpoint& c, const TensorEntry& t);

// How a quantized tensor's integers map to values: _rebuild_qtensor's quantizer_params
// (torch/_utils.py), `(qscheme, scale, zero_point)` per tensor, values `(q - zero_point) * scale`,
// or `(qscheme, scales, zero_points, axis)` per channel. `text` names it for reports and is what
// two tensors compare by; a per-channel quantizer's scale and zero-point tensors appear in it by
// content hash.
struct Quantizer {
    std::string scheme;  // "per_tensor_affine", "per_channel_affine", ... (the qscheme's name)
    bool perTensorAffine = false;
    double scale = 1;
    std::int64_t zeroPoint = 0;
    // A per-channel quantizer's axis, scales and zero points (tensors of the file, read here).
    std::optional<std::int64_t> axis;
    struct Values {
        DType dtype = DType::Unknown;
        std::uint64_t count = 0;
        std::vector<double> values;      // the first kShownValues, in order
        std::optional<double> min, max;  // over all of them; none when they could not be read
    };
    static constexpr std::size_t kShownValues = 8;
    std::optional<Values> scales;
    std::optional<Values> zeroPoints;
    std::string text;  // "per_tensor_affine, scale 0.1, zero point 10" (compared by diff; hashes tensors)
    // For people: "scale 0.1, zero point 10"; "axis 0: 4 scales 0.0123 to 0.0456, zero points 0 to 0".
    [[nodiscard]] std::string summary() const;
};
// Empty for a tensor that is not quantized.
[[nodiscard]] std::optional<Quantizer> quantizerOf(const Checkpoint& c, const TensorEntry& t);

}  // namespace ckpt
