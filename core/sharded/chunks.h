// What the readers of sets whose tensors are chunks spread over several files share (dcp.cpp,
// fsdp.cpp; consolidate.cpp's Hugging Face set for the refusal): a global tensor's element count,
// and whether a set's findings let it be consolidated.
#pragma once

#include "sharded/sharded.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace ckpt::sharded::detail {

// A negative size (a corrupt file) counts as no elements rather than wrapping around.
[[nodiscard]] inline std::uint64_t numelOf(const std::vector<std::int64_t>& size)
{
    std::uint64_t n = 1;
    for (const auto d : size) {
        n *= static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0));
    }
    return n;
}

[[nodiscard]] inline bool noErrors(const std::vector<SetFinding>& findings)
{
    return std::none_of(findings.begin(), findings.end(), [](const auto& f) { return f.severity == "error"; });
}

// Why nothing was written: `what` ("the set is incomplete") and the codes of the findings of
// severity error, which `ckptscope check` explains.
[[nodiscard]] inline Error incomplete(const std::string& what, const std::vector<SetFinding>& findings,
                                      const std::string& path)
{
    std::string codes;
    for (const auto& f : findings) {
        codes += f.severity == "error" ? (codes.empty() ? "" : ", ") + f.code : "";
    }
    Error e = makeError(ErrorCode::Corrupt, what + " (" + codes + "; see `ckptscope check`): nothing was written");
    e.path = path;
    return e;
}

}  // namespace ckpt::sharded::detail
