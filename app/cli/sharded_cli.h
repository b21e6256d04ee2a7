// The subcommands' hook for multi-file checkpoints (core/sharded): each returns the exit code when
// `input` names a set (a folder, an index, a shard), and nothing when it is an ordinary file.
#pragma once

#include "sharded/zero.h"

#include <iosfwd>
#include <optional>
#include <string>

namespace ckpt::cli {

std::optional<int> inspectSet(const std::string& input, bool json, std::ostream& out, std::ostream& err);
std::optional<int> checkSet(const std::string& input, bool json, std::ostream& out, std::ostream& err);
// A set consolidated into a hidden torch file beside the output, so that edits, safetensors and
// re-sharding go through the single-file path unchanged. The file goes when this does (and on
// SIGINT/SIGTERM).
class StagedInput {
public:
    StagedInput() = default;
    StagedInput(const StagedInput&) = delete;
    StagedInput& operator=(const StagedInput&) = delete;
    StagedInput(StagedInput&&) = delete;
    StagedInput& operator=(StagedInput&&) = delete;
    ~StagedInput();
    [[nodiscard]] const std::string& path() const { return path_; }
    bool create(const std::string& besideOutput);

private:
    std::string path_;
    int slot_ = -1;
};

// `direct`: the set is written as it stands into one torch file (no edit, no other format, no
// split). Otherwise the set is consolidated into `staged` and nothing is returned: the caller
// converts staged.path() as an ordinary file. `zero`: what to take from a ZeRO folder.
std::optional<int> convertSet(const std::string& input, const std::string& output, const std::string& format,
                              bool direct, StagedInput& staged, std::ostream& out, std::ostream& err,
                              const sharded::zero::Options& zero = {});

}  // namespace ckpt::cli
