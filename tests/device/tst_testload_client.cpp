// The test-load client against a scripted helper (tests/device/fake_helper.sh) and a fake NVML:
// event streaming, error mapping, a crashing or silent helper, cancel, a missing helper, and the
// "did any other GPU move" bookkeeping, all without LibTorch or a GPU.
#include "device/testload.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cstdlib>
#include <fstream>
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

}  // namespace

class TestTestloadClient : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void init() { ::setenv("CKPTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1); }
    void cleanup()
    {
        ::unsetenv("FAKE_HELPER_MODE");
        ::unsetenv("FAKE_HELPER_REQUEST");
        ::unsetenv("CKPTSCOPE_TORCH_HELPER");
        ::unsetenv("CKPTSCOPE_NVML_LIBRARY");
    }

    void streamsProgressAndResult()
    {
        QTemporaryDir dir;
        const std::string reqFile = dir.filePath(QStringLiteral("req")).toStdString();
        ::setenv("FAKE_HELPER_MODE", "ok", 1);
        ::setenv("FAKE_HELPER_REQUEST", reqFile.c_str(), 1);
        auto req = fakeRequest();
        req.select = "model";
        req.verify = true;
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
        QVERIFY(!r->otherDevicesTouched);
        QCOMPARE(r->timeline.devices.size(), std::size_t{1});  // no NVML: the CPU column only
        QVERIFY(!r->timeline.samples.empty());
        const QString sent = QString::fromStdString(readFile(reqFile));
        QVERIFY2(sent.contains(QStringLiteral("\"cmd\":\"testload\"")), qPrintable(sent));
        QVERIFY2(sent.contains(QStringLiteral("\"select\":\"model\"")), qPrintable(sent));
        QVERIFY2(sent.contains(QStringLiteral("\"verify\":true")), qPrintable(sent));
        QVERIFY2(sent.contains(QStringLiteral("\"path\":\"/some/model.pt\"")), qPrintable(sent));
    }

    void helperErrorsKeepTheirCode()
    {
        ::setenv("FAKE_HELPER_MODE", "oom", 1);
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
        ::setenv("FAKE_HELPER_MODE", mode.toStdString().c_str(), 1);
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
        ::setenv("FAKE_HELPER_MODE", "hang", 1);
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
        ::setenv("CKPTSCOPE_TORCH_HELPER", "/nonexistent/ckptscope-torch-helper", 1);
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
        ::unsetenv("CKPTSCOPE_TORCH_HELPER");
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
    }

    // A load onto cuda:1 while cuda:0's memory rises (each DDP rank's torch.load landing on GPU 0)
    // must be reported; a rise on the chosen GPU alone must not, and becomes the NVML peak.
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
        ::setenv("FAKE_NVML_STATE", state.c_str(), 1);
        ::setenv("CKPTSCOPE_NVML_LIBRARY", FAKE_NVML_PATH, 1);
        ::setenv("FAKE_HELPER_MODE", mode.toStdString().c_str(), 1);
        auto r = testLoad(fakeRequest("cuda:1"));
        QVERIFY2(r, r ? "" : r.error().message.c_str());
        QCOMPARE(r->timeline.devices.size(), std::size_t{3});
        QVERIFY(r->timeline.samples.size() >= 10);
        QCOMPARE(r->otherDevicesTouched, touched);
        if (touched) {
            QCOMPARE(r->otherDevices.size(), std::size_t{1});
            QCOMPARE(QString::fromStdString(r->otherDevices[0].device), QStringLiteral("cuda:0"));
            QCOMPARE(r->otherDevices[0].riseBytes, std::uint64_t{1400000000});
        } else {
            QVERIFY(r->otherDevices.empty());
            QCOMPARE(QString::fromStdString(r->peakSource), QStringLiteral("nvml"));
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
        QCOMPARE(
            QString::fromStdString(two.rows[2].reason),
            QStringLiteral("Attempting to deserialize object on CUDA device 3 but torch.cuda.device_count() is 2"));
        QVERIFY(!torchLoadPlacement(locs, 4).wouldFail);
        QCOMPARE(two.rows[2].bytes, std::uint64_t{30});
    }
};

QTEST_GUILESS_MAIN(TestTestloadClient)
#include "tst_testload_client.moc"
