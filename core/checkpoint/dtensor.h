// A DTensor as torch.save writes it (docs/format.md §12): DTensor.__reduce_ex__ gives
// _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor, (cls, dtype, global size, stride, ...),
// state), and the state holds `_local_tensor`, this rank's piece as a plain tensor, and `_spec`, a
// DTensorSpec naming the DeviceMesh and one placement per mesh dimension. The reader keeps all of it
// as values; this is where their fields are found (the FSDP rank-file reader, the weights-only
// transform, the rules and inspect all ask here).
#pragma once

#include "pickle/value.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::dtensor {

// A field of an object's BUILD state: a dataclass __dict__, or the (dict, slots) pair of a slotted
// class (Shard, ShardMetadata, DTensor). Invalid when absent.
[[nodiscard]] pickle::ValueId stateField(const pickle::Arena& a, pickle::ValueId state, std::string_view name);
// The same field of an Object value's state.
// A torch.Size, tuple or list of ints, or nothing when it is anything else.
[[nodiscard]] std::optional<std::vector<std::int64_t>> intList(const pickle::Arena& a, pickle::ValueId id);
[[nodiscard]] pickle::ValueId objectField(const pickle::Arena& a, pickle::ValueId obj, std::string_view name);

struct Parts {
    pickle::ValueId local;       // `_local_tensor`: a plain strided tensor with a storage, or invalid
    pickle::ValueId mesh;        // the DeviceMesh object
    pickle::ValueId placements;  // a tuple (or list) of placement objects
};

// The parts of a tensor wrapped as torch.distributed.tensor.DTensor (any module path ending in
// `DTensor`); nullopt for every other tensor.
[[nodiscard]] std::optional<Parts> partsOf(const pickle::Arena& a, const pickle::TensorInfo& t);

// The mesh's shape. PyTorch up to 2.8 pickles the `mesh` tensor of global ranks; 2.9 to 2.13 a
// _MeshLayout (shape, stride) over the root's `_rank_map` (device_mesh.py __getstate__); 2.14 a
// _MeshLayout of `axes`, one _FlatLayout (shape, stride) per mesh dimension, whose size is the
// product of its shape (torch/distributed/_mesh_layout.py, _MeshLayout.top_level_sizes).
[[nodiscard]] std::optional<std::vector<std::int64_t>> meshShape(const pickle::Arena& a, pickle::ValueId mesh);

// "Shard(0), Replicate()" (placement_types.py's reprs, _StridedShard's split factor included).
[[nodiscard]] std::string placementsText(const pickle::Arena& a, pickle::ValueId placements);

// What the file holds of a DTensor: its local piece, shown beside the global shape.
struct LocalPiece {
    std::vector<std::int64_t> shape;
    std::uint64_t bytes = 0;
    std::string placements;                         // placementsText
    std::optional<std::vector<std::int64_t>> mesh;  // meshShape
};
[[nodiscard]] std::optional<LocalPiece> localPiece(const pickle::Arena& a, const pickle::TensorInfo& t);
// The bytes the file holds for a tensor of `nbytes` (its global numel x element size): a DTensor's
// local piece, `nbytes` for every other tensor. What totals count, so one rank's file does not
// claim the global size.
[[nodiscard]] std::uint64_t heldBytes(const pickle::Arena& a, const pickle::TensorInfo& t, std::uint64_t nbytes);

// The finding a file of DTensors gets, alone or as a folder: what PyTorch 2.11 and 2.14 were seen to
// do with a DTensor rank file outside a process group (tests/sharded/real/sets/torch_load_errors.json).
inline constexpr std::string_view kRankFilesCode = "dtensor-rank-files";
inline constexpr std::string_view kRankFilesTitle = "torch.load gives one rank's DTensors, and refuses them by default";
inline constexpr std::string_view kRankFilesDetail =
    "The rank files hold DTensors. With PyTorch 2.6+'s default weights_only=True, torch.load fails: "
    "\"Weights only load failed. ``torch.distributed.tensor`` must be imported to load DTensors\". With "
    "weights_only=False (or after importing torch.distributed.tensor) it returns DTensors whose local "
    "tensors hold this rank's piece only. `ckptscope convert` on the folder writes the consolidated plain "
    "tensors, which load anywhere.";

}  // namespace ckpt::dtensor
