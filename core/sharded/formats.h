// The set formats ckptscope reads (docs/format.md §12 and §16), one entry each: what every front end asks of a set
// whatever its kind, so listing, opening in place and consolidating choose a format in one place.
// Adding a format: its reader in a file of its own, its probe (probes.h, detect.cpp), a SetKind
// value, one entry in formats.cpp (its names, calls and member policy), a section in
// docs/format.md and a fixture generator (docs/design.md).
#pragma once

#include "sharded/listing.h"
#include "sharded/open_control.h"
#include "sharded/probes.h"
#include "sharded/sharded.h"
#include "sharded/zero.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ckpt::sharded {

// A set read once for a front end that shows it whole (the window): its listing (files, rows,
// findings) and the set opened as one Checkpoint in place, or why it cannot be (an incomplete set
// still lists).
struct ReadSet {
    SetListing listing;
    CheckpointPtr view;
    std::optional<Error> notWhole;
    // With notWhole, where the format can build one: the set as far as its files were read (a
    // Hugging Face set's present shards, a ZeRO folder's tensors with the rank files present), whose
    // reads of a missing file's bytes are refused. `check` runs the rules that need no such byte on
    // it; nothing opens it for a write or a load.
    CheckpointPtr partial;
};

// What one member file of a set opens as when it is named alone (setInput, listing.h).
enum class MemberOpens : std::uint8_t {
    TheSet,  // the whole set it belongs to (a shard, a .distcp, an index)
    Alone,   // itself, read by the format (an FSDP rank file: its rank's shards)
    File,    // the ordinary file it also is (a ZeRO rank file of a folder that is no set)
};

struct SetFormat {
    SetKind kind = SetKind::None;
    // Its stable identifier in JSON (setKindId) and its phrase for people (setKindName).
    const char* id = "none";
    const char* name = "single file";
    // Every tensor with its files and the set's findings (inspect, the window's set tab).
    Expected<SetListing> (*list)(const SetLocation& loc) = nullptr;
    // The whole set as one Checkpoint read in place (set_view.h); `options` are ZeRO's.
    Expected<CheckpointPtr> (*open)(const SetLocation& loc, const zero::Options& options) = nullptr;
    // The whole set written as one torch file, as `convert DIR -o OUT` does.
    Expected<ConsolidateResult> (*consolidate)(const SetLocation& loc, const std::string& outPath,
                                               const zero::Options& options) = nullptr;
    // The listing and the view from one read of the set's files.
    Expected<ReadSet> (*read)(const SetLocation& loc, const zero::Options& options) = nullptr;
    // Whether `path` (a folder, an index, any one member) stands for a set of this format, and
    // where it is (detectSet asks each entry in turn). An entry with a probe alone names a set
    // ckptscope does not read (Megatron's legacy tensor-parallel dirs), or another place a format's
    // sets are found (accelerate's save_state folder around DCP folders).
    std::optional<SetLocation> (*probe)(const std::filesystem::path& path) = nullptr;
    // Every file the set is read from, by name (memberFiles, sharded.h): what no write may replace.
    std::vector<std::string> (*files)(const SetLocation& loc) = detail::indexFile;
    // What its member files are called in messages ("shards", "rank files").
    const char* members = "files";
    // Whether `open`, `consolidate` and `read` heed zero::Options' weights and optimizer choice: a
    // command that asks for them on a set of another format is refused rather than ignoring them.
    bool takesZeroOptions = false;
    // For a set that is no one checkpoint (`open` refused it as Unsupported: a quantized tensor no
    // consolidation writes) whose tensors each live whole in one member file: those files, opened,
    // for diff to compare part by part. Null where a tensor spans files.
    Expected<std::vector<CheckpointPtr>> (*parts)(const SetLocation& loc) = nullptr;
    // What the member file `loc.index` (which `probe` found) opens as when it is named alone; null:
    // the whole set.
    MemberOpens (*member)(const SetLocation& loc) = nullptr;
    // For an entry that names a set ckptscope does not read: why, and what reads it instead
    // (notRead's refusal, after the probe's own description of what it found).
    const char* notReadBecause = nullptr;
};

// The entry that reads `kind`; nullptr for None and for a kind that is only named (Megatron's legacy
// tensor-parallel sets).
[[nodiscard]] const SetFormat* setFormat(SetKind kind);
// Every entry, in the order detectSet probes them.
[[nodiscard]] std::span<const SetFormat> setFormats();

// The set at `loc` read once as ReadSet (its format's `read`); a kind with no entry is notRead.
// `control` is told of each member file read, and a stop it is asked for ends the read, Cancelled.
Expected<ReadSet> readSet(const SetLocation& loc, const zero::Options& options = {.groupStorages = true},
                          const OpenControl& control = {});

// Why the set at `loc`, of a kind with no entry, is not read (openSet's refusal, naming the kind).
[[nodiscard]] Error notRead(const SetLocation& loc);

}  // namespace ckpt::sharded
