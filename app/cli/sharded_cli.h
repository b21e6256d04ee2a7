// The subcommands' hook for multi-file checkpoints (core/sharded): each returns the exit code when
// `input` names a set (a folder, an index, a shard), and nothing when it is an ordinary file.
#pragma once

#include "diagnose/diagnose.h"
#include "sharded/listing.h"
#include "sharded/zero.h"

#include <iosfwd>
#include <optional>
#include <string>

namespace ckpt::cli {

std::optional<int> inspectSet(const std::string& input, bool json, std::ostream& out, std::ostream& err);
// `check` of a set: its own findings, and every single-file rule on the consolidated model it opens
// as (set_view.h), `opts` included.
std::optional<int> checkSet(const std::string& input, bool json, const diagnose::CheckOptions& opts, std::ostream& out,
                            std::ostream& err);

// What `convert` of a set reads when the set is not written as it stands: the set opened as one
// checkpoint, read in place (set_view.h).
struct SetSource {
    std::optional<CheckpointPtr> view;
};

// `direct`: the set is written as it stands into one torch file (no edit, no other format, no
// split). Otherwise `source` is filled and nothing is returned: the caller converts it as an
// ordinary file, so edits, safetensors and re-sharding go through the single-file path unchanged.
// `set`: what `input` opens as (sharded::setInput; nothing for a file, or with --file-only).
// `zero`: what to take from a ZeRO folder. `fileOnly` (--file-only): `input` is converted as the
// file it is, never its set. `json` (--json): no progress line while the set opens.
std::optional<int> convertSet(const std::string& input, const std::optional<sharded::SetLocation>& set,
                              const std::string& output, const std::string& format, bool direct, bool json,
                              SetSource& source, std::ostream& out, std::ostream& err,
                              const sharded::zero::Options& zero = {}, bool fileOnly = false);

// `inspect` of a set, for every kind: as JSON, the one document of a set (the fields a file's
// document has: `path`, `dtype`, `shape`, `location`, `nbytes` per tensor, `totals`; each tensor's
// `stored_in` files and `pieces`, and a `set` object with the kind, files and findings); as text, a
// header line, then a row per tensor (KEY, DTYPE, SHAPE, DEVICE, SIZE, STORED IN) with its boxes
// under it, the set's values, and how many problems `check` would report. `file` is what was named.
// Returns inspect's exit code.
int printSet(const sharded::SetListing& l, const std::string& file, bool json, std::ostream& out);

// One line (then a blank one) when `input` is a file that opens as the set it belongs to (a shard,
// an index, a ZeRO rank file): which set, and that --file-only reads the file alone. `set` is what
// sharded::setInput (or wholeSetInput) said of `input`, so the set is not looked for again.
void noteSetOfFile(const std::string& input, const std::optional<sharded::SetLocation>& set, std::ostream& out);

}  // namespace ckpt::cli
