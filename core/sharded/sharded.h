// Multi-file checkpoints: a set of files that together hold one model (docs/format.md §12 and §16).
//
// detectSet() names the format a path belongs to from its files alone (a directory, an index file,
// or any one shard or rank file). openSet() reads a Hugging Face sharded set as one view: every
// shard is an ordinary Checkpoint (so each shard's storages keep their own mapping and reader),
// read once for its tensor rows and opened again when its bytes are needed (members.h: a set may
// have more shards than a process may open files), and the set adds one row per tensor naming the
// shard that holds it. Every format is reached through the registry (formats.h): its reader, or
// for a set that is only named (Megatron's legacy tensor-parallel dirs), notRead's refusal.
#pragma once

#include "checkpoint/checkpoint.h"
#include "diagnose/diagnose.h"
#include "sharded/members.h"
#include "util/error.h"
#include "util/folder_member.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::sharded {

enum class SetKind : std::uint8_t {
    None,           // not part of a set we know: open it as one file
    HuggingFace,    // *.index.json + {stem}-0000i-of-0000N{.bin,.safetensors}
    DeepSpeedZero,  // latest + global_stepN/{mp_rank_00,zero_pp_rank_R_mp_rank_00}_*_states.pt
    Dcp,            // .metadata + __R_N.distcp (torch.distributed.checkpoint, Megatron torch_dist)
    Megatron,       // latest_checkpointed_iteration.txt + iter_N/mp_rank_TT/model_optim_rng.pt
    FsdpRanks,      // {stem}rank{R}{ext} pickles of ShardedTensor/DTensor (FSDP SHARDED_STATE_DICT, fsdp.h)
};
[[nodiscard]] std::string_view setKindName(SetKind k);

struct SetLocation {
    SetKind kind = SetKind::None;
    std::string dir;    // the set's folder
    std::string index;  // HF: the index file; DeepSpeed: the tag folder; DCP: .metadata
    std::string what;   // one line naming what was found, for messages
    // `index` is one member file read alone, not the set: an FSDP rank file, which holds its rank's
    // local shards and no consolidated tensor (setInput, listing.h).
    bool alone = false;
};

// Never fails: a path that is no set (or cannot be read) is SetKind::None, and the single-file
// reader then says what is wrong with it.
[[nodiscard]] SetLocation detectSet(const std::string& path);

// Every file the set at `loc` is read from, named as its format names them: a Hugging Face index
// and the shards its weight_map lists; ZeRO's `latest` and the tag folder's rank files; a DCP
// folder's .metadata, __R.metadata and .distcp files (Megatron's common.pt and metadata.json);
// FSDP rank files of one stem. By name only: nothing but a Hugging Face index is read.
[[nodiscard]] std::vector<std::string> memberFiles(const SetLocation& loc);

// Usage error when writing the file `output` would replace one of memberFiles(loc) (compared by
// inode or resolved path, so a symlink or hard link to a member counts): convert refuses it before
// anything is read or written, however the set was named and whatever the edits.
Expected<void> checkOutputOutsideSet(const SetLocation& loc, const std::string& output);

// A set-level problem, reported by `check` with a stable code (docs/findings.md).
// A set's finding: a finding as every rule gives one (diagnose::Finding: code, severity, title,
// detail, key paths, the convert options that act on it, which check prints and the window's Fix
// adds to the export), and where it is about.
struct SetFinding : diagnose::Finding {
    // About a value the set's view holds (a DCP BYTE_IO value's pickle): the single-file rules on
    // the view report it too, at its key path and with the fix, so checkSet says it once, theirs.
    bool inView = false;
};

struct SetTensor {
    std::string name;         // weight_map key: the consolidated state-dict key
    std::uint32_t shard = 0;  // index into ShardedSet::shardFiles
    TensorIndex tensor;       // in that shard's Checkpoint (ShardedSet::shard)
    // Copies of its rows in the shard, which is closed between reads: what the set shows and what
    // a consolidation's pickle is built from. `storage` is default for a storage-less tensor.
    TensorEntry entry;
    StorageEntry storage;
};

// Where a Hugging Face set's files come from when they are not files of a local folder (a set
// over HTTP, core/remote): its small text files (the index, config.json) and its shards, by the
// names the index gives them.
class SetFiles {
public:
    SetFiles() = default;
    SetFiles(const SetFiles&) = delete;
    SetFiles& operator=(const SetFiles&) = delete;
    SetFiles(SetFiles&&) = delete;
    SetFiles& operator=(SetFiles&&) = delete;
    virtual ~SetFiles() = default;
    // A file's text; nothing when it does not exist.
    [[nodiscard]] virtual Expected<std::optional<std::string>> readText(const std::string& name,
                                                                        std::uint64_t maxBytes) const = 0;
    // A shard opened as a checkpoint, the same one each time it is asked for; nothing when it does
    // not exist.
    [[nodiscard]] virtual Expected<std::optional<CheckpointPtr>> open(const std::string& name) const = 0;
    // How a file is named in messages and listings.
    [[nodiscard]] virtual std::string pathOf(const std::string& name) const = 0;
};

struct ShardedSet {
    SetKind kind = SetKind::None;
    std::string dir;
    std::string indexPath;
    std::vector<std::string> shardFiles;        // as the index names them, in first-use order
    std::vector<std::string> shardPaths;        // where each is (memberOfFolder), in the same order
    std::vector<std::string> shardErrors;       // "" where read, "missing", or why it cannot be read
    std::vector<Format> shardFormats;           // of each shard read
    std::vector<FileIdentity> shardIdentities;  // of each shard read, when it was read
    std::vector<SetTensor> tensors;             // in weight_map order, present ones only
    std::vector<SetFinding> findings;
    std::uint64_t declaredTotalSize = 0;  // metadata.total_size, 0 when absent
    // Names stored once under another (removed, kept), as the index metadata records them or
    // as config.json's model ties them (util/tied_pairs.h): restored as tensors of `tensors`
    // that view the kept one.
    std::vector<std::pair<std::string, std::string>> tiedNames;
    // The rule behind the names config.json's model ties (util/tied_pairs.h) over the whole set:
    // what decided the ties, the names restored (also in tiedNames) and those it could not know.
    TieReport ties;
    // config.json beside the index (its model class decides the ties; an FP8 set's quantization_config).
    std::optional<ModelConfig> config;
    [[nodiscard]] std::map<std::string, std::string> tiedMap() const { return {tiedNames.begin(), tiedNames.end()}; }
    [[nodiscard]] bool complete() const;  // no finding of severity error
    [[nodiscard]] bool shardRead(std::size_t i) const { return shardErrors[i].empty(); }
    // Shard `i` (one that was read) as a Checkpoint, opened again unless one of the few kept open:
    // hold it only while reading it. An Io error when the file changed since the set was read.
    [[nodiscard]] Expected<CheckpointPtr> shard(std::size_t i) const;
    // Shard `i` of a local set read from its file again, past the cache: a Checkpoint no one else
    // holds (what shard() caches), checked to be the file the set read.
    [[nodiscard]] Expected<CheckpointPtr> readShard(std::size_t i) const;
    // Every shard read is still the file that was read (a consolidation's last check).
    [[nodiscard]] Expected<void> checkUnchanged() const;

    // Shards kept open between reads: a parsed checkpoint costs more than a mapping, so fewer.
    static constexpr std::size_t kOpenShards = 8;
    std::shared_ptr<MemberLru<Checkpoint>> openShards = std::make_shared<MemberLru<Checkpoint>>(kOpenShards);
    // Set when the set's files are read through SetFiles rather than from `dir`.
    std::shared_ptr<const SetFiles> files;
};

// Reads the Hugging Face set `loc` names; another kind is Unsupported (its own reader reads it).
Expected<ShardedSet> openSet(const SetLocation& loc);
// Reads the Hugging Face set whose index is `indexName` among `files`; `dir` names the set.
Expected<ShardedSet> openSet(std::shared_ptr<const SetFiles> files, const std::string& indexName,
                             const std::string& dir);

// Writes the consolidated state dict as one torch zip (what torch.save(dict) writes), streaming
// one storage at a time from its shard. Refuses (Corrupt) an incomplete set before writing.
// Storages shared by several names within a shard stay shared (tied weights survive).
struct ConsolidateResult {
    std::string path;
    std::uint64_t bytes = 0;
    std::size_t tensors = 0;
    std::size_t files = 0;  // of the set, read for it (shards, DCP data files, rank files)
    // What the writer chose that a user should hear of ("4 _extra_state values kept, as ..."); "" if none.
    std::string note;
    // A Hugging Face set's ties config.json decided (ShardedSet::ties): its restored names are written
    // as views of their tensors, which the plan of a file's conversion would say (restoredTiesNote).
    TieReport ties;
};
Expected<ConsolidateResult> consolidateTorch(const ShardedSet& set, const std::string& outPath);
// The refusal of an incomplete set (Corrupt, naming its error findings), before anything is written.
Expected<void> checkConsolidatable(const ShardedSet& set);

// DeepSpeed ZeRO folders are zero.h's.

namespace detail {
// Every pickle a set reads goes through the single-file safety scan: `file`'s unsafe-callable
// findings (diagnose::unsafeCode, the one rule) appended to `out` as set findings, their title
// naming the member, their paths `file:key/path`. torch.load or dcp.load of the set would run them.
void unsafeCodeFindings(const Checkpoint& ckpt, const std::string& file, std::vector<SetFinding>& out);
// Whether `f` keeps a set from being read as one checkpoint: an error about its files, chunks or
// tensors. A pickle that calls code (unsafe-callable) does not: the tensors are all there, check's
// single-file rules run on the set, and convert drops the call and says so, as for one file.
[[nodiscard]] bool stopsTheRead(const SetFinding& f);
// The codes of the findings that stop the read, ", "-separated: what a refusal names.
[[nodiscard]] std::string stoppingCodes(const std::vector<SetFinding>& findings);
// A consolidation never copies a value whose pickle calls code (a DCP BYTE_IO value holding
// os.system): it refuses with these words (`what` names the value), which wouldCopyCode (listing.h)
// knows, and convert reads the set through its view instead, where the plan drops the call.
inline constexpr std::string_view kCallsCode = " calls code when unpickled (unsafe-callable)";
[[nodiscard]] Error copiesCode(const std::string& what, const std::string& path);

// Names of the index's weight_map files, in first use ([] when the index cannot be read).
std::vector<std::string> indexShardNames(const std::string& indexPath);

// A consolidated tensor whose bytes are pieces of storages in several files, written in order.
struct Piece {
    std::size_t source;
    StorageIndex storage;
    std::uint64_t byteOffset;
    std::uint64_t bytes;
};
struct Assembled {
    std::string name;
    DType dtype = DType::Float32;
    std::vector<std::int64_t> shape;
    std::vector<Piece> pieces;
    DType from = DType::Float32;         // the pieces' type when it is not `dtype` (cast to Float32 only)
    std::optional<std::size_t> aliasOf;  // the same tensor (storage) as tensors[*aliasOf]
    std::vector<std::string> parents;    // the nested dict keys it sits under (none: the root)
    // A leaf that is no tensor (an optimizer's step count, its param_groups), built into the
    // output's arena when the pickle is written; the tensor fields are then unused.
    std::function<pickle::ValueId(pickle::Arena&)> value;
    std::uint64_t aliasOffset = 0;  // with aliasOf: where this view starts in that storage, in elements
    // A storage in no dict, which the tensors aliasing it view at their aliasOffset: a ZeRO flat
    // group written whole, as zero_to_fp32's narrow(...).view(shape) params leave it.
    bool storageOnly = false;
};
// The consolidated pickle of assembled tensors (the storages keyed 0..n-1, nested dicts by
// `parents`), as writeAssembled writes it and a set's view (set_view.h) reads it: the root and,
// per storage, the tensor whose pieces fill it.
struct AssembledPickle {
    pickle::ValueId root;
    std::vector<std::size_t> recorded;
};
Expected<AssembledPickle> assembledPickle(const std::vector<Assembled>& tensors, pickle::Arena& a);

// The whole elements of `in` (of type `from`) as float32 into `out`, as Tensor.float() converts
// them (round to nearest for wider types, exact for the 16-bit floats and small integers).
void castToFloat32(DType from, Bytes in, std::vector<std::byte>& out);
// The bytes piece `p` of `t` stands for once consolidated: cast to float32 where `t.from` differs.
[[nodiscard]] std::uint64_t assembledBytes(const Assembled& t, const Piece& p);

// A Hugging Face set's consolidated pickle: an OrderedDict of plain tensors, storages keyed 0..n-1
// in first use, each one storage of one shard. Views of one storage inside a shard (tied weights in
// a .bin shard) keep sharing it.
struct ShardStorage {
    std::uint32_t shard;
    StorageIndex storage;
    std::uint64_t nbytes;
};
Expected<pickle::ValueId> shardSetPickle(const ShardedSet& set, pickle::Arena& a, std::vector<ShardStorage>& storages);

// One contiguous storage per tensor (or storageOnly entry), each streamed piece by piece from
// `sources` (absent ones are never referenced; the others read again when the cache let them go), pages released behind
// it so resident memory stays one piece; a piece that is a whole stored record is copied file to file with its own CRC.
Expected<ConsolidateResult> writeAssembled(const std::vector<Assembled>& tensors, const MemberCheckpoints& sources,
                                           const std::string& outPath);
}  // namespace detail

}  // namespace ckpt::sharded
