// The test-load client against a scripted helper (tests/device/fake_helper.sh) and a fake NVML:
// event streaming, error mapping, a crashing, silent, flooding or babbling helper, cancel, a
// missing helper, and the "did any other GPU move" bookkeeping, all without LibTorch or a GPU.
#include "device/load_selection.h"
#include "device/testload.h"
#include "python_file.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

using namespace ckpt::device;
using ckpt::ErrorCode;

namespace {

const std::string kFakeHelper = CKPTSCOPE_SOURCE_DIR "/tests/device/fake_helper.sh";

TestloadRequest fakeRequest(const std::string& device = "cpu")
{
    TestloadRequest r;
    r.path = "/some/model.pt";
    r.device = device;
    r.helperPath = kFakeHelper;
    r.interval = std::chrono::milliseconds(10);
    return r;
}

std::string readFile(const std::string& path)
{
    std::ifstream f(path);
    return {std::istreambuf_iterator<char>(f), {}};
}

const std::string kFakeSha = "5d41402abc4b2a76b9719d911017c592aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

// A testLoad that cannot hang the suite: where the client under test would wait forever, a
// watchdog cancels it after `limitSeconds` (and the test sees Cancelled instead of its error).
struct Watched {
    ckpt::Expected<TestloadReport> result;
    qint64 ms = 0;
};
Watched testLoadWatched(const TestloadRequest& req, int limitSeconds = 20)
{
    std::stop_source stop;
    std::jthread watchdog([&stop, limitSeconds](const std::stop_token& done) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(limitSeconds);
        while (!done.stop_requested() && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        stop.request_stop();
    });
    QElapsedTimer timer;
    timer.start();
    auto r = testLoad(req, {}, stop.get_token());
    return {std::move(r), timer.elapsed()};
}

// Ids from FAKE_HELPER_PIDS.
std::vector<pid_t> pidsIn(const std::string& path)
{
    std::istringstream in(readFile(path));
    std::vector<pid_t> pids;
    for (pid_t p = 0; in >> p;) {
        pids.push_back(p);
    }
    return pids;
}

// SIGKILL takes a moment to land; a zombie waiting for init to reap it counts as gone.
bool processGone(pid_t pid)
{
    for (int i = 0; i < 300; ++i) {
        if (::kill(pid, 0) != 0 && errno == ESRCH) {
            return true;
        }
        const std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
        if (const auto paren = stat.rfind(')');
            paren != std::string::npos && stat.size() > paren + 2 && stat[paren + 2] == 'Z') {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

std::uint64_t statusKiB(const char* field)
{
    std::istringstream in(readFile("/proc/self/status"));
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(field, 0) == 0) {
            return std::stoull(line.substr(std::strlen(field)));
        }
    }
    return 0;
}

// The peak resident memory reached from now on is read with peakGrowthKiB(): VmHWM is reset when
// the kernel allows (clear_refs 5), and measured against the resident size now either way.
std::uint64_t startPeakWatch()
{
    std::ofstream("/proc/self/clear_refs") << "5";
    return statusKiB("VmRSS:");
}
std::uint64_t peakGrowthKiB(std::uint64_t rssAtStart)
{
    const std::uint64_t hwm = statusKiB("VmHWM:");
    return hwm > rssAtStart ? hwm - rssAtStart : 0;
}

}  // namespace

class TestTestloadClient : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void init() { qputenv("CKPTSCOPE_NVML_LIBRARY", QByteArray("/nonexistent/libnvidia-ml.so.1")); }
    void cleanup()
    {
        qunsetenv("FAKE_HELPER_MODE");
        qunsetenv("FAKE_HELPER_REQUEST");
        qunsetenv("FAKE_HELPER_PIDS");
        qunsetenv("FAKE_HELPER_SHA");
        qunsetenv("CKPTSCOPE_HELPER_TIMEOUT");
        qunsetenv("CKPTSCOPE_TORCH_HELPER");
        qunsetenv("CKPTSCOPE_NVML_LIBRARY");
    }

    // A meta tensor (saved from the meta device) has nothing to load: both engines skip it with
    // that reason, which the command line and the window show (issue 40: "0 tensors, 0 B" and no why).
    void metaTensorsAreSkippedWithTheirReason()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("meta.pt"));
        const QString wrote =
            ckpt::test::writeWithPython(QStringLiteral("import sys, torch\n"
                                                       "torch.save({'w': torch.empty(4, 4, device='meta'), "
                                                       "'b': torch.ones(2)}, sys.argv[1])\n"),
                                        file);
        QVERIFY2(wrote.isEmpty(), qPrintable(wrote));
        auto ck = ckpt::openCheckpoint(file.toStdString());
        QVERIFY(ck);
        auto sel = ckpt::device::selectForLoad(**ck, "");
        QVERIFY(sel);
        QCOMPARE(sel->tensorCount, std::uint64_t{1});
        QCOMPARE(sel->skipped.size(), std::size_t{1});
        QCOMPARE(QString::fromStdString(sel->skipped[0].path), QStringLiteral("w"));
        QVERIFY2(sel->skipped[0].reason.find("a meta tensor: the file holds no data") != std::string::npos,
                 sel->skipped[0].reason.c_str());
    }

    void streamsProgressAndResult()
    {
        QTemporaryDir dir;
        const std::string reqFile = dir.filePath(QStringLiteral("req")).toStdString();
        qputenv("FAKE_HELPER_MODE", QByteArray("ok"));
        qputenv("FAKE_HELPER_REQUEST", QByteArray(reqFile.c_str()));
        qputenv("FAKE_HELPER_SHA", QByteArray(kFakeSha.c_str()));
        auto req = fakeRequest();
        req.select = "model";
        req.verify = true;
        std::vector<std::string> asked;
        req.fileStorageSha256 = [&asked](const std::string& key) -> ckpt::Expected<std::string> {
            asked.push_back(key);
            return kFakeSha;
        };
        std::vector<TestloadProgress> seen;
        auto r = testLoad(req, [&seen](const TestloadProgress& p) { seen.push_back(p); });
        QVERIFY2(r, r ? "" : r.error().message.c_str());
        QCOMPARE(seen.size(), std::size_t{2});
        QCOMPARE(seen[1].bytes, std::uint64_t{100});
        QCOMPARE(seen[1].totalTensors, std::uint64_t{2});
        QVERIFY(seen[1].bytesPerSecond > 0);
        QCOMPARE(r->tensorsLoaded, std::uint64_t{2});
        QCOMPARE(r->bytes, std::uint64_t{100});
        QCOMPARE(r->peakBytes, std::uint64_t{100});
        QCOMPARE(QString::fromStdString(r->peakSource), QStringLiteral("rss-anon"));
        QCOMPARE(QString::fromStdString(r->torchVersion), QStringLiteral("fake"));
        QCOMPARE(r->skipped.size(), std::size_t{1});
        QCOMPARE(QString::fromStdString(r->skipped[0].path), QStringLiteral("m"));
        QCOMPARE(r->storageChecks.size(), std::size_t{1});
        QVERIFY(r->storageChecks[0].matchesFile);
        QCOMPARE(r->storageChecks[0].bytes, std::uint64_t{100});
        QCOMPARE(asked, std::vector<std::string>{"0"});
        QCOMPARE(r->checks.size(), std::size_t{2});
        QCOMPARE(r->checks[0].sha256, kFakeSha);
        QVERIFY(r->checks[1].sha256.empty());
        QCOMPARE(QString::fromStdString(r->checks[1].note), QStringLiteral("expanded view"));
        QVERIFY(!r->otherDevicesTouched);
        QCOMPARE(r->timeline.devices.size(), std::size_t{1});  // no NVML: the CPU column only
        QVERIFY(!r->timeline.samples.empty());
        const QString sent = QString::fromStdString(readFile(reqFile));
        QVERIFY2(sent.contains(QStringLiteral("\"cmd\":\"testload\"")), qPrintable(sent));
        QVERIFY2(sent.contains(QStringLiteral("\"select\":\"model\"")), qPrintable(sent));
        QVERIFY2(sent.contains(QStringLiteral("\"verify\":true")), qPrintable(sent));
        QVERIFY2(sent.contains(QStringLiteral("\"path\":\"/some/model.pt\"")), qPrintable(sent));
    }

    void storageThatDiffersFromTheFileFails()
    {
        qputenv("FAKE_HELPER_MODE", QByteArray("ok"));
        qputenv("FAKE_HELPER_SHA", QByteArray(kFakeSha.c_str()));
        auto req = fakeRequest();
        req.verify = true;
        req.fileStorageSha256 = [](const std::string&) -> ckpt::Expected<std::string> { return std::string(64, '0'); };
        auto r = testLoad(req);
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::LoadFailed);
        const QString msg = QString::fromStdString(r.error().message);
        QVERIFY2(msg.contains(QStringLiteral("storage 0 differs from the file")), qPrintable(msg));
    }

    // A helper that stops talking is killed after the silence timeout, with the child it started,
    // and the error names it; the request's timeout wins over CKPTSCOPE_HELPER_TIMEOUT.
    void silentHelperIsKilled()
    {
        QTemporaryDir dir;
        const std::string pidFile = dir.filePath(QStringLiteral("pids")).toStdString();
        qputenv("FAKE_HELPER_MODE", QByteArray("hang_with_child"));
        qputenv("FAKE_HELPER_PIDS", QByteArray(pidFile.c_str()));
        qputenv("CKPTSCOPE_HELPER_TIMEOUT", QByteArray("600"));
        auto req = fakeRequest();
        req.silenceTimeout = std::chrono::seconds(2);
        const auto w = testLoadWatched(req);
        QVERIFY(!w.result);
        QCOMPARE(w.result.error().code, ErrorCode::LoadFailed);
        const QString msg = QString::fromStdString(w.result.error().message);
        QVERIFY2(msg.contains(QStringLiteral("said nothing for 2 s; killed it")), qPrintable(msg));
        QVERIFY2(msg.contains(QString::fromStdString(kFakeHelper)), qPrintable(msg));
        QCOMPARE(QString::fromStdString(w.result.error().path), QStringLiteral("/some/model.pt"));
        QVERIFY2(w.ms >= 1900 && w.ms < 6000, qPrintable(QString::number(w.ms)));
        const auto pids = pidsIn(pidFile);
        QCOMPARE(pids.size(), std::size_t{2});
        for (const pid_t pid : pids) {
            QVERIFY2(processGone(pid), qPrintable(QString::number(pid)));
        }
    }

    void silenceTimeoutFromTheEnvironment()
    {
        qputenv("FAKE_HELPER_MODE", QByteArray("hang"));
        qputenv("CKPTSCOPE_HELPER_TIMEOUT", QByteArray("0.5"));
        const auto w = testLoadWatched(fakeRequest());
        QVERIFY(!w.result);
        const QString msg = QString::fromStdString(w.result.error().message);
        QVERIFY2(msg.contains(QStringLiteral("said nothing for 0.5 s")), qPrintable(msg));
        QVERIFY2(w.ms < 4000, qPrintable(QString::number(w.ms)));

        for (const char* bad : {"soon", "0", "-3", "1e99"}) {
            qputenv("CKPTSCOPE_HELPER_TIMEOUT", QByteArray(bad));
            const auto r = testLoadWatched(fakeRequest()).result;
            QVERIFY2(!r, bad);
            QCOMPARE(r.error().code, ErrorCode::Usage);
            QVERIFY2(QString::fromStdString(r.error().message).contains(QStringLiteral("CKPTSCOPE_HELPER_TIMEOUT")),
                     r.error().message.c_str());
        }
    }

    // However much a helper writes, this process's memory stays put: it is killed at a cap, and
    // the error says which.
    void floodingHelperIsKilled_data()
    {
        QTest::addColumn<QString>("mode");
        QTest::addColumn<QString>("fragment");
        QTest::newRow("one endless line")
            << QStringLiteral("flood_line") << QStringLiteral("wrote a line longer than 1.0 MiB to stdout; killed it");
        QTest::newRow("endless events") << QStringLiteral("flood_lines")
                                        << QStringLiteral("wrote more than 64.0 MiB to stdout; killed it");
        QTest::newRow("endless stderr") << QStringLiteral("flood_stderr")
                                        << QStringLiteral("wrote more than 64.0 MiB to stderr; killed it");
    }
    void floodingHelperIsKilled()
    {
        QFETCH(QString, mode);
        QFETCH(QString, fragment);
        QTemporaryDir dir;
        const std::string pidFile = dir.filePath(QStringLiteral("pids")).toStdString();
        qputenv("FAKE_HELPER_MODE", QByteArray(mode.toStdString().c_str()));
        qputenv("FAKE_HELPER_PIDS", QByteArray(pidFile.c_str()));
        const std::uint64_t rss = startPeakWatch();
        const auto w = testLoadWatched(fakeRequest(), 60);
        const std::uint64_t growth = peakGrowthKiB(rss);
        qInfo("%s: %lld ms, peak RSS growth %llu KiB", qPrintable(mode), static_cast<long long>(w.ms),
              static_cast<unsigned long long>(growth));
        QVERIFY(!w.result);
        QCOMPARE(w.result.error().code, ErrorCode::LoadFailed);
        const QString msg = QString::fromStdString(w.result.error().message);
        QVERIFY2(msg.contains(fragment), qPrintable(msg));
        QVERIFY2(growth < 200U * 1024, qPrintable(QString::number(growth)));
        for (const pid_t pid : pidsIn(pidFile)) {
            QVERIFY2(processGone(pid), qPrintable(QString::number(pid)));
        }
    }

    // Output that is not the protocol is an error that quotes it printably, never a crash.
    void garbageIsAnError_data()
    {
        QTest::addColumn<QString>("mode");
        QTest::addColumn<QStringList>("fragments");
        QTest::newRow("not JSON") << QStringLiteral("garbage")
                                  << QStringList{QStringLiteral("wrote something that is not its protocol to stdout: "
                                                                "'this is not the helper you are looking for'; "
                                                                "killed it")};
        QTest::newRow("wrong types") << QStringLiteral("bad_types")
                                     << QStringList{QStringLiteral("sent a malformed event"),
                                                    QStringLiteral("\"total_bytes\" is not a count")};
    }
    void garbageIsAnError()
    {
        QFETCH(QString, mode);
        QFETCH(QStringList, fragments);
        qputenv("FAKE_HELPER_MODE", QByteArray(mode.toStdString().c_str()));
        const auto w = testLoadWatched(fakeRequest());
        QVERIFY(!w.result);
        QCOMPARE(w.result.error().code, ErrorCode::LoadFailed);
        const std::string& raw = w.result.error().message;
        const QString msg = QString::fromStdString(raw);
        for (const auto& f : fragments) {
            QVERIFY2(msg.contains(f), qPrintable(msg));
        }
        QVERIFY2(std::none_of(raw.begin(), raw.end(), [](char c) { return c < 0x20 || c == 0x7f; }), qPrintable(msg));
    }

    // A helper that says anything but its protocol and stays is killed at once, with the child it
    // started, not waited on for the silence timeout (20 s here): text, JSON that is no event, an
    // escape sequence (quoted printably).
    void helperOffProtocolIsKilledAtOnce_data()
    {
        QTest::addColumn<QByteArray>("line");
        QTest::addColumn<QString>("quoted");
        QTest::newRow("text") << QByteArray("Segmentation fault? no: a banner") << QStringLiteral("a banner'");
        QTest::newRow("JSON, no event") << QByteArray("{\"progress\":1}") << QStringLiteral("'{\"progress\":1}'");
        QTest::newRow("escape sequence") << QByteArray("\033[2Jcleared") << QStringLiteral("'\\x1b[2Jcleared'");
    }
    void helperOffProtocolIsKilledAtOnce()
    {
        QFETCH(QByteArray, line);
        QFETCH(QString, quoted);
        QTemporaryDir dir;
        const std::string pidFile = dir.filePath(QStringLiteral("pids")).toStdString();
        qputenv("FAKE_HELPER_MODE", QByteArray("garbage_then_hang"));
        qputenv("FAKE_HELPER_PIDS", QByteArray(pidFile.c_str()));
        qputenv("GARBAGE_LINE", line);
        qputenv("CKPTSCOPE_HELPER_TIMEOUT", QByteArray("20"));
        const auto w = testLoadWatched(fakeRequest(), 30);
        qunsetenv("GARBAGE_LINE");
        QVERIFY(!w.result);
        QCOMPARE(w.result.error().code, ErrorCode::LoadFailed);
        const QString msg = QString::fromStdString(w.result.error().message);
        QVERIFY2(msg.contains(QStringLiteral("wrote something that is not its protocol to stdout: '")),
                 qPrintable(msg));
        QVERIFY2(msg.contains(quoted + QStringLiteral("; killed it")), qPrintable(msg));
        QVERIFY2(w.ms < 5000, qPrintable(QString::number(w.ms)));
        const auto pids = pidsIn(pidFile);
        QCOMPARE(pids.size(), std::size_t{2});
        for (const pid_t pid : pids) {
            QVERIFY2(processGone(pid), qPrintable(QString::number(pid)));
        }
    }

    // A helper that exits 3 without a result, while a child it left holds its pipes open: the
    // error names the status and its stderr's last line (escape sequences defused) at once, and
    // the child is gone.
    void helperExitingWithoutResultIsNamedAtOnce()
    {
        QTemporaryDir dir;
        const std::string pidFile = dir.filePath(QStringLiteral("pids")).toStdString();
        qputenv("FAKE_HELPER_MODE", QByteArray("exit3"));
        qputenv("FAKE_HELPER_PIDS", QByteArray(pidFile.c_str()));
        const auto w = testLoadWatched(fakeRequest());
        QVERIFY(!w.result);
        QCOMPARE(w.result.error().code, ErrorCode::LoadFailed);
        const QString msg = QString::fromStdString(w.result.error().message);
        QVERIFY2(
            msg.contains(QStringLiteral("exited with status 3 without a result: fatal: \\x1b[2Jstorage 0 vanished")),
            qPrintable(msg));
        QVERIFY2(w.ms < 5000, qPrintable(QString::number(w.ms)));
        const auto pids = pidsIn(pidFile);
        QCOMPARE(pids.size(), std::size_t{1});
        QVERIFY2(processGone(pids[0]), qPrintable(QString::number(pids[0])));
    }

    void helperErrorsKeepTheirCode()
    {
        qputenv("FAKE_HELPER_MODE", QByteArray("oom"));
        auto r = testLoad(fakeRequest("cuda:0"));
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::OutOfMemory);
        QVERIFY(QString::fromStdString(r.error().message).contains(QStringLiteral("1.0 GiB free")));
        QCOMPARE(QString::fromStdString(r.error().path), QStringLiteral("/some/model.pt"));
    }

    void crashingHelperIsNamed_data()
    {
        QTest::addColumn<QString>("mode");
        QTest::addColumn<QString>("fragment");
        QTest::newRow("abort") << QStringLiteral("crash") << QStringLiteral("killed by signal");
        QTest::newRow("silent exit") << QStringLiteral("silent") << QStringLiteral("exited with status 3");
        // Whether the request is written before or after it dies, we must not die of SIGPIPE.
        QTest::newRow("dies before reading") << QStringLiteral("noread") << QStringLiteral("exited with status 4");
    }
    void crashingHelperIsNamed()
    {
        QFETCH(QString, mode);
        QFETCH(QString, fragment);
        qputenv("FAKE_HELPER_MODE", QByteArray(mode.toStdString().c_str()));
        auto r = testLoad(fakeRequest());
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::LoadFailed);
        const QString msg = QString::fromStdString(r.error().message);
        QVERIFY2(msg.contains(fragment), qPrintable(msg));
        if (mode == QStringLiteral("crash")) {
            QVERIFY2(msg.contains(QStringLiteral("c10::Error")), qPrintable(msg));  // its last stderr line
        }
    }

    void cancelKillsTheHelper()
    {
        qputenv("FAKE_HELPER_MODE", QByteArray("hang"));
        std::stop_source stop;
        std::jthread canceller([&stop] {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            stop.request_stop();
        });
        QElapsedTimer timer;
        timer.start();
        auto r = testLoad(fakeRequest(), {}, stop.get_token());
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::Cancelled);
        QVERIFY2(timer.elapsed() < 5000, qPrintable(QString::number(timer.elapsed())));
    }

    void missingHelperSaysWhereItLooked()
    {
        qputenv("CKPTSCOPE_TORCH_HELPER", QByteArray("/nonexistent/ckptscope-torch-helper"));
        auto found = findTorchHelper();
        QVERIFY(!found);
        QVERIFY(QString::fromStdString(found.error().message).contains(QStringLiteral("CKPTSCOPE_TORCH_HELPER")));
        TestloadRequest req = fakeRequest();
        req.helperPath.clear();
        auto r = testLoad(req);
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::LoadFailed);
        QVERIFY(
            QString::fromStdString(r.error().message).contains(QStringLiteral("/nonexistent/ckptscope-torch-helper")));

        // Without the variable, from this test binary's folder nothing is installed: the message
        // lists the places and how to build the helper.
        qunsetenv("CKPTSCOPE_TORCH_HELPER");
        auto notThere = findTorchHelper();
        if (notThere) {
            // The build tree's helper sits at <build>/app/torch-helper, which the lookup finds too.
            QVERIFY2(notThere->ends_with("/app/torch-helper/ckptscope-torch-helper"), notThere->c_str());
            return;
        }
        const QString msg = QString::fromStdString(notThere.error().message);
        QVERIFY2(msg.contains(QStringLiteral("libexec/ckptscope/ckptscope-torch-helper")), qPrintable(msg));
        QVERIFY2(msg.contains(QStringLiteral("-DCKPTSCOPE_WITH_TORCH=ON")), qPrintable(msg));
    }

    // An engine that reports a device error and then cannot be reaped (a process blocked in the GPU
    // driver after an Xid dies only when the driver lets it; stuck_helper.c makes one): the client
    // returns the engine's error within seconds and says it left the engine behind, instead of
    // waiting in waitpid for ever.
    void helperStuckAfterADeviceErrorIsLeftBehind()
    {
        QTemporaryDir dir;
        const std::string tracerFile = dir.filePath(QStringLiteral("tracer")).toStdString();
        qputenv("STUCK_HELPER_TRACER", QByteArray(tracerFile.c_str()));
        auto req = fakeRequest("cuda:0");
        req.engine = Engine::Cuda;
        req.helperPath = STUCK_HELPER_PATH;
        req.silenceTimeout = std::chrono::milliseconds(20000);
        auto done = std::make_shared<std::promise<ckpt::Expected<TestloadReport>>>();
        auto result = done->get_future();
        QElapsedTimer timer;
        timer.start();
        std::thread([req, done] { done->set_value(testLoad(req)); }).detach();
        const bool returned = result.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
        const qint64 ms = timer.elapsed();
        // The tracer goes in every case; then the engine can be reaped (and a client stuck on it returns).
        const auto tracer = pidsIn(tracerFile);
        for (const pid_t p : tracer) {
            if (p > 0) {
                ::kill(p, SIGKILL);
            }
        }
        qunsetenv("STUCK_HELPER_TRACER");
        if (!tracer.empty() && tracer.front() < 0) {
            QSKIP("this kernel does not let a process trace its parent: cannot make a helper that outlives SIGKILL");
        }
        QVERIFY2(returned, "the client waited for ever on an engine it could not reap");
        auto r = result.get();
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::LoadFailed);
        const QString msg = QString::fromStdString(r.error().message);
        QVERIFY2(msg.contains(QStringLiteral("CUDA error 999")), qPrintable(msg));
        QVERIFY2(msg.contains(QStringLiteral("did not exit after SIGKILL")), qPrintable(msg));
        QVERIFY2(ms < 15000, qPrintable(QString::number(ms)));
    }

    void badDeviceIsUsage()
    {
        auto r = testLoad(fakeRequest("gpu0"));
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::Usage);
        QCOMPARE(parseDevice("cuda").value_or(""), std::string("cuda:0"));
        QCOMPARE(parseDevice("cuda:07").value_or(""), std::string("cuda:7"));
        QVERIFY(!parseDevice("cuda:"));
        QVERIFY(!parseDevice("cuda:-1"));
        QVERIFY(!parseDevice("mps"));
        QVERIFY(!parseDevice("cpu:0"));
        QCOMPARE(parseDevice("cuda:12345").value_or(""), std::string("cuda:12345"));
    }

    // A load onto cuda:1 while cuda:0's memory rises (each DDP rank's torch.load landing on GPU 0)
    // must be reported; a rise on the chosen GPU alone must not, and becomes the NVML peak. No CUDA
    // driver here: the columns are NVML's (nvml:I), and the helper's UUID finds the chosen one.
    void otherDevicesTouched_data()
    {
        QTest::addColumn<QString>("mode");
        QTest::addColumn<bool>("touched");
        QTest::newRow("cuda:0 moved") << QStringLiteral("touch_other") << true;
        QTest::newRow("only cuda:1 moved") << QStringLiteral("touch_chosen") << false;
    }
    void otherDevicesTouched()
    {
        QFETCH(QString, mode);
        QFETCH(bool, touched);
        QTemporaryDir dir;
        const std::string state = dir.filePath(QStringLiteral("state")).toStdString();
        std::ofstream(state) << "100000000 100000000 0 0 0\n";
        qputenv("FAKE_NVML_STATE", QByteArray(state.c_str()));
        qputenv("CKPTSCOPE_NVML_LIBRARY", QByteArray(FAKE_NVML_PATH));
        qputenv("FAKE_HELPER_MODE", QByteArray(mode.toStdString().c_str()));
        qputenv("CKPTSCOPE_CUDA_LIBRARY", QByteArray("/nonexistent/libcuda.so.1"));
        auto r = testLoad(fakeRequest("cuda:1"));
        QVERIFY2(r, r ? "" : r.error().message.c_str());
        QCOMPARE(r->timeline.devices.size(), std::size_t{3});
        QVERIFY(r->timeline.samples.size() >= 10);
        QCOMPARE(r->otherDevicesTouched, touched);
        if (touched) {
            QCOMPARE(r->otherDevices.size(), std::size_t{1});
            QCOMPARE(QString::fromStdString(r->otherDevices[0].device), QStringLiteral("nvml:0"));
            QCOMPARE(r->otherDevices[0].riseBytes, std::uint64_t{1400000000});
            QCOMPARE(r->otherDevices[0].by, std::string("this load"));
        } else {
            QVERIFY(r->otherDevices.empty());
            QCOMPARE(QString::fromStdString(r->peakSource), QStringLiteral("nvml-device"));
            QCOMPARE(r->peakBytes, std::uint64_t{800000000});
        }
    }

    void torchLoadPlacementMatchesTorchsComplaints()
    {
        const std::vector<std::pair<std::string, std::uint64_t>> locs = {{"cpu", 10}, {"cuda:0", 20}, {"cuda:3", 30}};
        const auto none = torchLoadPlacement(locs, 0);
        QVERIFY(none.wouldFail);
        QVERIFY(!none.rows[0].fails);
        QVERIFY(none.rows[1].fails);
        QVERIFY(QString::fromStdString(none.rows[1].reason).contains(QStringLiteral("is_available() is False")));
        const auto two = torchLoadPlacement(locs, 2);
        QVERIFY(!two.rows[1].fails);
        QVERIFY(two.rows[2].fails);
        QCOMPARE(QString::fromStdString(two.rows[2].reason),
                 QStringLiteral("Attempting to deserialize object on CUDA device 3 but torch.cuda.device_count() is "
                                "2. Please use torch.load with map_location to map your storages to an existing "
                                "device."));
        QVERIFY(!torchLoadPlacement(locs, 4).wouldFail);
        // An index of five digits is that device, not cuda:0.
        const auto far = torchLoadPlacement({{"cuda:12345", 40}}, 2);
        QVERIFY(far.rows[0].fails);
        QVERIFY2(far.rows[0].reason.find("CUDA device 12345 ") != std::string::npos, far.rows[0].reason.c_str());
        QCOMPARE(two.rows[2].bytes, std::uint64_t{30});
    }
};

QTEST_GUILESS_MAIN(TestTestloadClient)
#include "tst_testload_client.moc"
