#include "cli/progress.h"

#include "util/printable.h"
#include "util/progress.h"
#include "util/signals.h"
#include "write/write.h"

#include <array>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <string_view>
#include <sys/ioctl.h>
#include <unistd.h>

namespace ckpt::cli {

namespace {

// What erases a line and what ends one: the cursor to the line's start, then the line cleared.
constexpr std::string_view kErase = "\r\x1b[K";

bool g_quiet = false;  // --quiet, cli::run's thread

// The one line on the terminal, shared by every ProgressLine of the process: which one wrote it
// last, and how many lines' work is going on (a background line waits for them).
struct Screen {
    std::mutex mutex;
    bool shown = false;  // a line is on the screen now
    int working = 0;     // foreground lines whose work has begun and not ended
};

Screen& screen()
{
    static Screen s;
    return s;
}

// For the signal handler, which takes no lock: a line is on the real stderr now.
std::atomic<bool> g_onStderr{false};

// The terminal's width, so the line never wraps (a wrapped line cannot be rewritten in place).
std::size_t columns(bool onStderr)
{
    winsize ws{};
    if (onStderr && ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
        return ws.ws_col;
    }
    // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing in ckptscope sets the environment
    if (const char* c = std::getenv("COLUMNS"); c != nullptr) {
        const long n = std::strtol(c, nullptr, 10);
        if (n > 0) {
            return static_cast<std::size_t>(n);
        }
    }
    return 80;
}

// `text` cut to `width` characters (UTF-8 aware), the cut marked with "...".
std::string fitted(const std::string& text, std::size_t width)
{
    std::size_t chars = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if ((static_cast<unsigned char>(text[i]) & 0xC0U) == 0x80U) {
            continue;  // a continuation byte
        }
        if (chars + 3 >= width) {
            std::size_t rest = 0;
            for (std::size_t j = i; j < text.size(); ++j) {
                rest += (static_cast<unsigned char>(text[j]) & 0xC0U) != 0x80U ? 1 : 0;
            }
            if (chars + rest <= width) {
                return text;
            }
            return text.substr(0, i) + "...";
        }
        ++chars;
    }
    return text;
}

std::string fileName(const std::string& path)
{
    return displayText(std::filesystem::path(path).filename().string());
}

}  // namespace

struct ProgressLine::State {
    std::ostream* err = nullptr;
    bool onStderr = false;
    bool background = false;
    std::string label;
    progress::Meter meter;
    bool counting = false;  // the last update counted something else than bytes (files opened)
    bool started = false;   // a foreground line had an update: background lines wait until it ends
    bool finished = false;

    void update(std::uint64_t done, std::uint64_t total, const std::string& detail)
    {
        const std::lock_guard lock(screen().mutex);
        start();
        if (!mayShow()) {
            return;
        }
        if (counting) {
            // The files are open and the bytes begin: the rate is measured from here, and the line
            // that counted files is replaced at once.
            counting = false;
            meter = progress::Meter(progress::Clock::now(), std::chrono::milliseconds(0));
            progress::noteReading({});  // the member opened last is not the one read first
        }
        if (!meter.due(done)) {
            return;
        }
        std::string said = detail;
        if (said.empty()) {
            if (const std::string member = progress::reading(); !member.empty()) {
                said = "reading " + fileName(member);
            }
        }
        show(meter.text(label, {done, total, said}));
    }

    void status(const std::string& text)
    {
        const std::lock_guard lock(screen().mutex);
        start();
        counting = true;
        if (!mayShow() || !meter.due(0)) {
            return;
        }
        show(label + ": " + text);
    }

    void finish()
    {
        const std::lock_guard lock(screen().mutex);
        if (finished) {
            return;
        }
        finished = true;
        if (started && !background) {
            --screen().working;
        }
        erase();
    }

    void clear()
    {
        const std::lock_guard lock(screen().mutex);
        erase();
    }

private:
    // The work has begun (the screen's lock held).
    void start()
    {
        if (!started && !finished && !background) {
            started = true;
            ++screen().working;
        }
    }
    // Whether this line may write now (the screen's lock held).
    [[nodiscard]] bool mayShow() const { return !finished && (!background || screen().working == 0); }

    // Erases the line on the screen, whichever wrote it (the screen's lock held).
    void erase() const
    {
        if (screen().shown) {
            *err << kErase << std::flush;
            screen().shown = false;
            g_onStderr = false;
        }
    }
    // Writes `text` as the line (the screen's lock held).
    void show(const std::string& text) const
    {
        // One column is left free: some terminals wrap as soon as the last one is written.
        const std::size_t width = columns(onStderr);
        *err << '\r' << fitted(text, width > 1 ? width - 1 : width) << "\x1b[K" << std::flush;
        screen().shown = true;
        if (onStderr) {
            g_onStderr = true;
        }
    }
};

QuietProgress::QuietProgress(bool quiet) : previous_(g_quiet)
{
    g_quiet = quiet;
}

QuietProgress::~QuietProgress()
{
    g_quiet = previous_;
}

bool progressShown(const std::ostream& err, bool json)
{
    if (json || g_quiet) {
        return false;
    }
    // NOLINTNEXTLINE(concurrency-mt-unsafe): read before any thread starts
    if (const char* force = std::getenv("CKPTSCOPE_PROGRESS"); force != nullptr && std::string_view(force) == "1") {
        return true;
    }
    return &err == &std::cerr && ::isatty(STDERR_FILENO) == 1;
}

namespace {

// The handlers this one runs after erasing the line, by signal number.
std::array<struct sigaction, 32> g_previous{};

extern "C" void clearLineThenPrevious(int sig)
{
    eraseProgressLine();
    const struct sigaction& before = g_previous.at(static_cast<std::size_t>(sig));
    const auto handler = before.sa_handler;
    if (handler != SIG_DFL && handler != SIG_IGN && handler != nullptr) {
        handler(sig);
        return;
    }
    // The default action: end the process by the same signal, as a shell expects.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}

}  // namespace

void eraseProgressLine()
{
    if (g_onStderr.exchange(false)) {
        [[maybe_unused]] const auto n = ::write(STDERR_FILENO, kErase.data(), kErase.size());
    }
}

void clearProgressOnSignals()
{
    onTerminationSignals(&clearLineThenPrevious, &g_previous);
}

ProgressLine::ProgressLine(std::ostream& err, bool json, std::string label, bool background)
{
    if (!progressShown(err, json)) {
        return;
    }
    state_ = std::make_shared<State>(State{&err, &err == &std::cerr, background, std::move(label),
                                           progress::Meter(progress::Clock::now(), progress::firstUpdateDelay())});
    // A new piece of work: the member file a set's earlier work read is no longer what is read.
    progress::noteReading({});
}

ProgressLine::~ProgressLine()
{
    finish();
}

void ProgressLine::update(std::uint64_t done, std::uint64_t total, const std::string& detail)
{
    if (state_) {
        state_->update(done, total, detail);
    }
}

namespace {

// "opening file 3 of 300, NAME"; "opening NAME" when the set's reader does not know its count yet
// (a ZeRO folder's first files).
std::string openingText(std::size_t index, std::size_t count, const std::string& path)
{
    if (index >= count) {
        return "opening " + fileName(path);
    }
    return "opening file " + std::to_string(index + 1) + " of " + std::to_string(count) + ", " + fileName(path);
}

}  // namespace

void ProgressLine::opening(std::size_t index, std::size_t count, const std::string& path)
{
    if (state_) {
        state_->status(openingText(index, count, path));
    }
}

void ProgressLine::status(const std::string& text)
{
    if (state_) {
        state_->status(text);
    }
}

void ProgressLine::finish()
{
    if (state_) {
        state_->finish();
    }
}

void ProgressLine::clear()
{
    if (state_) {
        state_->clear();
    }
}

std::function<void(const write::WriteProgress&)> ProgressLine::forWrite() const
{
    if (!state_) {
        return {};
    }
    return [s = state_](const write::WriteProgress& p) {
        s->update(p.bytesDone, p.bytesTotal, p.file.empty() ? std::string() : "writing " + fileName(p.file));
    };
}

std::function<void(std::uint64_t, std::uint64_t)> ProgressLine::forBytes() const
{
    if (!state_) {
        return {};
    }
    return [s = state_](std::uint64_t done, std::uint64_t total) { s->update(done, total, {}); };
}

std::function<void(std::size_t, std::size_t, const std::string&)> ProgressLine::forOpening() const
{
    if (!state_) {
        return {};
    }
    return [s = state_](std::size_t index, std::size_t count, const std::string& path) {
        s->status(openingText(index, count, path));
    };
}

}  // namespace ckpt::cli
