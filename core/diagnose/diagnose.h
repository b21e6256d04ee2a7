// Rules over a Checkpoint -> Findings: what will go wrong when it is loaded, where, how badly,
// and the convert options that fix it. Codes are stable and documented in the README.
#pragma once

#include "checkpoint/checkpoint.h"
#include "transform/options.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

namespace ckpt::diagnose {

enum class Severity : std::uint8_t { Info, Warning, Error };
[[nodiscard]] std::string_view severityName(Severity s);  // "info" | "warning" | "error"

struct Finding {
    std::string code;  // "module-prefix", "device-pinned", ...
    Severity severity = Severity::Info;
    std::string title;  // one line
    std::string detail;
    std::vector<std::string> paths;  // key paths concerned
    std::optional<transform::Options> fix;
};

struct CheckOptions {
    bool values = false;                     // read tensor data (nonfinite-values)
    std::optional<std::string> againstPath;  // --against REF
    // --against a checkpoint opened by the caller (a remote one); `againstPath` names it then.
    std::shared_ptr<const Checkpoint> againstCheckpoint;
    std::optional<std::string> againstSelect;
    // With `values`: bytes of tensor data scanned so far, of the total to scan (the command line's
    // progress line).
    std::function<void(std::uint64_t done, std::uint64_t total)> valueProgress;
};

// Findings sorted by severity (errors first), then code.
Expected<std::vector<Finding>> check(const Checkpoint& ckpt, const CheckOptions& opts = {}, std::stop_token stop = {});

// The unsafe-callable findings of one pickle: the rule check() applies, for the pickles a multi-file
// set reads (core/sharded reports them per member file, so `check` of a set says what `check` of
// each file would). None for a safetensors file.
[[nodiscard]] std::vector<Finding> unsafeCode(const Checkpoint& ckpt);

// The tied-weight findings of a safetensors file or Hugging Face set (util/tied_pairs.h's report):
// tied-weight-missing (restored, or untied by the config) and tie-unknown. `what` names it in the
// titles ("the file", "the set").
[[nodiscard]] std::vector<Finding> tieFindings(const TieReport& r, std::string_view what);

// JSON for one finding (the shape used by `check --json` and the window).
[[nodiscard]] std::string findingToJson(const Finding& f);

}  // namespace ckpt::diagnose
