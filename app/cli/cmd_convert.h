#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ckpt::cli {

// `ckptscope convert FILE -o OUT [--single-card|--multi-card] [--map-location SPEC]
//  [--strip-prefix P]... [--add-prefix P] [--select PATH] [--drop PATH]... [--weights-only]
//  [--compact] [--unwrap] [--format torch|safetensors] [--dry-run] [--json] [--sync] [--fix JSON]`
// args exclude "convert". Exit 0 written (or planned with --dry-run), 1 the write failed,
// 2 bad input or usage (unreadable file, bad option, an edit that cannot apply, OUT == IN).
int cmdConvert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace ckpt::cli
