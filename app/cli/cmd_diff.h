#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ckpt::cli {

// `ckptscope diff A B [--select A_PATH:B_PATH] [--rtol X] [--atol Y] [--json | --summary]`: what
// differs between two checkpoints. `ckptscope diff DIR`: each checkpoint in DIR against the first
// (rank 0), a summary line each. Exit 0 when equal, 1 when they differ, 2 for bad input.
int cmdDiff(const std::vector<std::string>& args /* after "diff" */, std::ostream& out, std::ostream& err);

}  // namespace ckpt::cli
