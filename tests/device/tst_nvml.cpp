// The NVML loader and the sampler: the no-driver path (missing library, a library without NVML's
// symbols) must give one line and still list the CPU; a fake NVML with two GPUs drives the
// inventory and the sampler's timing.
#include "device/nvml.h"
#include "device/sampler.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cstdlib>
#include <fstream>

using namespace ckpt::device;

namespace {

void setEnv(const char* name, const std::string& value)
{
    qputenv(name, QByteArray(value.c_str()));
}

void writeState(const std::string& file, const std::string& text)
{
    std::ofstream(file) << text << '\n';
}

}  // namespace

class TestNvml : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void cleanup() { qunsetenv("CKPTSCOPE_NVML_LIBRARY"); }

    void missingLibraryGivesOneLineAndTheCpu_data()
    {
        QTest::addColumn<QString>("library");
        QTest::addColumn<QString>("fragment");
        QTest::newRow("bogus path") << QStringLiteral("/nonexistent/libnvidia-ml.so.1")
                                    << QStringLiteral("NVML not available");
        // A real shared library that is not NVML: loads, then lacks the entry points.
        QTest::newRow("not nvml") << QStringLiteral("libz.so.1") << QStringLiteral("has no symbol nvmlInit_v2");
    }
    void missingLibraryGivesOneLineAndTheCpu()
    {
        QFETCH(QString, library);
        QFETCH(QString, fragment);
        setEnv("CKPTSCOPE_NVML_LIBRARY", library.toStdString());
        auto nvml = Nvml::load();
        QVERIFY(!nvml);
        QCOMPARE(nvml.error().code, ckpt::ErrorCode::DeviceUnavailable);
        const QString msg = QString::fromStdString(nvml.error().message);
        QVERIFY2(msg.contains(fragment), qPrintable(msg));
        QVERIFY2(!msg.contains(QLatin1Char('\n')), qPrintable(msg));

        const Inventory inv = queryInventory();
        QCOMPARE(inv.devices.size(), std::size_t{1});
        QCOMPARE(inv.gpuCount(), 0);
        QCOMPARE(QString::fromStdString(inv.devices[0].id), QStringLiteral("cpu"));
        QVERIFY(inv.devices[0].totalBytes > 0);
        QVERIFY(inv.devices[0].usedBytes > 0 && inv.devices[0].usedBytes <= inv.devices[0].totalBytes);
        QCOMPARE(QString::fromStdString(inv.gpuNote), msg);
    }

    // This machine has no NVIDIA driver: the default library name must take the same path.
    void defaultLibraryHereIsAbsent()
    {
        if (std::ifstream("/proc/driver/nvidia/version")) {
            QSKIP("an NVIDIA driver is present on this machine");
        }
        const Inventory inv = queryInventory();
        QCOMPARE(inv.gpuCount(), 0);
        QVERIFY2(QString::fromStdString(inv.gpuNote).contains(QStringLiteral("libnvidia-ml.so.1")),
                 inv.gpuNote.c_str());
    }

    void fakeNvmlListsTwoGpus()
    {
        QTemporaryDir dir;
        const std::string state = dir.filePath(QStringLiteral("state")).toStdString();
        writeState(state, "1000 2000 4242 1 512");
        setEnv("FAKE_NVML_STATE", state);
        setEnv("CKPTSCOPE_NVML_LIBRARY", FAKE_NVML_PATH);
        // NVML alone, no CUDA driver: the GPUs are watched, but nothing here knows CUDA's numbering,
        // so they are NVML's (nvml:I, no ordinal) rather than a guessed cuda:N.
        setEnv("CKPTSCOPE_CUDA_LIBRARY", "/nonexistent/libcuda.so.1");
        auto nvml = Nvml::load();
        QVERIFY2(nvml, nvml ? "" : nvml.error().message.c_str());
        const Inventory inv = queryInventory(*nvml);
        QVERIFY(inv.gpuNote.empty());
        QVERIFY2(inv.cudaNote.starts_with("no NVIDIA driver found"), inv.cudaNote.c_str());
        QCOMPARE(inv.gpuCount(), 2);
        QCOMPARE(inv.cudaCount(), 0);
        QCOMPARE(QString::fromStdString(inv.devices[1].id), QStringLiteral("nvml:0"));
        QCOMPARE(inv.devices[1].cudaOrdinal, -1);
        QCOMPARE(QString::fromStdString(inv.devices[2].pciBusId), QStringLiteral("0000:11:00.0"));
        QCOMPARE(QString::fromStdString(inv.devices[2].name), QStringLiteral("Fake GPU 1"));
        QVERIFY(QString::fromStdString(inv.devices[2].uuid).endsWith(QLatin1Char('1')));
        QCOMPARE(inv.devices[1].usedBytes, std::uint64_t{1000});
        QCOMPARE(inv.devices[2].usedBytes, std::uint64_t{2000});
        QCOMPARE(inv.devices[2].totalBytes, std::uint64_t{16} << 30);
        QVERIFY(inv.devices[1].processes.empty());
        QCOMPARE(inv.devices[2].processes.size(), std::size_t{1});
        QCOMPARE(inv.devices[2].processes[0].pid, 4242U);
        QCOMPARE(inv.devices[2].processes[0].usedBytes, std::uint64_t{512});
        QCOMPARE(QString::fromStdString(inv.driverVersion), QStringLiteral("999.99-fake"));
        QVERIFY(!(*nvml)->memory(2));
    }

    void samplerKeepsItsInterval()
    {
        QTemporaryDir dir;
        const std::string state = dir.filePath(QStringLiteral("state")).toStdString();
        writeState(state, "100 100 0 0 0");
        setEnv("FAKE_NVML_STATE", state);
        setEnv("CKPTSCOPE_NVML_LIBRARY", FAKE_NVML_PATH);
        setEnv("CKPTSCOPE_CUDA_LIBRARY", "/nonexistent/libcuda.so.1");
        auto nvml = Nvml::load();
        QVERIFY(nvml);
        Sampler sampler(*nvml);
        std::atomic<int> callbacks{0};
        sampler.start({std::chrono::milliseconds(10), [&callbacks](const Sample&) { ++callbacks; }});
        QVERIFY(sampler.running());
        // Wait on samples, not on the clock: a loaded machine may not schedule the sampler on time.
        QTRY_VERIFY_WITH_TIMEOUT(callbacks.load() >= 10, 10000);
        writeState(state, "100 5000000 " + std::to_string(getpid()) + " 1 4000000");
        const int before = callbacks.load();
        QTRY_VERIFY_WITH_TIMEOUT(callbacks.load() >= before + 10, 10000);
        sampler.stop();
        QVERIFY(!sampler.running());
        const Timeline t = sampler.snapshot();
        QCOMPARE(t.devices.size(), std::size_t{3});
        QCOMPARE(QString::fromStdString(t.devices[2]), QStringLiteral("nvml:1"));  // no CUDA driver here
        // 300 ms at 10 ms: about 30 samples plus the first and the last; allow a loaded machine.
        QVERIFY2(t.samples.size() >= 20, qPrintable(QString::number(t.samples.size())));
        QCOMPARE(callbacks.load(), static_cast<int>(t.samples.size()));
        for (std::size_t i = 1; i < t.samples.size(); ++i) {
            QVERIFY(t.samples[i].tMs >= t.samples[i - 1].tMs);
        }
        const double meanStep =
            (t.samples.back().tMs - t.samples.front().tMs) / static_cast<double>(t.samples.size() - 1);
        // Never faster than the interval asked for (lateness depends on the machine's load).
        QVERIFY2(meanStep > 8, qPrintable(QString::number(meanStep)));
        QCOMPARE(t.maxRise(1), std::uint64_t{0});
        QCOMPARE(t.maxRise(2), std::uint64_t{5000000 - 100});
        QCOMPARE(t.peak(2), std::uint64_t{5000000});
        QCOMPARE(t.samples.back().ownBytes[2], std::uint64_t{4000000});  // this process's share
        QVERIFY(t.samples.back().ownBytes[0] > 0);                       // our resident set
        QVERIFY(t.samples.front().usedBytes[0] > 0);                     // system RAM in use
        QCOMPARE(sampler.snapshot(t.samples.size() - 1).samples.size(), std::size_t{1});
    }

    void samplerWithoutNvmlHasTheCpuColumn()
    {
        Sampler sampler(nullptr);
        std::atomic<int> callbacks{0};
        sampler.start({std::chrono::milliseconds(5), [&callbacks](const Sample&) { ++callbacks; }});
        QTRY_VERIFY_WITH_TIMEOUT(callbacks.load() >= 3, 10000);
        sampler.stop();
        sampler.stop();  // idempotent
        const Timeline t = sampler.snapshot();
        QCOMPARE(t.devices.size(), std::size_t{1});
        QVERIFY(t.samples.size() >= 3);
    }

    // Outside a nested PID namespace NVML knows this process by getpid() alone.
    void selfPidIsGetpidHere()
    {
        const auto pids = selfPidsAsNvmlSees();
        QVERIFY(!pids.empty());
        QCOMPARE(pids[0], static_cast<std::uint32_t>(getpid()));
        QVERIFY(pids.size() <= 2);
    }
};

QTEST_GUILESS_MAIN(TestNvml)
#include "tst_nvml.moc"
