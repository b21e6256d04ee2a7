// The subcommands on a torch.distributed.checkpoint directory (core/sharded/dcp.h) or on FSDP
// per-rank pickles (core/sharded/fsdp.h): each returns
// the exit code when `input` is a DCP folder, its .metadata or one of its .distcp files, or FSDP
// rank files (a folder, or one file alone), and
// nothing otherwise. sharded_cli calls these before its own set handling.
#pragma once

#include "checkpoint/checkpoint.h"
#include "diagnose/diagnose.h"

#include <iosfwd>
#include <optional>
#include <string>

namespace ckpt::cli {

std::optional<int> inspectDcp(const std::string& input, bool json, std::ostream& out, std::ostream& err);
// `check`: the set's findings and every single-file rule on the state dict it opens as.
std::optional<int> checkDcp(const std::string& input, bool json, const diagnose::CheckOptions& opts, std::ostream& out,
                            std::ostream& err);
// Consolidates the set as it stands into the torch file `output`, as dcp_to_torch_save does (an edit
// or another format reads the set in place, sharded_cli's convertSet).
std::optional<int> convertDcp(const std::string& input, const std::string& output, std::ostream& out,
                              std::ostream& err);

}  // namespace ckpt::cli
