// `ckptscope testload FILE --device cpu|cuda:N [--select PATH] [--json] [--interval-ms MS]
//  [--compare-torch-load] [--verify]`: loads every tensor onto the device through the LibTorch helper
// while every GPU's memory is sampled. Exit 0 loaded, 1 failed to load, 2 bad input.
#pragma once

#include "checkpoint/checkpoint.h"

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace ckpt::cli {

// The sha256 of a storage's bytes as the file holds them (the first nbytes, as torch reads them),
// by storage key: what --verify compares the helper's hash of the loaded storage with.
[[nodiscard]] std::function<Expected<std::string>(const std::string& storageKey)> fileStorageHasher(CheckpointPtr ck);

int cmdTestload(const std::vector<std::string>& args /* after "testload" */, std::ostream& out, std::ostream& err);

}  // namespace ckpt::cli
