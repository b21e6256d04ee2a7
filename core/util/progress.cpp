#include "util/progress.h"

#include "util/bytes.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace ckpt::progress {

Meter::Meter(Clock::time_point start, std::chrono::milliseconds delay)
    : start_(start), last_(start), delay_(delay), samples_{{start, 0}}
{
}

bool Meter::due(std::uint64_t done, Clock::time_point now)
{
    if (now - start_ < delay_ || (shown_ && now - last_ < kInterval)) {
        return false;
    }
    shown_ = true;
    last_ = now;
    // Samples are taken as updates are shown (ten a second at most, however often work reports),
    // keeping one older than the window so the rate spans a whole window once there is one.
    samples_.emplace_back(now, done);
    while (samples_.size() > 2 && now - samples_[1].first >= kRateWindow) {
        samples_.pop_front();
    }
    return true;
}

double Meter::bytesPerSecond() const
{
    const auto& [t0, d0] = samples_.front();
    const auto& [t1, d1] = samples_.back();
    // A rate over less than kMinRateSpan says more about when the samples fell than about the work.
    if (t1 - t0 < kMinRateSpan || d1 < d0) {
        return 0;
    }
    const double seconds = std::chrono::duration<double>(t1 - t0).count();
    return static_cast<double>(d1 - d0) / seconds;
}

std::optional<double> Meter::secondsLeft(std::uint64_t done, std::uint64_t total) const
{
    const double rate = bytesPerSecond();
    if (total == 0 || rate <= 0) {
        return std::nullopt;
    }
    return done >= total ? 0.0 : static_cast<double>(total - done) / rate;
}

std::string Meter::text(std::string_view label, const Status& s) const
{
    std::string t(label);
    t += label.empty() ? "" : ": ";
    t += humanBytes(s.done);
    if (s.total > 0) {
        const std::uint64_t done = std::min(s.done, s.total);
        t += " of " + humanBytes(s.total) + " (" +
             std::to_string(static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(s.total))) + "%)";
    }
    if (const double rate = bytesPerSecond(); rate > 0) {
        t += ", " + rateText(rate);
    }
    if (const auto left = secondsLeft(s.done, s.total)) {
        t += ", " + timeLeftText(*left) + " left";
    }
    if (!s.detail.empty()) {
        t += ", " + s.detail;
    }
    return t;
}

std::string rateText(double bytesPerSecond)
{
    static constexpr std::array<const char*, 5> kUnits{"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
    double v = std::max(0.0, bytesPerSecond);
    std::size_t u = 0;
    while (v >= 999.5 && u + 1 < kUnits.size()) {
        v /= 1000.0;
        ++u;
    }
    // Three figures: 1.43, 12.4, 352; whole bytes below a kilobyte.
    const int decimals = u == 0 || v >= 99.95 ? 0 : v >= 9.995 ? 1 : 2;
    std::array<char, 32> buf{};
    std::snprintf(buf.data(), buf.size(), "%.*f %s", decimals, v, kUnits.at(u));
    return buf.data();
}

std::string timeLeftText(double seconds)
{
    const auto s = static_cast<std::uint64_t>(std::llround(std::max(0.0, seconds)));
    std::array<char, 48> buf{};
    if (s < 60) {
        std::snprintf(buf.data(), buf.size(), "%llu s", static_cast<unsigned long long>(s));
    } else if (s < 3600) {
        std::snprintf(buf.data(), buf.size(), "%llu min %02llu s", static_cast<unsigned long long>(s / 60),
                      static_cast<unsigned long long>(s % 60));
    } else {
        std::snprintf(buf.data(), buf.size(), "%llu h %02llu min", static_cast<unsigned long long>(s / 3600),
                      static_cast<unsigned long long>(s / 60 % 60));
    }
    return buf.data();
}

std::chrono::milliseconds firstUpdateDelay()
{
    // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing in ckptscope sets the environment
    const char* v = std::getenv("CKPTSCOPE_PROGRESS_AFTER_MS");
    if (v == nullptr || *v == '\0') {
        return kDelay;
    }
    long ms = 0;
    const std::string_view text(v);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
    if (ec != std::errc() || end != text.data() + text.size() || ms < 0) {
        return kDelay;
    }
    return std::chrono::milliseconds(ms);
}

std::function<void(std::uint64_t)> throttled(std::function<void(std::uint64_t bytes, const Meter& meter)> show)
{
    struct State {
        Meter meter{Clock::now(), firstUpdateDelay()};
        std::mutex mutex;
    };
    return [state = std::make_shared<State>(), show = std::move(show)](std::uint64_t bytes) {
        const std::lock_guard lock(state->mutex);
        if (state->meter.due(bytes)) {
            show(bytes, state->meter);
        }
    };
}

namespace {

struct Reading {
    std::mutex mutex;
    std::string path;
};

Reading& readingNow()
{
    static Reading r;
    return r;
}

}  // namespace

void noteReading(std::string_view path)
{
    auto& r = readingNow();
    const std::lock_guard lock(r.mutex);
    if (r.path != path) {
        r.path.assign(path);
    }
}

std::string reading()
{
    auto& r = readingNow();
    const std::lock_guard lock(r.mutex);
    return r.path;
}

}  // namespace ckpt::progress
