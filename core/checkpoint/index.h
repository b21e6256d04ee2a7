// Builds the flat node table, tensor index, object index and global uses of a Checkpoint whose
// arena, root and storage table are already filled (open.cpp does that per format).
#pragma once

#include "checkpoint/checkpoint.h"
#include "util/budget.h"

namespace ckpt::detail {

struct IndexLimits {
    std::size_t maxNodes = 8'000'000;
    std::size_t maxDepth = 10'000;
    // Shared with the unpickler: the arena's charged bytes count against it too.
    MemoryBudget budget;
};

Expected<void> buildIndex(Checkpoint& c, const IndexLimits& limits = {});

}  // namespace ckpt::detail
