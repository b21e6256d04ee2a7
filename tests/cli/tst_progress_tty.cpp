// The progress line as a user sees it: the real `ckptscope` run on a pseudo-terminal (forkpty), its
// bytes played onto a model of the screen. Progress appears (bytes of total, rate, time left),
// no more than ten times a second, fits the terminal, and leaves the screen exactly as the same
// command leaves it without a terminal: after success, after a failed write, and after Ctrl-C
// (SIGINT) in the middle of a write. Nothing is shown with --json, --quiet, or for work under a second.
#include "process_run.h"
#include "remote/servers.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <functional>
#include <poll.h>
#include <pty.h>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;  // NOLINT(readability-redundant-declaration): handed on to the child

namespace {

constexpr int kColumns = 100;

QString fixture(const QString& name)
{
    return QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/") + name;
}

struct TtyRun {
    int rc = -1;  // exit status, or 128 + the signal, as a shell says it
    QByteArray bytes;
    qint64 ms = 0;
};

struct TtyOptions {
    std::vector<std::string> env;                         // NAME=value, added to (or replacing in) the environment
    rlim_t fileLimit = RLIM_INFINITY;                     // RLIMIT_FSIZE: a write past it fails with EFBIG
    std::function<void(pid_t, const QByteArray&)> watch;  // shown the output so far, every 50 ms at least
};

// Runs ckptscope with stdin, stdout and stderr on a new pseudo-terminal of kColumns columns, as a
// shell in a terminal window would, and returns everything it wrote there.
TtyRun runOnTerminal(const QStringList& args, const TtyOptions& o = {})
{
    // Everything the child needs is made before fork: only async-signal-safe calls after it.
    std::vector<std::string> argStore{CKPTSCOPE_TEST_CLI};
    for (const auto& a : args) {
        argStore.push_back(a.toStdString());
    }
    std::vector<std::string> envStore;
    for (char** e = environ; *e != nullptr; ++e) {  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
        const std::string var(*e);
        const std::string name = var.substr(0, var.find('='));
        const bool replaced = std::any_of(o.env.begin(), o.env.end(),
                                          [&](const std::string& v) { return v.substr(0, v.find('=')) == name; });
        if (!replaced && name != "CKPTSCOPE_PROGRESS" && name != "CKPTSCOPE_PROGRESS_AFTER_MS" && name != "COLUMNS") {
            envStore.push_back(var);
        }
    }
    envStore.insert(envStore.end(), o.env.begin(), o.env.end());
    std::vector<char*> argv;
    for (auto& a : argStore) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : envStore) {
        envp.push_back(e.data());
    }
    envp.push_back(nullptr);
    winsize ws{};
    ws.ws_row = 40;
    ws.ws_col = kColumns;
    int master = -1;
    QElapsedTimer timer;
    timer.start();
    const pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
    if (pid == 0) {
        if (o.fileLimit != RLIM_INFINITY) {
            const rlimit lim{o.fileLimit, o.fileLimit};
            ::setrlimit(RLIMIT_FSIZE, &lim);
            ::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead of killing the process
        }
        ::execve(argv[0], argv.data(), envp.data());
        ::_exit(127);
    }
    TtyRun r;
    if (pid < 0) {
        return r;
    }
    std::array<char, 65536> buf{};
    for (;;) {
        if (timer.elapsed() > 120000) {
            ::kill(pid, SIGKILL);
        }
        pollfd p{master, POLLIN, 0};
        ::poll(&p, 1, 50);
        if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
            const ssize_t n = ::read(master, buf.data(), buf.size());
            if (n <= 0) {
                break;  // EIO: the child and everything it started closed the terminal
            }
            r.bytes.append(buf.data(), n);
        }
        if (o.watch) {
            o.watch(pid, r.bytes);
        }
    }
    ::close(master);
    int status = 0;
    ::waitpid(pid, &status, 0);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.ms = timer.elapsed();
    return r;
}

// What a terminal shows after `bytes`: CR, LF, ESC[K (erase to the end of the line), other escape
// sequences skipped, every other byte a character that overwrites the one under the cursor.
QStringList screenOf(const QByteArray& bytes)
{
    std::vector<QByteArray> lines(1);
    std::size_t row = 0;
    int col = 0;
    for (qsizetype i = 0; i < bytes.size(); ++i) {
        const char c = bytes[i];
        if (c == '\r') {
            col = 0;
        } else if (c == '\n') {
            ++row;
            if (row == lines.size()) {
                lines.emplace_back();
            }
        } else if (c == '\x1b' && i + 1 < bytes.size() && bytes[i + 1] == '[') {
            qsizetype j = i + 2;
            while (j < bytes.size() && (bytes[j] < 0x40 || bytes[j] > 0x7e)) {
                ++j;
            }
            if (j < bytes.size() && bytes[j] == 'K') {
                lines[row].truncate(col);
            }
            i = j;
        } else {
            QByteArray& line = lines[row];
            if (line.size() < col) {
                line.append(QByteArray(col - line.size(), ' '));
            }
            if (line.size() == col) {
                line.append(c);
            } else {
                line[col] = c;
            }
            ++col;
        }
    }
    QStringList out;
    for (const auto& l : lines) {
        out.push_back(QString::fromUtf8(l));
    }
    while (!out.isEmpty() && out.back().isEmpty()) {
        out.pop_back();
    }
    return out;
}

QStringList linesOf(const QByteArray& text)
{
    QStringList out = QString::fromUtf8(text).split(QLatin1Char('\n'));
    while (!out.isEmpty() && out.back().isEmpty()) {
        out.pop_back();
    }
    return out;
}

// The progress frames in a terminal's bytes: each "\r<text>\x1b[K" whose text starts with `label`.
QStringList framesOf(const QByteArray& bytes, const QByteArray& label)
{
    QStringList frames;
    for (qsizetype at = bytes.indexOf("\r" + label); at >= 0; at = bytes.indexOf("\r" + label, at + 1)) {
        const qsizetype end = bytes.indexOf("\x1b[K", at);
        if (end < 0) {
            frames.push_back(QStringLiteral("<unterminated>"));
            break;
        }
        frames.push_back(QString::fromUtf8(bytes.mid(at + 1, end - at - 1)));
    }
    return frames;
}

// The same command without a terminal (pipes), as a script runs it: its stdout, then its stderr.
QStringList withoutTerminal(const QStringList& args, const std::vector<std::string>& env = {})
{
    std::vector<std::string> argv{"/usr/bin/env"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.emplace_back(CKPTSCOPE_TEST_CLI);
    for (const auto& a : args) {
        argv.push_back(a.toStdString());
    }
    const auto r = ckpt::test::runProcess(argv);
    return linesOf(r.out) + linesOf(r.err);
}

const std::vector<std::string> kNow{"CKPTSCOPE_PROGRESS_AFTER_MS=0"};

}  // namespace

class TestProgressTty : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { QVERIFY(dir_.isValid()); }

    // convert of a 40,000-tensor file: the line shows bytes of the total, a rate and the time left,
    // at most ten times a second, within the terminal's width, and the screen ends as the same
    // command's output without a terminal (the plan, one rule summarised, the closing line).
    void convertShowsProgressThenLeavesTheScreenClean()
    {
        const QString out = dir_.filePath(QStringLiteral("big.pt"));
        const QStringList args{QStringLiteral("convert"),      fixture(QStringLiteral("big40k.pt")),
                               QStringLiteral("-o"),           out,
                               QStringLiteral("--add-prefix"), QStringLiteral("model.")};
        const TtyRun r = runOnTerminal(args, {kNow, RLIM_INFINITY, {}});
        QCOMPARE(r.rc, 0);
        const QStringList frames = framesOf(r.bytes, "convert: ");
        QVERIFY2(!frames.isEmpty(), r.bytes.constData());
        // Bytes of the total, then the rate and time left once half a second of work measures them
        // (tst_progress checks those on a clock it sets).
        static const QRegularExpression kFrame(
            QStringLiteral(R"(^convert: [0-9.]+ (B|KiB|MiB|GiB) of [0-9.]+ (B|KiB|MiB|GiB) \(\d+%\))"
                           R"((, [0-9.]+ [kMGT]?B/s, [0-9]+ (s|min [0-9]+ s) left)?$)"));
        for (const auto& f : frames) {
            QVERIFY2(kFrame.match(f).hasMatch(), qPrintable(f));
            QVERIFY2(f.size() < kColumns, qPrintable(f));
        }
        QVERIFY2(frames.size() <= r.ms / 100 + 2,
                 qPrintable(QStringLiteral("%1 frames in %2 ms").arg(frames.size()).arg(r.ms)));
        const QStringList screen = screenOf(r.bytes);
        QCOMPARE(screen, withoutTerminal(args));
        QVERIFY(screen.back().startsWith(QStringLiteral("wrote ")));
        QVERIFY2(screen.join(QLatin1Char('\n')).contains(QStringLiteral("add 'model.' to 40000 keys: ")),
                 qPrintable(screen.join(QLatin1Char('\n'))));
    }

    // Every other long command of issue 43 shows its own line on a terminal too, and leaves the
    // screen as the same command leaves it without one: diff (of files and of sets), a set's
    // consolidation (which first counts the files it opens), a --shard-size split, --format dcp.
    void everyLongCommandShowsItsLine_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("label");
        QTest::addColumn<QString>("output");  // removed before each run, so both runs write it afresh
        QTest::addColumn<QString>("first");   // what the first frame says after the label, when known
        const QString big = fixture(QStringLiteral("big40k.pt"));
        const QString set = fixture(QStringLiteral("sharded/hf_st"));
        const QString out = dir_.filePath(QStringLiteral("long"));
        QTest::newRow("diff") << QStringList{QStringLiteral("diff"), big, big} << QStringLiteral("diff") << QString()
                              << QString();
        QTest::newRow("diff of sets") << QStringList{QStringLiteral("diff"), set, set} << QStringLiteral("diff")
                                      << QString() << QString();
        QTest::newRow("set consolidation")
            << QStringList{QStringLiteral("convert"), set, QStringLiteral("-o"), out + QStringLiteral(".safetensors")}
            << QStringLiteral("convert") << out + QStringLiteral(".safetensors")
            << QStringLiteral("opening file 1 of ");
        QTest::newRow("split") << QStringList{QStringLiteral("convert"),      big,
                                              QStringLiteral("--shard-size"), QStringLiteral("4MB"),
                                              QStringLiteral("-o"),           out}
                               << QStringLiteral("convert") << out << QString();
        // Not big40k.pt: the DCP writer takes minutes on 40,000 tensors (its time grows as their square).
        QTest::newRow("dcp") << QStringList{QStringLiteral("convert"),  fixture(QStringLiteral("views.pt")),
                                            QStringLiteral("--format"), QStringLiteral("dcp"),
                                            QStringLiteral("-o"),       out}
                             << QStringLiteral("convert") << out << QString();
    }

    void everyLongCommandShowsItsLine()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, label);
        QFETCH(QString, output);
        QFETCH(QString, first);
        const auto fresh = [&] {
            if (!output.isEmpty()) {  // QDir("") is the working directory
                QFile::remove(output);
                QDir(output).removeRecursively();
            }
        };
        fresh();
        const TtyRun r = runOnTerminal(args, {kNow, RLIM_INFINITY, {}});
        const QStringList frames = framesOf(r.bytes, (label + QStringLiteral(": ")).toUtf8());
        QVERIFY2(!frames.isEmpty(), r.bytes.constData());
        QVERIFY2(first.isEmpty() || frames.front().startsWith(label + QStringLiteral(": ") + first),
                 qPrintable(frames.front()));
        QVERIFY2(std::any_of(frames.begin(), frames.end(),
                             [](const QString& f) { return f.contains(QStringLiteral(" of ")) && f.contains(u'%'); }),
                 qPrintable(frames.join(u'\n')));
        // CKPTSCOPE_PROGRESS_AFTER_MS=0 shows each of a command's lines (each side's opening, then the
        // comparison) at once; after that, ten a second at most.
        QVERIFY2(frames.size() <= r.ms / 100 + 4,
                 qPrintable(QStringLiteral("%1 frames in %2 ms").arg(frames.size()).arg(r.ms)));
        const QStringList screen = screenOf(r.bytes);
        fresh();
        QCOMPARE(screen, withoutTerminal(args));
    }

    // check --values reports once per tensor it scans (40,000 of them): the line is still written
    // at most ten times a second.
    void valueScanIsThrottled()
    {
        const QStringList args{QStringLiteral("check"), QStringLiteral("--values"),
                               fixture(QStringLiteral("big40k.pt"))};
        const TtyRun r = runOnTerminal(args, {kNow, RLIM_INFINITY, {}});
        const QStringList frames = framesOf(r.bytes, "check: ");
        QVERIFY2(!frames.isEmpty(), r.bytes.constData());
        QVERIFY2(frames.size() <= r.ms / 100 + 2,
                 qPrintable(QStringLiteral("%1 frames in %2 ms").arg(frames.size()).arg(r.ms)));
        QCOMPARE(screenOf(r.bytes), withoutTerminal(args));
    }

    // Work under a second shows nothing (the default delay), and neither --json nor --quiet ever
    // shows a line: the terminal gets exactly what a pipe gets.
    void nothingForShortWorkJsonOrQuiet()
    {
        const QString out = dir_.filePath(QStringLiteral("small.pt"));
        const QStringList shortWork{QStringLiteral("convert"), fixture(QStringLiteral("ddp_sd.pt")),
                                    QStringLiteral("-o"), out, QStringLiteral("--single-card")};
        TtyRun r = runOnTerminal(shortWork);
        QCOMPARE(r.rc, 0);
        QVERIFY2(!r.bytes.contains("\x1b["), r.bytes.constData());
        QCOMPARE(screenOf(r.bytes), withoutTerminal(shortWork));

        const QString big = fixture(QStringLiteral("big40k.pt"));
        const QString set = fixture(QStringLiteral("sharded/hf_st"));
        for (const QStringList& args :
             {QStringList{QStringLiteral("convert"), big, QStringLiteral("-o"), out, QStringLiteral("--json")},
              QStringList{QStringLiteral("convert"), big, QStringLiteral("-o"), out, QStringLiteral("--quiet")},
              QStringList{QStringLiteral("check"), QStringLiteral("--values"), QStringLiteral("-q"), big},
              QStringList{QStringLiteral("diff"), big, big, QStringLiteral("--json")},
              QStringList{QStringLiteral("convert"), set, QStringLiteral("-o"), out, QStringLiteral("--json")},
              QStringList{QStringLiteral("convert"), set, QStringLiteral("-o"), out, QStringLiteral("-q")},
              QStringList{QStringLiteral("check"), set, QStringLiteral("--values"), QStringLiteral("--json")},
              QStringList{QStringLiteral("inspect"), set, QStringLiteral("--json")},
              QStringList{QStringLiteral("diff"), set, set, QStringLiteral("--json")}}) {
            r = runOnTerminal(args, {kNow, RLIM_INFINITY, {}});
            QVERIFY2(!r.bytes.contains("\x1b["), qPrintable(args.join(QLatin1Char(' '))));
        }
    }

    // A write that fails half-way (the file size limit) ends with its one error line, and no
    // trace of the progress line that was showing.
    void failedWriteLeavesOnlyTheError()
    {
        const QString out = dir_.filePath(QStringLiteral("limited.pt"));
        const QStringList args{QStringLiteral("convert"), fixture(QStringLiteral("big40k.pt")), QStringLiteral("-o"),
                               out};
        const TtyRun r = runOnTerminal(args, {kNow, 256 * 1024, {}});
        QCOMPARE(r.rc, 1);
        QVERIFY2(!framesOf(r.bytes, "convert: ").isEmpty(), r.bytes.constData());
        const QStringList screen = screenOf(r.bytes);
        QVERIFY2(screen.back().startsWith(QStringLiteral("ckptscope: ")), qPrintable(screen.join(QLatin1Char('\n'))));
        for (const auto& line : screen) {
            QVERIFY2(!line.contains(QStringLiteral("B/s")) && !line.contains(QStringLiteral("%)")), qPrintable(line));
        }
        QVERIFY(!QFile::exists(out));
        QCOMPARE(QDir(dir_.path()).entryList(QDir::Files | QDir::Hidden).filter(QStringLiteral("limited")).size(), 0);
    }

    // Ctrl-C while a write shows its line (a file over HTTP at 200 KiB/s, so the write is still
    // going): the line is erased, the temporary output removed, and the exit is 130, as before.
    void interruptErasesTheLine()
    {
        QTemporaryDir files;
        QVERIFY(files.isValid());
        QProcess make;
        make.start(QStringLiteral(CKPTSCOPE_PYTHON),
                   {QStringLiteral("-c"),
                    QStringLiteral("import sys, torch; torch.save({'w': torch.zeros(1 << 20)}, "
                                   "sys.argv[1])"),
                    files.filePath(QStringLiteral("slow.pt"))});
        QVERIFY(make.waitForFinished(120000) && make.exitCode() == 0);
        ckpt::test::LoopbackServer server;
        QVERIFY(server.start(ckpt::test::scriptPath("hostile_server.py"), {files.filePath(QStringLiteral("slow.pt"))}));
        const QString out = dir_.filePath(QStringLiteral("interrupted.pt"));
        bool sent = false;
        QElapsedTimer shown;
        const TtyRun r = runOnTerminal(
            {QStringLiteral("convert"), server.url(QStringLiteral("/trickle/slow.pt")), QStringLiteral("-o"), out},
            {kNow, RLIM_INFINITY, [&](pid_t pid, const QByteArray& bytes) {
                 // Once the write's line has been up a moment (its temporary file exists by then).
                 if (!sent && bytes.contains("\rconvert: ")) {
                     if (!shown.isValid()) {
                         shown.start();
                     } else if (shown.elapsed() > 300) {
                         ::kill(pid, SIGINT);
                         sent = true;
                     }
                 }
             }});
        QVERIFY2(sent, r.bytes.constData());
        QCOMPARE(r.rc, 130);
        QVERIFY2(r.bytes.endsWith("\r\x1b[K"), r.bytes.right(200).constData());
        const QStringList screen = screenOf(r.bytes);
        for (const auto& line : screen) {
            QVERIFY2(!line.startsWith(QStringLiteral("convert: ")) && !line.startsWith(QStringLiteral("remote: ")),
                     qPrintable(line));
        }
        QVERIFY2(screen.back().startsWith(QStringLiteral("convert ")) ||
                     screen.back().contains(QStringLiteral("dropped")),
                 qPrintable(screen.join(QLatin1Char('\n'))));
        QCOMPARE(QDir(dir_.path()).entryList(QDir::Files | QDir::Hidden).filter(QStringLiteral("interrupted")).size(),
                 0);
    }

private:
    QTemporaryDir dir_;
};

QTEST_GUILESS_MAIN(TestProgressTty)
#include "tst_progress_tty.moc"
