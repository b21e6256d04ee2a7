// Each set format's probe (detect.cpp): from one path (a folder, an index, any member file), the set
// of that format it stands for, by file names alone (a Hugging Face index is the one file read).
// SetFormat::probe (formats.h) points at these; detectSet asks them in the registry's order.
#pragma once

#include "sharded/sharded.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::sharded::detail {

std::optional<SetLocation> hfAt(const std::filesystem::path& p);
std::optional<SetLocation> deepspeedAt(const std::filesystem::path& p);
std::optional<SetLocation> dcpAt(const std::filesystem::path& p);
// Megatron-LM's legacy tensor-parallel save dir: named, never read (its merge depends on the model).
std::optional<SetLocation> megatronAt(const std::filesystem::path& p);
std::optional<SetLocation> fsdpAt(const std::filesystem::path& p);
// accelerate's save_state folder holding DCP folders: located as its first model's DCP folder.
std::optional<SetLocation> accelerateAt(const std::filesystem::path& p);

// Every file of the set at `loc` (SetFormat::files, memberFiles), by name: an index and the shards
// its weight_map lists; ZeRO's `latest` and the tag folder's rank files; a DCP folder's .metadata,
// __R.metadata and .distcp files (Megatron's common.pt and metadata.json); FSDP rank files of one
// stem; and for a set that is only named, the file its probe found.
std::vector<std::string> hfFiles(const SetLocation& loc);
std::vector<std::string> deepspeedFiles(const SetLocation& loc);
std::vector<std::string> dcpFiles(const SetLocation& loc);
std::vector<std::string> fsdpFiles(const SetLocation& loc);
std::vector<std::string> indexFile(const SetLocation& loc);

}  // namespace ckpt::sharded::detail
