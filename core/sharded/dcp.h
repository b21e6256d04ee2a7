// torch.distributed.checkpoint (DCP) directories (docs/format.md §12): `.metadata`, a plain pickle of
// `Metadata`, names every item of the flattened state dict; tensors are boxes (chunks) of a global
// tensor, each a complete torch.save zip at [offset, offset + length) of a `__R_N.distcp` file;
// other values are torch.save'd objects the same way. Nothing here runs any of it: `.metadata`
// goes through the project's unpickler and each item through the ordinary zip reader on a
// sub-range of the file's mapping.
#pragma once

#include "checkpoint/checkpoint.h"
#include "sharded/members.h"
#include "sharded/sharded.h"
#include "util/bytes.h"
#include "util/error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::sharded::dcp {

// How an item's bytes are stored (filesystem.py `_write_item`): a torch.save zip, FileSystemWriter's
// default; that zip as one zstd frame, when `_StorageInfo.transform_descriptors` is
// ["stream.zstd/1"] (the ZStandard stream extension, _extension.py); or, for a tensor chunk of a
// `serialization_format=SAFETENSORS` save, the chunk's C-order bytes inside the safetensors file that
// ends its data file (`offset` and `length` then point at those bytes, resolved by open()).
enum class Encoding : std::uint8_t { TorchSave, Zstd, Raw };

// Where one item's bytes are: `_StorageInfo(relative_path, offset, length)`.
struct Location {
    std::uint32_t file = 0;  // index into Metadata::files
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    bool found = false;  // storage_data lists the item
    Encoding encoding = Encoding::TorchSave;
    // The most bytes the item can hold once read: `length`, or what a zstd frame of that length can
    // inflate to at most (archive::kZstdMostInflation).
    [[nodiscard]] std::uint64_t mostBytes() const;
};

struct Chunk {
    std::vector<std::int64_t> offsets;
    std::vector<std::int64_t> sizes;
    Location at;
};

// A planner_data path element: a dict key, or a list index (set_element pads lists with None).
struct PathElement {
    bool isIndex = false;
    std::int64_t index = 0;
    std::string key;
};

struct Item {
    std::string fqn;                // the flattened key
    std::vector<PathElement> path;  // planner_data[fqn], or {fqn} when absent
    bool isTensor = false;
    DType dtype = DType::Unknown;
    std::vector<std::int64_t> size;  // global
    bool requiresGrad = false;
    std::vector<Chunk> chunks;  // tensors
    Location bytes;             // BYTE_IO values
    [[nodiscard]] std::uint64_t numel() const;
};

struct Metadata {
    std::vector<Item> items;         // in state_dict_metadata order
    std::vector<std::string> files;  // relative paths storage_data names, in first use
    std::string version;             // "" before PyTorch 2.4's `version`
    // The pickled class when it is a subclass of DCP's Metadata rather than that class itself
    // ("megatron.core.dist_checkpointing.mapping.MCoreMetadata"), "" for Metadata; its extra
    // fields (Megatron's mcore_data) are named in extraFields and otherwise not read.
    std::string subclass;
    std::vector<std::string> extraFields;
    bool oldTensorProperties = false;
    bool hasPlannerData = false;
    // The size of the .metadata pickle(s) read: what is built from them (items, paths, the nested
    // dict of a consolidation) is held to the single-file memory budget (util/budget.h).
    std::uint64_t pickleBytes = 0;
    // The pickle's own unsafe-callable findings (sharded::detail::unsafeCodeFindings), moved into
    // the Set's by open().
    std::vector<SetFinding> findings;
};

// Parses `.metadata`'s bytes: a pickled Metadata, or an instance of any class with Metadata's state
// (state_dict_metadata, storage_data), as Megatron-LM's MCoreMetadata subclass adds mcore_data to
// it and dcp.load reads it through the base class's fields. Corrupt when it is neither; Unsupported, naming it,
// for the 1.12 prototype (`storage_key` records) and for transforms other than one stream.zstd/1.
// `name` is the file's, for messages and findings.
Expected<Metadata> parseMetadata(Bytes data, const std::string& name = ".metadata");

// The rank R of a `__R.metadata` file name: what FileSystemWriter.finish writes on each rank instead
// of the one `.metadata` when dcp.save runs with use_collectives=False (filesystem.py
// _get_metadata_path, PyTorch 2.9+). nullopt for any other name.
std::optional<int> rankOfMetadata(const std::string& name);

struct Set {
    SetLocation loc;
    Metadata meta;
    // Per file of meta.files, in its order, from the set's folder: mapped when read, a few kept open
    // (members.h), so a save of more ranks than the descriptor limit opens; or read by range.
    MemberFiles data;
    // The data files written with serialization_format=SAFETENSORS (meta.files' names): each ends in a
    // safetensors file holding its rank's tensor chunks.
    std::vector<std::string> safetensorsFiles;
    std::size_t zstdItems = 0;  // items stored through the ZStandard stream extension
    // The BYTE_IO items that hold a module's `_extra_state` (transform::isExtraStateKey), by fqn:
    // TransformerEngine's FP8 state, which convert keeps unless told to drop it.
    std::vector<std::string> extraState;
    std::vector<SetFinding> findings;  // coverage and missing files
    // BYTE_IO values whose pickle calls code (their unsafe-callable findings): the view holds them,
    // for check's rules and convert's plan to drop; consolidate refuses to copy them.
    std::vector<std::string> valuesCallingCode;
    [[nodiscard]] bool complete() const;
};

// Reads `.metadata`, maps the data files it names and checks coverage as _validate_global_plan
// does (chunk-out-of-bounds, chunk-overlap, chunk-hole) plus shard-missing for absent files.
Expected<Set> open(const SetLocation& loc);
// The same from `folder` (source/folder.h: a local folder, a URL's, an S3 prefix): `.metadata`, or
// where the folder can be listed the __R.metadata files, then the data files they name, each read
// by range where it is not mapped. `loc` names the set in messages.
Expected<Set> open(const source::FolderPtr& folder, const SetLocation& loc);

// The torch.save zip of one BYTE_IO item: a Checkpoint over [offset, offset + length) of its file's
// mapping (no copy), which it keeps mapped while it lives: hold few at once. A zstd item is inflated
// into memory the Checkpoint owns, at most the single-file read budget for its stored bytes.
Expected<CheckpointPtr> openItem(const Set& set, const Location& at, const std::string& what);

// One BYTE_IO value in a short Python-like repr, or the reason it cannot be read.
std::string valueText(const Set& set, const Item& item);

// What dcp_to_torch_save writes: the nested state dict rebuilt from planner_data, each global
// tensor assembled from its chunk boxes and written before the next one is read, so memory is
// about the largest tensor. Refuses (Corrupt) an incomplete set, and a value that calls code
// (detail::copiesCode), before the output exists.
Expected<ConsolidateResult> consolidate(const Set& set, const std::string& outPath);

// The same state dict as one Checkpoint read in place (sharded/set_view.h, box_view.h): each
// global tensor a storage assembled from its chunks as it is read. Refuses an incomplete set.
Expected<CheckpointPtr> view(const Set& set);

namespace detail {
// What DCP and FSDP share: a global tensor rebuilt from N-d boxes held by separate tensors.
struct Box {
    std::vector<std::int64_t> offsets;
    std::vector<std::int64_t> sizes;
};
// _validate_global_plan's checks on one tensor's boxes, each problem as one line.
struct Coverage {
    std::vector<std::string> outOfBounds;
    std::vector<std::string> overlaps;
    std::vector<std::string> holes;
};
void checkBoxes(const std::string& name, const std::vector<std::int64_t>& size, const std::vector<Box>& boxes,
                Coverage& out);
// chunk-out-of-bounds / chunk-overlap / chunk-hole findings; `consequence` says what fails.
void coverageFindings(const Coverage& c, const std::string& consequence, std::vector<SetFinding>& out);
// Copies `src` (a strided tensor whose shape is the box's sizes, its storage's bytes in
// `storage`) into its box of the row-major global buffer `dst`.
Expected<void> placeBox(const std::string& name, DType dtype, const std::vector<std::int64_t>& size, const Box& box,
                        const TensorEntry& src, Bytes storage, std::vector<std::byte>& dst);
// Drops the pages of a read-only file mapping from this process's resident set once they have been
// copied out (they stay in the page cache): without it every byte read from the mapping counts
// toward peak RSS, and consolidating a model would look like holding the whole model.
void releasePages(Bytes mapped);
}  // namespace detail

}  // namespace ckpt::sharded::dcp
