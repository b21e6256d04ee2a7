// DeepSpeed ZeRO folders (docs/format.md §12.1) read as one checkpoint: the model as zero_to_fp32.py
// rebuilds it, each tensor described as pieces of the rank files that hold it, so a listing needs
// no tensor bytes and consolidation streams one piece at a time.
#pragma once

#include "sharded/sharded.h"
#include "source/folder.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::sharded::zero {

// What the consolidated tensors are: zero_to_fp32's fp32 master weights (from the optimizer
// partitions), or the 16-bit weights stage 1/2 keeps whole in the model states' `module`.
enum class Weights : std::uint8_t { Fp32Master, Module };
struct Options {
    Weights weights = Weights::Fp32Master;
    bool keepOptimizer = false;  // see open()
    bool groupStorages = false;  // see consolidate()
};

struct Tensor {
    std::string key;
    std::string role;  // "parameter", "buffer", "frozen", "shared", "module"
    DType dtype = DType::Float32;
    DType from = DType::Float32;  // the stored type: buffers are cast .float() as zero_to_fp32 does
    std::vector<std::int64_t> shape;
    std::vector<detail::Piece> pieces;   // empty when the rank files holding it are missing
    std::optional<std::size_t> aliasOf;  // shared_params: the same tensor as another key
    std::vector<std::size_t> files;      // Set::files indices that hold its bytes (or should)
    std::vector<std::string> parents;    // with the optimizer kept: {"model"} or {"optimizer", "state", fqn}
    // A leaf that is no tensor (role "optimizer": a step count, param_groups), built when written.
    std::function<pickle::ValueId(pickle::Arena&)> value;
    [[nodiscard]] std::uint64_t numel() const;
};

// Stages 1/2: a param group's fp32 partitions laid end to end over the ranks (the tail padding
// included), and where each of its params starts in them.
struct FlatGroup {
    std::vector<detail::Piece> pieces;
    std::uint64_t numel = 0;
    std::vector<std::pair<std::size_t, std::uint64_t>> members;  // Set::tensors index, element offset
};

struct Set {
    SetLocation loc;
    int stage = 0;  // 1/2 (one format) or 3
    std::int64_t world = 0;
    bool bf16 = false;
    std::vector<std::string> files;    // names in the tag folder; Piece::source indexes these
    MemberCheckpoints sources;         // parallel to files: absent where missing or unreadable
    std::vector<std::size_t> missing;  // files the tag folder does not hold (the others absent are unreadable)
    std::vector<Tensor> tensors;
    std::vector<FlatGroup> flatGroups;  // empty for stage 3, or without every optimizer file
    std::vector<SetFinding> findings;
    [[nodiscard]] bool complete() const;  // no error finding and every tensor's bytes located
    [[nodiscard]] bool isMissing(std::size_t f) const;
};

// Reads the rank-0 model states and every rank file present. A folder with missing rank files
// still opens (its tensors listed from param_shapes, its findings saying what is missing); errors:
// no model states, no dp_world_size, a BF16_Optimizer state (no zero_stage, as zero_to_fp32.py
// refuses), partitions that disagree with param_shapes, Module weights of a stage-3 set.
// `keepOptimizer` (fp32 only): the output becomes {"model": the fp32 model, "optimizer": {"state":
// {fqn: {step, exp_avg, exp_avg_sq, ...}}, "param_groups": [{lr, ..., "params": [fqn, ...]}]}}:
// every optimizer tensor that mirrors the fp32 partitions consolidated per parameter like the
// master weights (in its own dtype), each flat group's `step` repeated for its params, and the
// param_groups' `params` naming the consolidated parameters (none with elastic lean states, which
// keep no param_groups). torch.optim's load_state_dict takes this optimizer dict as it is.
Expected<Set> open(const SetLocation& loc, Weights weights = Weights::Fp32Master, bool keepOptimizer = false);
// The same from `tag`, the tag folder (source/folder.h): a local one, or a URL folder whose rank files
// are read by range (`loc.dir` names the folder holding `latest`, `loc.index` the tag folder, as
// messages show them). The tag folder's listing gives the *_optim_states.pt present; a folder nothing
// lists (plain HTTP) is asked for each rank's file by name, and for one rank past the world size (a
// stale file of an older, larger save).
Expected<Set> open(const source::FolderPtr& tag, const SetLocation& loc, Weights weights = Weights::Fp32Master,
                   bool keepOptimizer = false);

// `latest` holds a tag name; a file far beyond that is not one.
inline constexpr std::uint64_t kMaxLatestBytes = 4096;
// The tag a `latest` file's text names: its first line, trailing blanks dropped.
[[nodiscard]] std::string tagIn(std::string_view latestText);
// The one rule for that tag, wherever `latest` is: the tag folder is a child of the folder holding
// `latest` (DeepSpeed writes it so), so the tag is a plain file name: not empty, no '/', not "." or
// "..", which would make the set the parent's or a neighbour's files. Corrupt otherwise, saying so
// of `dir` (the folder as shown); `resolved` (", which resolves to /x,") says where a local one leads.
[[nodiscard]] bool isChildTag(std::string_view tag);
[[nodiscard]] Error notChildTag(const std::string& tag, const std::string& dir, const std::string& latestPath,
                                const std::string& resolved = std::string());

// The path of `dir`'s `latest`, a member like any other (memberOfFolder): one that is no regular
// file inside `dir` (a symlink to /etc/passwd) is never read, not even by detection, and open()
// refuses the folder with this error, which says where it leads.
Expected<std::string> latestOf(const std::string& dir);

// Whether one file of the folder (a rank file, `latest`) stands for the whole set: open() reads
// it. A folder it refuses (a BF16_Optimizer state, tensor-parallel ranks) leaves each file the
// torch.save file it is.
[[nodiscard]] bool opensAsSet(const SetLocation& loc);

// The consolidated tensors with their pieces in the rank files: a storage each (aliases sharing
// their target's), or with `groupStorages` each stage 1/2 param group one storage its params view
// (consolidate() below). What consolidate() writes, and what the set's view (set_view.h) reads.
[[nodiscard]] std::vector<detail::Assembled> assembled(const Set& set, bool groupStorages);

// One torch file, one tensor record at a time (pieces streamed from the rank files); refused before
// anything is written when the set is incomplete. `groupStorages` writes each stage 1/2 param group
// as zero_to_fp32's torch.save does: one storage of the ranks' partitions end to end (each copied
// file to file, no byte read) with the params as views into it, about twice as fast; without it
// each tensor has a storage of its own, which a later edit, split or export can move alone.
Expected<ConsolidateResult> consolidate(const Set& set, const std::string& outPath, bool groupStorages = false);
// The refusal of an incomplete folder (Corrupt, naming its error findings), before anything is written.
Expected<void> checkConsolidatable(const Set& set);

}  // namespace ckpt::sharded::zero
