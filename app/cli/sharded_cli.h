// The subcommands' hook for multi-file checkpoints (core/sharded): each returns the exit code when
// `input` names a set (a folder, an index, a shard), and nothing when it is an ordinary file.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

namespace ckpt::cli {

std::optional<int> inspectSet(const std::string& input, bool json, std::ostream& out, std::ostream& err);
std::optional<int> checkSet(const std::string& input, bool json, std::ostream& out, std::ostream& err);
// `plain`: no option beyond -o, --single-card and --sync was given (the only ones sets take yet).
std::optional<int> convertSet(const std::string& input, const std::string& output, const std::string& format,
                              bool plain, std::ostream& out, std::ostream& err);

}  // namespace ckpt::cli
