// Each set format's probe (detect.cpp): from one path (a folder, an index, any member file), the set
// of that format it stands for, by file names alone (a Hugging Face index is the one file read).
// SetFormat::probe (formats.h) points at these; detectSet asks them in the registry's order.
#pragma once

#include "sharded/sharded.h"

#include <filesystem>
#include <optional>

namespace ckpt::sharded::detail {

std::optional<SetLocation> hfAt(const std::filesystem::path& p);
std::optional<SetLocation> deepspeedAt(const std::filesystem::path& p);
std::optional<SetLocation> dcpAt(const std::filesystem::path& p);
// Megatron-LM's legacy tensor-parallel save dir: named, never read (its merge depends on the model).
std::optional<SetLocation> megatronAt(const std::filesystem::path& p);
std::optional<SetLocation> fsdpAt(const std::filesystem::path& p);
// accelerate's save_state folder holding DCP folders: located as its first model's DCP folder.
std::optional<SetLocation> accelerateAt(const std::filesystem::path& p);

}  // namespace ckpt::sharded::detail
