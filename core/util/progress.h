// Progress of long work, the one rule the command line's progress line and the window's busy bars
// follow: when an update may be shown (nothing for work under a second, then at most ten updates a
// second), how fast the work goes and how long it has left (measured over the last few seconds),
// and the text that says so ("writing: 1.21 GiB of 8.00 GiB (15%), 1.43 GB/s, 5 s left").
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace ckpt::progress {

using Clock = std::chrono::steady_clock;

// Work that ends within kDelay shows nothing; after that an update at most every kInterval.
inline constexpr std::chrono::milliseconds kDelay{1000};
inline constexpr std::chrono::milliseconds kInterval{100};
// The rate is measured over about this much of the latest work, so it follows a change of pace
// (the page cache filling, a slower disk) without jumping with every update.
inline constexpr std::chrono::seconds kRateWindow{5};
// No rate (nor time left) is shown before the samples span this much.
inline constexpr std::chrono::milliseconds kMinRateSpan{500};

// Where a piece of work stands.
struct Status {
    std::uint64_t done = 0;   // bytes
    std::uint64_t total = 0;  // bytes; 0 when not known (a download of unknown size)
    // What the work is on now, said after the figures: "reading model-00002-of-00004.safetensors".
    std::string detail;
};

// Paces and measures one piece of work. due() says whether an update may be shown now and takes
// the sample the rate is measured from; not thread-safe (callers serialise, as throttled() does).
class Meter {
public:
    explicit Meter(Clock::time_point start = Clock::now(), std::chrono::milliseconds delay = kDelay);
    // True when an update may be shown at `now` (`delay` after the start, then kInterval after the
    // last one); `done` is then taken as a sample of the rate.
    bool due(std::uint64_t done, Clock::time_point now = Clock::now());
    // Bytes a second over the last kRateWindow of samples (since the start, at the first update);
    // 0 while they span less than kMinRateSpan.
    [[nodiscard]] double bytesPerSecond() const;
    // At the measured rate; nothing while the rate or the total is unknown.
    [[nodiscard]] std::optional<double> secondsLeft(std::uint64_t done, std::uint64_t total) const;
    // "<label>: <done> of <total> (<pct>%), <rate>, <left> left, <detail>", each part only when known.
    [[nodiscard]] std::string text(std::string_view label, const Status& s) const;

private:
    Clock::time_point start_;
    Clock::time_point last_;
    std::chrono::milliseconds delay_;
    bool shown_ = false;
    std::deque<std::pair<Clock::time_point, std::uint64_t>> samples_;  // (when, done), oldest first
};

// A rate in the decimal unit that keeps three figures: "1.43 GB/s", "352 MB/s", "12.4 kB/s", "80 B/s".
[[nodiscard]] std::string rateText(double bytesPerSecond);
// A time left as people read it: "5 s", "3 min 20 s", "2 h 05 min".
[[nodiscard]] std::string timeLeftText(double seconds);
// The delay before the first update: kDelay, or CKPTSCOPE_PROGRESS_AFTER_MS (read once; scripts and
// the tests set 0 to see progress of work that lasts less than a second).
[[nodiscard]] std::chrono::milliseconds firstUpdateDelay();

// `show` as a transfer's byte counter calls it (remote::TransferStats::progress): with the bytes so
// far and the meter that measured them, by the rule above. Calls from several threads are serialised.
[[nodiscard]] std::function<void(std::uint64_t)>
throttled(std::function<void(std::uint64_t bytes, const Meter& meter)> show);

// The member file of a multi-file checkpoint whose bytes are being read now, for a progress line
// ("reading model-00002-of-00004.safetensors"). The set readers note each member as they start
// reading from it (core/sharded: members.cpp, hf_set.cpp, open_control.cpp); the latest note
// stands. One per process: the command line reads one set at a time, and the window does not ask.
void noteReading(std::string_view path);
[[nodiscard]] std::string reading();

}  // namespace ckpt::progress
