// The subcommands' hook for multi-file checkpoints (core/sharded): each returns the exit code when
// `input` names a set (a folder, an index, a shard), and nothing when it is an ordinary file.
#pragma once

#include "sharded/temp_consolidated.h"
#include "sharded/zero.h"

#include <iosfwd>
#include <optional>
#include <string>

namespace ckpt::cli {

std::optional<int> inspectSet(const std::string& input, bool json, std::ostream& out, std::ostream& err);
std::optional<int> checkSet(const std::string& input, bool json, std::ostream& out, std::ostream& err);
// `direct`: the set is written as it stands into one torch file (no edit, no other format, no
// split). Otherwise the set is consolidated into `staged`, a hidden file beside the output, and
// nothing is returned: the caller converts staged->path() as an ordinary file, so edits,
// safetensors and re-sharding go through the single-file path unchanged. `zero`: what to take
// from a ZeRO folder. `fileOnly` (--file-only): `input` is converted as the file it is, never its set.
std::optional<int> convertSet(const std::string& input, const std::string& output, const std::string& format,
                              bool direct, std::optional<sharded::TempConsolidated>& staged, std::ostream& out,
                              std::ostream& err, const sharded::zero::Options& zero = {}, bool fileOnly = false);

// One line (then a blank one) when `input` is a file that opens as the set it belongs to (a shard,
// an index, a ZeRO rank file): which set, and that --file-only reads the file alone.
void noteSetOfFile(const std::string& input, std::ostream& out);

}  // namespace ckpt::cli
