// The one list of names a checkpoint is saved under, for every place that offers files to open
// (the window's Open and Compare dialogs, a folder's listing, the files of a set shown alone), so
// that none of them hides a kind of file another one opens.
#pragma once

#include <algorithm>
#include <array>
#include <string_view>

namespace ckpt {

// A file that opens as a checkpoint of its own: torch.save (.pt .pth .ckpt .bin .th .pkl .tar,
// AllenNLP's .tar.gz), safetensors, torch.export / TorchScript (.pt2 .ptl) and a Lua Torch7 .t7,
// which the reader names rather than reads.
inline constexpr std::array<std::string_view, 12> kCheckpointFileExtensions{
    ".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".pt2", ".ptl", ".t7", ".gz", ".tar", ".th", ".pkl"};

// A file that describes or holds part of a multi-file checkpoint and opens its set, never itself:
// a torch.distributed.checkpoint folder's `.metadata` and `*.distcp`, a Hugging Face index.
inline constexpr std::array<std::string_view, 3> kSetFileExtensions{".distcp", ".metadata", ".index.json"};

// Whether `name` ends with one of `extensions` (`.metadata` matches the whole name too).
template <std::size_t N>
[[nodiscard]] constexpr bool hasExtension(std::string_view name, const std::array<std::string_view, N>& extensions)
{
    return std::ranges::any_of(extensions, [name](std::string_view ext) { return name.ends_with(ext); });
}

}  // namespace ckpt
