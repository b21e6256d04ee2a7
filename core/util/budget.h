// The memory a read may take, in proportion to the file: a small file must not be able to make
// ckptscope allocate gigabytes (a memo bomb reusing one string 2000 levels deep, a deflated pickle
// of 50 million NONEs, one memoized list passed to set() a thousand times). Everything a read
// builds from the pickle (values, key tree, key paths) is counted against 64 MiB plus 32 times the
// pickle's size in the file. Real files need about 18 times (a 40k-key state dict: 4.1 MB of
// pickle, 72 MB of values; 180k tensors in the legacy format: 22.7 MB, 357 MB), so 32 leaves them
// room while a bomb, which amplifies a thousandfold, is stopped within a few hundred MB.
#pragma once

#include "util/bytes.h"
#include "util/error.h"

#include <cstdint>

namespace ckpt {

struct MemoryBudget {
    static constexpr std::uint64_t kBase = 64ULL << 20;
    static constexpr std::uint64_t kPerPickleByte = 32;

    std::uint64_t pickleBytes = 0;  // the pickle's size as stored in the file (compressed, if it is)
    std::uint64_t base = kBase;     // tests lower it

    [[nodiscard]] std::uint64_t limit() const { return base + kPerPickleByte * pickleBytes; }
    // Limit: "expands beyond 67.0 MiB in memory (64 MiB + 32 x its 95.2 KiB pickle): a
    // decompression or memo bomb".
    [[nodiscard]] Error exceeded() const
    {
        return makeError(ErrorCode::Limit, "expands beyond " + humanBytes(limit()) + " in memory (" + humanBytes(base) +
                                               " + 32 x its " + humanBytes(pickleBytes) +
                                               " pickle): a decompression or memo bomb, not a checkpoint");
    }
};

}  // namespace ckpt
