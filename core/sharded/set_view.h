// A set opened as one Checkpoint: the state dict its consolidation writes (the same pickle, the same
// storages), each storage's bytes read in place from the files that hold them when asked, never
// copied to a consolidated file first. The single-file rules (`check`, `--values`, `--against`) run
// on it as on any checkpoint; its storages are StorageEntry::assembled (checkpoint.h).
#pragma once

#include "checkpoint/checkpoint.h"
#include "sharded/sharded.h"
#include "sharded/zero.h"

namespace ckpt::sharded {

// A Hugging Face set: its shards' storages as they are (a storage shared inside a shard stays
// shared, a restored tie views its kept tensor). Unsupported when a shard holds a tensor that is no
// plain strided one, as the consolidation refuses it.
Expected<CheckpointPtr> viewOf(const ShardedSet& set);

// A DeepSpeed ZeRO folder: the fp32 model zero_to_fp32 rebuilds, laid out as `convert DIR -o`
// writes it (a stage 1/2 param group one storage its params view), each storage assembled from the
// ranks' partitions (a bf16 buffer cast to float32 as it is read).
// Without `groupStorages` each tensor has a storage of its own, which an edit, split or export can
// move alone (what `convert DIR` with edits reads).
Expected<CheckpointPtr> viewOf(const zero::Set& set, bool groupStorages = true);

}  // namespace ckpt::sharded
