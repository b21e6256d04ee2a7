// `ckptscope testload FILE --device cpu|cuda:N [--select PATH] [--json] [--interval-ms MS]
//  [--compare-torch-load] [--verify]`: loads every tensor onto the device through the LibTorch helper
// while every GPU's memory is sampled. Exit 0 loaded, 1 failed to load, 2 bad input.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ckpt::cli {

int cmdTestload(const std::vector<std::string>& args /* after "testload" */, std::ostream& out, std::ostream& err);

}  // namespace ckpt::cli
