// A shape or a list of offsets as PyTorch prints a torch.Size's items: "[64, 3, 7, 7]", "[]" for a
// scalar. Its own small header so the readers, rules and commands that print shapes share it
// without pulling in a widely included one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ckpt {

[[nodiscard]] inline std::string shapeText(const std::vector<std::int64_t>& dims)
{
    std::string s = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) {
        s += (i != 0 ? ", " : "") + std::to_string(dims[i]);
    }
    return s + "]";
}

}  // namespace ckpt
