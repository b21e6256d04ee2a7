// A set opened as one Checkpoint: the state dict its consolidation writes (the same pickle, the same
// storages), each storage's bytes read in place from the files that hold them when asked, never
// copied to a consolidated file first. The single-file rules (`check`, `--values`, `--against`) run
// on it as on any checkpoint; its storages are StorageEntry::assembled (checkpoint.h).
#pragma once

#include "checkpoint/checkpoint.h"
#include "sharded/listing.h"
#include "sharded/sharded.h"
#include "sharded/zero.h"

namespace ckpt::sharded {

// A Hugging Face set: its shards' storages as they are (a storage shared inside a shard stays
// shared, a restored tie views its kept tensor). Unsupported when a shard holds a tensor that is no
// plain strided one, as the consolidation refuses it.
Expected<CheckpointPtr> viewOf(const ShardedSet& set);

// A Hugging Face set that is no one checkpoint (a shard holds a quantized tensor), as its shards
// each opened alone: diff compares it file by file. Each part keeps its shard's tables but not its
// file, and reads its storages through the set's few open shards (ShardedSet::shard), so a set of
// more shards than `ulimit -n` compares (holding each shard open failed with EMFILE). Refuses an
// incomplete set.
Expected<std::vector<CheckpointPtr>> partsOf(const ShardedSet& set);

// A DeepSpeed ZeRO folder: the fp32 model zero_to_fp32 rebuilds, laid out as `convert DIR -o`
// writes it (a stage 1/2 param group one storage its params view), each storage assembled from the
// ranks' partitions (a bf16 buffer cast to float32 as it is read).
// Without `groupStorages` each tensor has a storage of its own, which an edit, split or export can
// move alone (what `convert DIR` with edits reads).
Expected<CheckpointPtr> viewOf(const zero::Set& set, bool groupStorages = true);

namespace detail {
// The view over `c`'s arena and root (filled by the format's reader): the storage table of sizes
// `nbytes`, every storage read through `source`, and the tree built as a file's is. For the formats
// that build a view (set_view.cpp, dcp.cpp, fsdp.cpp).
Expected<CheckpointPtr> finishView(std::shared_ptr<Checkpoint> c, const std::vector<std::uint64_t>& nbytes,
                                   std::shared_ptr<const StorageSource> source);
}  // namespace detail

// A set that cannot be read whole (a shard missing), as one Checkpoint made from its listing: every
// tensor it lists with its dtype, shape and saved device, and each read of their bytes refused with
// `why`. What the window shows of an incomplete set, so its tree and findings are there to read.
Expected<CheckpointPtr> listingView(const SetListing& listing, const Error& why);

// The set at `loc` opened whole as one Checkpoint, the model `convert DIR -o` writes (its format's
// SetFormat::open, formats.h): an incomplete set is the consolidation's refusal; a ZeRO folder is
// read with `zeroOptions` (weights, optimizer, and whether a param group is one storage). A kind
// that is only detected (Megatron's legacy sets) is refused with the reason.
// `control`, as readSet takes it (formats.h): told of each member file, and a stop ends the read.
Expected<CheckpointPtr> openView(const SetLocation& loc, const zero::Options& zeroOptions = {.groupStorages = true},
                                 const OpenControl& control = {});

// What a path names, opened as one Checkpoint: with `asSet`, the set it stands for (wholeSetInput, listing.h) as
// openView reads it; otherwise, or when it stands for no set, the file itself (openCheckpoint). The
// test-load engines open what the client hands them through this, so a set is loaded in place.
Expected<CheckpointPtr> openInput(const std::string& path, bool asSet);

}  // namespace ckpt::sharded
