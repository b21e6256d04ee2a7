// A multi-file checkpoint consolidated into one temporary torch file, for the commands that read a
// set through the single-file path: testload loads it, diff compares it, convert edits it. Loading
// that file gives exactly what loading every shard's tensors together does.
#pragma once

#include "checkpoint/checkpoint.h"
#include "sharded/sharded.h"

#include <functional>
#include <string>

namespace ckpt::sharded {

// The file is made by mkstemp as `<dir>/.<tag>.ckptscope-<pid>-XXXXXX` (the temporary name of
// write/targets.h, so a killed run's leftover is recognisable), registered so SIGINT, SIGTERM and
// SIGHUP remove it, and removed when this goes.
class TempConsolidated {
public:
    // Writes into the file what `consolidate(path)` writes there. `dir` "" is the working directory.
    // Errors: no file can be made in `dir` (WriteFailed), or the consolidation's; no file is left.
    using Writer = std::function<Expected<ConsolidateResult>(const std::string& path)>;
    static Expected<TempConsolidated> write(const std::string& dir, const std::string& tag, const Writer& consolidate);
    // The one file `ckptscope convert DIR -o OUT` writes from the set (consolidateSet).
    static Expected<TempConsolidated> write(const SetLocation& loc, const std::string& dir, const std::string& tag);

    TempConsolidated(TempConsolidated&& o) noexcept;
    TempConsolidated& operator=(TempConsolidated&&) = delete;
    TempConsolidated(const TempConsolidated&) = delete;
    TempConsolidated& operator=(const TempConsolidated&) = delete;
    ~TempConsolidated();

    [[nodiscard]] const std::string& path() const { return path_; }
    // Its size, tensor count and how many files of the set it was made from.
    [[nodiscard]] const ConsolidateResult& result() const { return result_; }

    // Opens the file and removes it at once (path() is "" after): the mapping keeps its pages, so
    // nothing is left behind however the reading ends.
    Expected<CheckpointPtr> openAndRemove();

private:
    TempConsolidated(std::string path, int slot) : path_(std::move(path)), slot_(slot) {}
    void remove();

    std::string path_;
    int slot_ = -1;
    ConsolidateResult result_;
};

}  // namespace ckpt::sharded
