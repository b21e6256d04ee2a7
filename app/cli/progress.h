// The command line's progress line: one line on stderr, rewritten in place as long work goes on
// ("convert: 1.21 GiB of 8.00 GiB (15%), 1.43 GB/s, 5 s left, reading model-00002-of-00004.safetensors"),
// paced and worded by the rule the window follows too (util/progress.h). It is shown only on a
// terminal, never with --json or --quiet, and it is erased before anything else is printed, when
// the work fails, and on SIGINT/SIGTERM/SIGHUP, so no half-line is ever left behind. Without a
// terminal nothing at all is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>

namespace ckpt::write {
struct WriteProgress;
}

namespace ckpt::cli {

// While one lives, progress is not shown (--quiet: cli::run holds one for the command it runs).
class QuietProgress {
public:
    explicit QuietProgress(bool quiet);
    ~QuietProgress();
    QuietProgress(const QuietProgress&) = delete;
    QuietProgress& operator=(const QuietProgress&) = delete;
    QuietProgress(QuietProgress&&) = delete;
    QuietProgress& operator=(QuietProgress&&) = delete;

private:
    bool previous_;
};

// Whether a command that reports on `err` shows progress: `err` is this process's stderr and a
// terminal (or CKPTSCOPE_PROGRESS=1 asks for it anyway, on whatever `err` is), and neither --json
// nor --quiet was given.
[[nodiscard]] bool progressShown(const std::ostream& err, bool json);

// Erases a progress line left on the terminal when SIGINT, SIGTERM or SIGHUP ends the process,
// then lets the handler installed before it (write::removeTempsOnSignals) do what it does.
void clearProgressOnSignals();
// Erases the progress line on stderr if one is shown, for a process that is about to end
// (async-signal-safe: one write, no lock).
void eraseProgressLine();

// One piece of long work's line. Inert (every call returns at once) when progressShown says no.
// Copies share the line. update() may be called from any thread, as often as work likes.
class ProgressLine {
public:
    // `label` starts the line ("convert", "diff", "check --values"). A background line (remote
    // transfers) is shown only while no other line's work is going on.
    ProgressLine(std::ostream& err, bool json, std::string label, bool background = false);
    ~ProgressLine();
    ProgressLine(const ProgressLine&) = delete;
    ProgressLine& operator=(const ProgressLine&) = delete;
    ProgressLine(ProgressLine&&) = delete;
    ProgressLine& operator=(ProgressLine&&) = delete;

    [[nodiscard]] bool active() const { return state_ != nullptr; }
    // Bytes done of `total` (0: not known). `detail` ends the line; without one, the member file of
    // a set being read now (util/progress.h's reading()) is named, when there is one.
    void update(std::uint64_t done, std::uint64_t total, const std::string& detail = {});
    // Opening a set: member file `index` of `count` (sharded::OpenControl::progress).
    void opening(std::size_t index, std::size_t count, const std::string& path);
    // Work that counts something other than bytes: "<label>: <text>" ("3 of 8 ranks loaded").
    void status(const std::string& text);
    // The work is over: its line, if one is shown, is erased, and later updates are ignored.
    void finish();
    // Erases the line before something else is printed; later updates show it again.
    void clear();

    // The same, in the shapes core's interfaces take.
    [[nodiscard]] std::function<void(const write::WriteProgress&)> forWrite() const;
    [[nodiscard]] std::function<void(std::uint64_t done, std::uint64_t total)> forBytes() const;
    [[nodiscard]] std::function<void(std::size_t index, std::size_t count, const std::string& path)> forOpening() const;

    struct State;

private:
    std::shared_ptr<State> state_;
};

}  // namespace ckpt::cli
