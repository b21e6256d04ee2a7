#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ckpt::cli {

// `ckptscope check FILE [--json] [--values] [--against REF [--select PATH]]`: findings sorted by
// severity. Exit 0 when nothing is a warning or an error, 1 otherwise, 2 when a file cannot be read.
int cmdCheck(const std::vector<std::string>& args /* after "check" */, std::ostream& out, std::ostream& err);

}  // namespace ckpt::cli
