// The test-load helper as a child process, apart from the protocol testload.cpp speaks with it.
#pragma once

#include "util/error.h"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace ckpt::device::detail {

inline constexpr std::size_t kMessageExcerpt = 300;  // characters of helper output quoted in an error

// Text from the helper's raw streams ends up in a one-line message shown on a terminal and in
// JSON: control bytes (escape sequences, newlines) and non-ASCII bytes (C1 controls, invalid UTF-8
// that the JSON writer would reject) become \xNN, and it is cut after `limit` characters.
[[nodiscard]] std::string printable(std::string_view raw, std::size_t limit);

// How a wait status ended: "exited with status 1", "was killed by signal Killed".
[[nodiscard]] std::string describeExit(int status);

// The helper process: pipes to its stdin/stdout/stderr, bounded buffers, its own process group
// (so whatever it started dies with it); killed and reaped when dropped.
class HelperProcess {
public:
    enum class Pump { Open, Closed, Overflow };

    HelperProcess() = default;
    HelperProcess(const HelperProcess&) = delete;
    HelperProcess& operator=(const HelperProcess&) = delete;
    ~HelperProcess();

    Expected<void> spawn(const std::string& exe);

    [[nodiscard]] pid_t pid() const { return pid_; }

    // Writes one line to the helper's stdin, then closes it (EOF: nothing more comes) unless `more`
    // lines will follow (a replay rank waits for "release").
    bool writeLine(const std::string& line, bool more = false);

    // Waits up to timeoutMs for output. Appends complete stdout lines to `lines`, each a protocol
    // event (a JSON object with "event"); keeps the tail of stderr. Overflow (see overflow()) once
    // the helper wrote more than the caps allow, or anything on stdout that is not an event: the
    // caller kills it at once.
    Pump pump(int timeoutMs, std::vector<std::string>& lines);

    // What the helper did ("wrote a line longer than 1.0 MiB to stdout", "wrote something that is
    // not its protocol to stdout: '...'").
    [[nodiscard]] const std::string& overflow() const { return overflow_; }

    // True once the helper itself has exited. It is left a zombie, so its process group id cannot
    // be reused before reap() and killGroup() can still reach what it left behind.
    bool exited() const;

    void killGroup();

    // Gives the helper up to `grace` to exit, kills whatever is left of its process group (the
    // helper too when it overstayed) and reaps it. Returns the wait status, or -1 when the helper
    // could not be reaped within a few seconds of SIGKILL (stuck()).
    int finish(std::chrono::milliseconds grace);

    // The helper did not go after SIGKILL: a process blocked in the GPU driver after a device error
    // (an Xid) dies only when the driver lets it. It is left to a thread of its own to reap, so no
    // caller waits on it for ever.
    [[nodiscard]] bool stuck() const { return stuck_; }

    // The last non-empty line the helper wrote to stderr (LibTorch's abort message, a loader
    // error), made printable.
    [[nodiscard]] std::string lastErrLine() const;

private:
    static void closeFd(int& fd);

    // Returns the bytes read into `buf`, or 0 after closing `fd` at its end.
    static std::size_t readSome(int& fd, std::array<char, 65536>& buf);

    void readStdout(std::vector<std::string>& lines);

    void readStderr();

    int reap();

    pid_t pid_ = -1;
    int status_ = -1;
    bool stuck_ = false;
    int in_ = -1;
    int out_ = -1;
    int err_ = -1;
    std::uint64_t outTotal_ = 0;
    std::uint64_t errTotal_ = 0;
    std::string outBuf_;  // one partial line, at most kMaxLineBytes plus one read
    std::string errText_;
    std::string overflow_;
    std::array<char, 65536> buf_{};
};

}  // namespace ckpt::device::detail
