// Progress and cancellation of a consolidation (the window's Consolidate): a scope on the thread
// that runs consolidateSet(), consulted between the storages and pieces it writes.
#pragma once

#include "util/error.h"

#include <cstdint>
#include <functional>

namespace ckpt::sharded {

// Progress and cancellation of the consolidations this thread runs while the scope lives (the
// window's Consolidate): `progress(bytesWritten)` is called between storages and between the
// pieces of one; returning false stops the write with a Cancelled error, and no output file is
// left. A scope rather than a parameter, so that every set kind's consolidate() (zero, dcp, fsdp,
// consolidate.cpp's) gets it without a change of signature.
class ConsolidateProgressScope {
public:
    explicit ConsolidateProgressScope(std::function<bool(std::uint64_t bytesWritten)> progress);
    ~ConsolidateProgressScope();
    ConsolidateProgressScope(const ConsolidateProgressScope&) = delete;
    ConsolidateProgressScope& operator=(const ConsolidateProgressScope&) = delete;
    ConsolidateProgressScope(ConsolidateProgressScope&&) = delete;
    ConsolidateProgressScope& operator=(ConsolidateProgressScope&&) = delete;

private:
    std::function<bool(std::uint64_t)> progress_;
    const std::function<bool(std::uint64_t)>* previous_;
};

namespace detail {
// Reports `bytesWritten` to this thread's ConsolidateProgressScope; false when it asks to stop
// (always true without one).
[[nodiscard]] bool consolidationGoesOn(std::uint64_t bytesWritten);
// What a consolidation stopped by its scope returns.
[[nodiscard]] Error consolidationCancelled();
}  // namespace detail

}  // namespace ckpt::sharded
