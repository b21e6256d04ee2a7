// Device names as torch spells them, `type` or `type:index` (docs/format.md §4.2-4.3): the location tag
// of a saved storage, a pickled torch.device, a map_location, a test-load target. One parser for
// all of them; each caller decides which types it takes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ckpt {

struct DeviceName {
    std::string type;                   // "cpu", "cuda", "mps", "meta", "npu", ...
    std::optional<std::int64_t> index;  // none for "cpu", "mps", and "cuda" meaning the current device

    // `type` or `type:index`, the index in plain decimal (`cuda:07` gives `cuda:7`).
    [[nodiscard]] std::string text() const;
};

// `type[:index]`: the type is everything before the first colon and is not empty; the index one
// or more decimal digits (leading zeros allowed) within int64. nullopt for anything else
// (`cuda:`, `cuda:-1`, `cuda:x`, `:0`).
[[nodiscard]] std::optional<DeviceName> parseDeviceName(std::string_view text);

// A type spelled as torch names its backends: lowercase letters, digits and '_', not starting with
// a digit (`cuda`, `mps`, `xla`, a privateuse1 backend such as `npu`).
[[nodiscard]] bool isBackendName(std::string_view type);

// What torch.load says when a storage's CUDA device is missing (torch.serialization's
// validate_cuda_device, docs/format.md §4.3), as the RuntimeError's text.
[[nodiscard]] std::string cudaUnavailableText();
[[nodiscard]] std::string cudaDeviceCountText(std::int64_t index, int devices);

}  // namespace ckpt
