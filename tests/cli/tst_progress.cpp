// The progress rule (util/progress.h) on a clock the test sets, and the command line's progress
// line (cli/progress.h) written to a string: when an update shows, what it says, that it fits the
// terminal, that it is erased at the end, and when it is never shown at all.
#include "cli/progress.h"
#include "util/progress.h"

#include <QtTest>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

using ckpt::progress::Clock;
using ckpt::progress::Meter;
using namespace std::chrono_literals;

namespace {

// The frames a line wrote ("\r<text>\x1b[K" each) and whether it ended erased ("\r\x1b[K").
struct Frames {
    std::vector<std::string> texts;
    bool erased = false;
};

Frames framesOf(const std::string& written)
{
    Frames f;
    std::size_t at = 0;
    while (at < written.size()) {
        if (written.compare(at, 4, "\r\x1b[K") == 0) {
            f.erased = true;
            at += 4;
            continue;
        }
        if (written[at] != '\r') {
            f.texts.emplace_back("<garbage>");
            return f;
        }
        const auto end = written.find("\x1b[K", at);
        if (end == std::string::npos) {
            f.texts.emplace_back("<unterminated>");
            return f;
        }
        f.texts.push_back(written.substr(at + 1, end - at - 1));
        f.erased = false;
        at = end + 3;
    }
    return f;
}

// Sets an environment variable for the scope.
class Env {
public:
    Env(const char* name, const char* value) : name_(name) { qputenv(name, value); }
    ~Env() { qunsetenv(name_); }
    Env(const Env&) = delete;
    Env& operator=(const Env&) = delete;
    Env(Env&&) = delete;
    Env& operator=(Env&&) = delete;

private:
    const char* name_;
};

}  // namespace

class TestProgress : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // Nothing in the first second, then at most one update every 100 ms, however often work reports.
    void meterPacesUpdates()
    {
        const auto t0 = Clock::now();
        Meter m(t0, 1000ms);
        QVERIFY(!m.due(10, t0));
        QVERIFY(!m.due(20, t0 + 999ms));
        QVERIFY(m.due(30, t0 + 1000ms));
        QVERIFY(!m.due(40, t0 + 1050ms));
        QVERIFY(!m.due(40, t0 + 1099ms));
        QVERIFY(m.due(50, t0 + 1100ms));
        int shown = 0;
        for (auto t = 1101ms; t <= 3100ms; t += 1ms) {
            shown += m.due(60, t0 + t) ? 1 : 0;
        }
        QCOMPARE(shown, 20);  // 2 s of reports a millisecond apart: 20 updates
    }

    // The rate is measured over the last five seconds, so it follows a change of pace; the time
    // left is what remains at that rate.
    void meterMeasuresRateAndTimeLeft()
    {
        const auto t0 = Clock::now();
        Meter m(t0, 0ms);
        QVERIFY(m.due(0, t0));
        QCOMPARE(m.bytesPerSecond(), 0.0);
        QVERIFY(!m.secondsLeft(0, 100).has_value());
        QVERIFY(m.due(1'000'000'000, t0 + 1s));
        QCOMPARE(m.bytesPerSecond(), 1e9);
        QCOMPARE(*m.secondsLeft(1'000'000'000, 3'000'000'000), 2.0);
        QVERIFY(!m.secondsLeft(1'000'000'000, 0).has_value());  // no total, no time left
        // 20 s at 1 GB/s, then 10 s at 100 MB/s: the rate is the slow one, not the run's average.
        std::uint64_t done = 1'000'000'000;
        std::chrono::milliseconds t = 1s;
        for (int i = 0; i < 200; ++i) {
            t += 100ms;
            done += 100'000'000;
            QVERIFY(m.due(done, t0 + t));
        }
        for (int i = 0; i < 100; ++i) {
            t += 100ms;
            done += 10'000'000;
            QVERIFY(m.due(done, t0 + t));
        }
        QVERIFY2(std::abs(m.bytesPerSecond() - 1e8) < 1e6, qPrintable(QString::number(m.bytesPerSecond())));
    }

    void textSaysWhatIsKnown()
    {
        const auto t0 = Clock::now();
        Meter m(t0, 0ms);
        QVERIFY(m.due(0, t0));
        QCOMPARE(QString::fromStdString(m.text("convert", {0, 2ULL << 30, {}})),
                 QStringLiteral("convert: 0 B of 2.0 GiB (0%)"));
        QVERIFY(m.due(1ULL << 30, t0 + 1s));
        QCOMPARE(QString::fromStdString(m.text("convert", {1ULL << 30, 2ULL << 30, "reading model-00002.safetensors"})),
                 QStringLiteral("convert: 1.0 GiB of 2.0 GiB (50%), 1.07 GB/s, 1 s left, reading "
                                "model-00002.safetensors"));
        QCOMPARE(QString::fromStdString(m.text("remote", {1ULL << 30, 0, "3 requests"})),
                 QStringLiteral("remote: 1.0 GiB, 1.07 GB/s, 3 requests"));
    }

    void ratesAndTimesRead()
    {
        using ckpt::progress::rateText;
        using ckpt::progress::timeLeftText;
        QCOMPARE(QString::fromStdString(rateText(1.43e9)), QStringLiteral("1.43 GB/s"));
        QCOMPARE(QString::fromStdString(rateText(352e6)), QStringLiteral("352 MB/s"));
        QCOMPARE(QString::fromStdString(rateText(12.4e3)), QStringLiteral("12.4 kB/s"));
        QCOMPARE(QString::fromStdString(rateText(80)), QStringLiteral("80 B/s"));
        QCOMPARE(QString::fromStdString(rateText(999.9e6)), QStringLiteral("1.00 GB/s"));
        QCOMPARE(QString::fromStdString(timeLeftText(5)), QStringLiteral("5 s"));
        QCOMPARE(QString::fromStdString(timeLeftText(200)), QStringLiteral("3 min 20 s"));
        QCOMPARE(QString::fromStdString(timeLeftText(7500)), QStringLiteral("2 h 05 min"));
    }

    // The one environment knob: the delay before the first update.
    void firstUpdateDelayReadsTheEnvironment()
    {
        QCOMPARE(ckpt::progress::firstUpdateDelay(), ckpt::progress::kDelay);
        {
            const Env e("CKPTSCOPE_PROGRESS_AFTER_MS", "0");
            QCOMPARE(ckpt::progress::firstUpdateDelay(), 0ms);
        }
        const Env bad("CKPTSCOPE_PROGRESS_AFTER_MS", "soon");
        QCOMPARE(ckpt::progress::firstUpdateDelay(), ckpt::progress::kDelay);
    }

    // Reported as fast as work likes for 350 ms, a line is written about four times, each frame
    // rewrites the line in place, and finish() erases it.
    void lineIsThrottledAndErased()
    {
        const Env force("CKPTSCOPE_PROGRESS", "1");
        const Env now("CKPTSCOPE_PROGRESS_AFTER_MS", "0");
        std::ostringstream err;
        std::uint64_t calls = 0;
        {
            ckpt::cli::ProgressLine line(err, false, "convert");
            QVERIFY(line.active());
            const auto until = Clock::now() + 350ms;
            for (std::uint64_t done = 0; Clock::now() < until; ++done) {
                line.update(done, 1ULL << 40);
                ++calls;
            }
            line.finish();
            line.update(1, 2);  // ignored once finished
        }
        const Frames f = framesOf(err.str());
        QVERIFY2(calls > 1000, qPrintable(QString::number(calls)));
        QVERIFY2(f.texts.size() >= 3 && f.texts.size() <= 5, qPrintable(QString::number(f.texts.size())));
        for (const auto& t : f.texts) {
            QVERIFY2(t.starts_with("convert: ") && t.find(" of 1.0 TiB (") != std::string::npos, t.c_str());
        }
        QVERIFY(f.erased);
        QVERIFY(err.str().ends_with("\r\x1b[K"));
    }

    // A line never wraps (a wrapped line cannot be rewritten in place): it is cut to the
    // terminal's width less one column.
    void lineFitsTheWidth()
    {
        const Env force("CKPTSCOPE_PROGRESS", "1");
        const Env now("CKPTSCOPE_PROGRESS_AFTER_MS", "0");
        const Env cols("COLUMNS", "40");
        std::ostringstream err;
        ckpt::cli::ProgressLine line(err, false, "convert");
        line.update(5, 10, "reading model-00002-of-00004-with-a-very-long-name.safetensors");
        line.finish();
        const Frames f = framesOf(err.str());
        QCOMPARE(f.texts.size(), std::size_t{1});
        QCOMPARE(f.texts[0].size(), std::size_t{39});
        QVERIFY2(f.texts[0].ends_with("..."), f.texts[0].c_str());
    }

    // --json, --quiet, and a stream that is no terminal show nothing at all.
    void neverWithJsonQuietOrNoTerminal()
    {
        const Env now("CKPTSCOPE_PROGRESS_AFTER_MS", "0");
        {
            std::ostringstream err;  // not stderr, not forced
            ckpt::cli::ProgressLine line(err, false, "convert");
            QVERIFY(!line.active());
            line.update(1, 2);
            line.finish();
            QVERIFY(err.str().empty());
        }
        const Env force("CKPTSCOPE_PROGRESS", "1");
        {
            std::ostringstream err;
            ckpt::cli::ProgressLine line(err, true, "convert");
            line.update(1, 2);
            QVERIFY(!line.active() && err.str().empty());
        }
        {
            const ckpt::cli::QuietProgress quiet(true);
            std::ostringstream err;
            ckpt::cli::ProgressLine line(err, false, "convert");
            line.update(1, 2);
            QVERIFY(!line.active() && err.str().empty());
        }
        std::ostringstream err;
        ckpt::cli::ProgressLine line(err, false, "convert");
        QVERIFY(line.active());  // the quiet scope ended
    }

    // A remote transfer's line (background) gives way while a command's own work shows its line,
    // and comes back once that work is over.
    void backgroundLineWaitsForWork()
    {
        const Env force("CKPTSCOPE_PROGRESS", "1");
        const Env now("CKPTSCOPE_PROGRESS_AFTER_MS", "0");
        std::ostringstream err;
        ckpt::cli::ProgressLine remote(err, false, "remote", true);
        remote.update(100, 0, "1 request");
        {
            ckpt::cli::ProgressLine work(err, false, "convert");
            work.update(1, 10);
            QTest::qWait(120);
            remote.update(200, 0, "2 requests");  // hidden: the convert line is the one shown
            work.finish();
        }
        QTest::qWait(120);
        remote.update(300, 0, "3 requests");
        remote.finish();
        const Frames f = framesOf(err.str());
        QCOMPARE(f.texts.size(), std::size_t{3});
        QVERIFY2(f.texts[0].starts_with("remote: 100 B"), f.texts[0].c_str());
        QVERIFY2(f.texts[1].starts_with("convert: 1 B of 10 B"), f.texts[1].c_str());
        QVERIFY2(f.texts[2].starts_with("remote: 300 B") && f.texts[2].ends_with("3 requests"), f.texts[2].c_str());
        QVERIFY(f.erased);
    }

    // Opening a set's member files counts them; the bytes that follow replace the count at once.
    void openingCountsFilesThenBytes()
    {
        const Env force("CKPTSCOPE_PROGRESS", "1");
        const Env now("CKPTSCOPE_PROGRESS_AFTER_MS", "0");
        std::ostringstream err;
        ckpt::cli::ProgressLine line(err, false, "convert");
        line.forOpening()(2, 300, "/data/run/model-00003-of-00300.safetensors");
        QTest::qWait(120);
        line.opening(0, 0, "/data/zero/mp_rank_00_model_states.pt");  // a count not known yet
        line.update(10, 20);
        line.finish();
        const Frames f = framesOf(err.str());
        QCOMPARE(f.texts.size(), std::size_t{3});
        QCOMPARE(QString::fromStdString(f.texts[0]),
                 QStringLiteral("convert: opening file 3 of 300, model-00003-of-00300.safetensors"));
        QCOMPARE(QString::fromStdString(f.texts[1]), QStringLiteral("convert: opening mp_rank_00_model_states.pt"));
        QVERIFY2(f.texts[2].starts_with("convert: 10 B of 20 B (50%)"), f.texts[2].c_str());
    }

    // The set readers name the member file they read; a line says it when its work names nothing.
    void lineNamesTheMemberBeingRead()
    {
        const Env force("CKPTSCOPE_PROGRESS", "1");
        const Env now("CKPTSCOPE_PROGRESS_AFTER_MS", "0");
        const Env cols("COLUMNS", "200");
        std::ostringstream err;
        ckpt::cli::ProgressLine line(err, false, "diff");
        QVERIFY(ckpt::progress::reading().empty());  // a new line forgets what earlier work read
        ckpt::progress::noteReading("/sets/hf/model-00002-of-00004.safetensors");
        line.update(1, 4);
        line.finish();
        const Frames f = framesOf(err.str());
        QCOMPARE(f.texts.size(), std::size_t{1});
        QVERIFY2(f.texts[0].ends_with(", reading model-00002-of-00004.safetensors"), f.texts[0].c_str());
    }
};

QTEST_GUILESS_MAIN(TestProgress)
#include "tst_progress.moc"
