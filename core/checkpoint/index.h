// Builds the flat node table, tensor index, object index and global uses of a Checkpoint whose
// arena, root and storage table are already filled (open.cpp does that per format).
#pragma once

#include "checkpoint/checkpoint.h"

namespace ckpt::detail {

struct IndexLimits {
    std::size_t maxNodes = 8'000'000;
    std::size_t maxDepth = 10'000;
};

Expected<void> buildIndex(Checkpoint& c, const IndexLimits& limits = {});

}  // namespace ckpt::detail
