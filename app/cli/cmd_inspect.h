#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ckpt::cli {

// `ckptscope inspect FILE... [--json] [--depth N]`
int cmdInspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace ckpt::cli
