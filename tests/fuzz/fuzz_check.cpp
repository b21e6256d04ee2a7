// libFuzzer over what runs after a file reads: every check rule (the value scan included, which
// streams each storage and walks views) and the single-card conversion plan. Any input must give
// findings and a plan or an error, never a crash, a hang or more memory than its budget.
#include "checkpoint/checkpoint.h"
#include "diagnose/diagnose.h"
#include "transform/transform.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const ckpt::Bytes bytes(reinterpret_cast<const std::byte*>(data), size);  // NOLINT
    auto ck = ckpt::readCheckpoint(bytes, "fuzz");
    if (!ck) {
        return 0;
    }
    ckpt::diagnose::CheckOptions opts;
    opts.values = true;
    (void)ckpt::diagnose::check(**ck, opts);
    (void)ckpt::transform::makePlan(**ck, ckpt::transform::singleCardPreset());
    return 0;
}
