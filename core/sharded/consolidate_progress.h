// Progress and cancellation of a consolidation (`convert SET -o FILE`): a scope on the thread that
// runs consolidateSet(), consulted between the storages and pieces it writes.
#pragma once

#include "archive/zip.h"
#include "util/error.h"
#include "util/file_copy.h"

#include <cstdint>
#include <functional>

namespace ckpt::sharded {

// How far a consolidation is: bytes of the output written, of about `bytesTotal` (its storages'
// bytes and the pickle; 0 until the output is begun).
struct ConsolidateProgress {
    std::uint64_t bytesWritten = 0;
    std::uint64_t bytesTotal = 0;
};

// Progress and cancellation of the consolidations this thread runs while the scope lives (the
// command line's progress line): `progress` is called between storages and between the pieces
// (4 MiB at most) of one; returning false stops the write with a Cancelled error, and no output
// file is left. A scope rather than a parameter, so that every set kind's consolidate() (zero,
// dcp, fsdp, consolidate.cpp's) gets it without a change of signature.
class ConsolidateProgressScope {
public:
    explicit ConsolidateProgressScope(std::function<bool(const ConsolidateProgress&)> progress);
    ~ConsolidateProgressScope();
    ConsolidateProgressScope(const ConsolidateProgressScope&) = delete;
    ConsolidateProgressScope& operator=(const ConsolidateProgressScope&) = delete;
    ConsolidateProgressScope(ConsolidateProgressScope&&) = delete;
    ConsolidateProgressScope& operator=(ConsolidateProgressScope&&) = delete;

    struct Installed {
        std::function<bool(const ConsolidateProgress&)> progress;
        std::uint64_t total = 0;
    };

private:
    Installed installed_;
    Installed* previous_;
};

namespace detail {
// Reports `bytesWritten` to this thread's ConsolidateProgressScope; false when it asks to stop
// (always true without one).
[[nodiscard]] bool consolidationGoesOn(std::uint64_t bytesWritten);
// The size of the output the consolidation now running writes, for its progress's total.
void expectConsolidated(std::uint64_t bytes);
// The step of a file-to-file copy into `zw` (ZipWriter::addRecordsFromFile, writeChunkFromFile):
// consolidationGoesOn as its bytes go, so a record of gigabytes is no silence; empty without a scope.
[[nodiscard]] CopyStep copyGoesOn(const archive::ZipWriter& zw);
// What a consolidation stopped by its scope returns.
[[nodiscard]] Error consolidationCancelled();
}  // namespace detail

}  // namespace ckpt::sharded
