// Per-rank FSDP pickles (docs/format.md §12): each rank's torch.save(model.state_dict()) under
// SHARDED_STATE_DICT, every parameter a ShardedTensor or a DTensor. Both reduce to
// _rebuild_from_type_v2(_rebuild_wrapper_subclass, cls, args, state) (torch/_tensor.py), so the
// ordinary reader sees a storage-less wrapper whose state holds the rank's local tensor(s) and
// how they sit in the global tensor: a ShardedTensor's __getstate__ tuple (local_shards,
// ShardedTensorMetadata, ProcessGroupState, sharding_spec, init_rrefs), a DTensor's
// `_local_tensor` and `_spec` (mesh coordinate + placements). Nothing is unpickled into torch
// objects, so no process group is needed.
#pragma once

#include "checkpoint/checkpoint.h"
#include "sharded/dcp.h"
#include "sharded/sharded.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ckpt::sharded::fsdp {

// Whether the file's pickle names ShardedTensor or DTensor (a sniff of its first MiB, where
// data.pkl lies in a torch zip); cheap enough for detection.
[[nodiscard]] bool namesShardedTensors(const std::string& path);

// `{stem}rank{R}{ext}` (accelerate's `pytorch_model_fsdp_0_rank3.bin`): the pattern its rank
// siblings share ("pytorch_model_fsdp_0_rank*.bin") and R.
[[nodiscard]] std::optional<std::pair<std::string, int>> rankFileName(const std::string& name);

struct LocalShard {
    std::uint32_t file = 0;  // index into Set::files
    TensorEntry tensor;      // the local tensor: storage, dtype, shape, strides, offset
    dcp::detail::Box box;    // where it sits in the global tensor
};

struct Tensor {
    std::string key;
    bool dtensor = false;
    bool plain = false;  // an ordinary tensor in every rank file (kept from the first)
    DType dtype = DType::Unknown;
    std::vector<std::int64_t> size;
    std::string device;                      // where the wrapper (or plain tensor) was saved
    std::vector<LocalShard> shards;          // the ranks' local shards present
    std::vector<dcp::detail::Box> declared;  // every rank's box, as the file says
    [[nodiscard]] std::uint64_t numel() const;
};

struct RankFile {
    std::string path;                      // its checkpoint: Set::sources, by the same index
    std::vector<std::string> otherValues;  // key paths of values that are no tensor (optimizer steps, ...)
    int rank = -1;                         // ProcessGroupState.global_rank or the DTensor mesh coordinate
    int world = -1;                        // ProcessGroupState.global_world_size or the mesh's size
};

struct Set {
    SetLocation loc;
    bool oneFile = false;  // a rank file opened alone: its local shards, not the consolidated view
    std::vector<RankFile> files;
    MemberCheckpoints sources;  // parallel to files: each read again when the cache let it go
    std::vector<Tensor> tensors;
    std::vector<SetFinding> findings;
    [[nodiscard]] bool complete() const;
};

// `oneFile`: the rank file `loc.index` alone; else every rank file in `loc.dir` named like it
// (`{stem}rank{R}{ext}`). Unsupported for LOCAL_STATE_DICT dumps (`_flat_param`), which cannot be
// unflattened without the model.
Expected<Set> open(const SetLocation& loc, bool oneFile);
// The same from `folder` (source/folder.h): the rank files listed where it can be listed (a local
// folder, an s3:// prefix), else asked for by rank from 0 (plain HTTP); a remote one read by range.
Expected<Set> open(const source::FolderPtr& folder, const SetLocation& loc, bool oneFile);

// What consolidate writes, as one Checkpoint read in place (sharded/set_view.h, box_view.h): each
// global tensor a storage assembled from its local shards as it is read. Refuses what consolidate
// refuses.
Expected<CheckpointPtr> view(const Set& set);

// The consolidated state dict (an OrderedDict of plain tensors, each assembled from the ranks'
// boxes and written before the next is read). Refuses an incomplete set, a single rank file, and
// files holding values besides tensors (optimizer state), which it would otherwise drop.
Expected<ConsolidateResult> consolidate(const Set& set, const std::string& outPath);

}  // namespace ckpt::sharded::fsdp
