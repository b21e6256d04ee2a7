// How findings are shown: the text and JSON of `ckptscope check`, and a fix as the convert
// command line that applies it (the window shows the same line).
#pragma once

#include "diagnose/diagnose.h"

#include <string>
#include <vector>

namespace ckpt::diagnose {

// `ckptscope convert FILE -o FILE.fixed.pt --strip-prefix module. --map-location cpu`
[[nodiscard]] std::string fixCommandLine(const transform::Options& fix, const std::string& file);
// The options of a fix as convert's flags ("--strip-prefix module. --map-location cpu"); empty for
// a fix that only rewrites the file (a current torch.save zip, nothing else changed).
[[nodiscard]] std::string fixFlags(const transform::Options& fix);

// Findings as readable text, one block per finding (severity, code, title, detail, paths, fix).
[[nodiscard]] std::string renderText(const std::vector<Finding>& findings, const std::string& file);

// {"schema": kJsonSchema, "file": ..., "findings": [...]} (findingToJson for each), newline-terminated.
[[nodiscard]] std::string renderJson(const std::vector<Finding>& findings, const std::string& file);

// 0 when nothing is a warning or an error, 1 otherwise.
[[nodiscard]] int findingsExitCode(const std::vector<Finding>& findings);

}  // namespace ckpt::diagnose
