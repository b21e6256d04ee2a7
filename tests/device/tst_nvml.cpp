// The NVML loader and the sampler: the no-driver path (missing library, a library without NVML's
// symbols) must give one line and still list the CPU; a fake NVML with two GPUs drives the
// inventory and the sampler's timing; fake drivers that write process entries of 32, 24 and 16
// bytes, list MPS clients apart, or count GPUs this job may not open are read as they are.
#include "device/nvml.h"
#include "device/sampler.h"
#include "fake_gpu_process.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>

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

constexpr std::uint64_t kMiB = 1ULL << 20;

// Processes with memory on one GPU of a fresh fake machine, each charged with (i + 1) MiB.
class Sleepers {
public:
    Sleepers(int count, int slot)
    {
        for (int i = 0; i < count; ++i) {
            procs_.push_back(std::make_unique<FakeGpuProcess>(slot, static_cast<std::uint64_t>(i + 1) * kMiB));
            pids_.push_back(procs_.back()->pid());
        }
    }
    [[nodiscard]] const std::vector<pid_t>& pids() const { return pids_; }

private:
    std::vector<std::unique_ptr<FakeGpuProcess>> procs_;
    std::vector<pid_t> pids_;
};

// A fresh fake machine of `devices` (MiB each) seen through the NVML library `nvml`.
std::unique_ptr<QTemporaryDir> fakeMachine(const char* nvml, const char* devices)
{
    auto dir = std::make_unique<QTemporaryDir>();
    setEnv("FAKE_GPU_STATE", dir->filePath(QStringLiteral("gpu.state")).toStdString());
    setEnv("FAKE_CUDA_DEVICES", devices);
    setEnv("CKPTSCOPE_NVML_LIBRARY", nvml);
    setEnv("CKPTSCOPE_CUDA_LIBRARY", FAKE_CUDA_PATH);
    for (const char* v : {"FAKE_NVML_STATE", "FAKE_NVML_MPS_SERVER", "FAKE_GPU_NO_ACCESS", "FAKE_NVML_PID_OFFSET"}) {
        qunsetenv(v);
    }
    return dir;
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

    // Thirty processes on one GPU, more than 24: a reader that trusts one entry size overflows its
    // buffer on a driver that writes 32-byte entries (535.43-535.86) and misreads every entry after
    // the first where it writes 16 (550.127). Each driver's list is read whole and right. Run under
    // ASan (scripts/test-asan.sh) the overflow is a report, not a silent corruption.
    void thirtyProcessesOnEveryDriver_data()
    {
        QTest::addColumn<QString>("library");
        QTest::addColumn<QString>("driver");
        QTest::newRow("535.43: 32-byte _v3 entries, no detail list")
            << QStringLiteral(FAKE_NVML_R535_43_PATH) << QStringLiteral("535.43.02");
        QTest::newRow("550.127: 16-byte _v3 entries, detail list not supported")
            << QStringLiteral(FAKE_NVML_R550_127_PATH) << QStringLiteral("550.127.08");
        QTest::newRow("a current driver: the detail list")
            << QStringLiteral(FAKE_NVML_PATH) << QStringLiteral("999.99-fake");
        QTest::newRow("460: _v2 only") << QStringLiteral(FAKE_NVML_R460_PATH) << QStringLiteral("460.106.00");
    }
    void thirtyProcessesOnEveryDriver()
    {
        QFETCH(QString, library);
        QFETCH(QString, driver);
        const auto machine = fakeMachine(qPrintable(library), "16384");
        const Sleepers others(30, 0);
        auto nvml = Nvml::load();
        QVERIFY2(nvml, nvml ? "" : nvml.error().message.c_str());
        QCOMPARE(QString::fromStdString((*nvml)->driverVersion()), driver);
        for (int pass = 0; pass < 3; ++pass) {  // the window's sampler reads it again and again
            auto procs = (*nvml)->processes(0);
            QVERIFY2(procs, procs ? "" : procs.error().message.c_str());
            QCOMPARE(procs->size(), std::size_t{30});
            for (std::size_t i = 0; i < others.pids().size(); ++i) {
                const auto it = std::find_if(procs->begin(), procs->end(), [&](const GpuProcess& p) {
                    return p.pid == static_cast<std::uint32_t>(others.pids()[i]);
                });
                QVERIFY2(it != procs->end(), qPrintable(QStringLiteral("pid %1 not listed").arg(others.pids()[i])));
                QCOMPARE(it->usedBytes, (i + 1) * kMiB);
                QVERIFY(!it->mps);
            }
        }
        const Inventory inv = queryInventory(*nvml);
        QCOMPARE(inv.devices.at(1).processes.size(), std::size_t{30});
        QCOMPARE(inv.devices.at(1).usedBytes, 465 * kMiB);  // 1 + 2 + ... + 30 MiB
    }

    // Under the Multi-Process Service the compute list holds the server alone; its clients are
    // listed by the MPS calls (or the detail list's MPS mode). Both are read, the clients marked.
    void mpsClientsAreListed_data()
    {
        QTest::addColumn<QString>("library");
        QTest::newRow("detail list") << QStringLiteral(FAKE_NVML_PATH);
        QTest::newRow("535.43: MPS _v3 at 32 bytes") << QStringLiteral(FAKE_NVML_R535_43_PATH);
        QTest::newRow("550.127: MPS _v3 at 16 bytes") << QStringLiteral(FAKE_NVML_R550_127_PATH);
        QTest::newRow("460: MPS _v2") << QStringLiteral(FAKE_NVML_R460_PATH);
    }
    void mpsClientsAreListed()
    {
        QFETCH(QString, library);
        const auto machine = fakeMachine(qPrintable(library), "16384");
        const Sleepers server(1, 0);
        const Sleepers clients(3, 0);
        setEnv("FAKE_NVML_MPS_SERVER", std::to_string(server.pids()[0]));
        auto nvml = Nvml::load();
        QVERIFY(nvml);
        auto procs = (*nvml)->processes(0);
        QVERIFY2(procs, procs ? "" : procs.error().message.c_str());
        QCOMPARE(procs->size(), std::size_t{4});
        for (const auto& p : *procs) {
            const bool isServer = p.pid == static_cast<std::uint32_t>(server.pids()[0]);
            QCOMPARE(p.mps, !isServer);
        }
        qunsetenv("FAKE_NVML_MPS_SERVER");
    }

    // Under Slurm's cgroups NVML counts every GPU of the node but cannot open those of other jobs.
    // They are not listed as a nameless "NVIDIA GPU" of 0 B: they are left out, and said so.
    void gpusThatCannotBeOpenedAreLeftOut()
    {
        const auto machine = fakeMachine(FAKE_NVML_PATH, "1024,2048,4096");
        setEnv("FAKE_GPU_NO_ACCESS", "1");
        auto nvml = Nvml::load();
        QVERIFY(nvml);
        const Inventory inv = queryInventory(*nvml);
        QCOMPARE(inv.gpuCount(), 2);
        QCOMPARE(inv.cudaCount(), 2);
        for (std::size_t i = 1; i < inv.devices.size(); ++i) {
            QVERIFY2(inv.devices[i].totalBytes > 0 && inv.devices[i].name.starts_with("Fake GPU"),
                     inv.devices[i].name.c_str());
        }
        QCOMPARE(inv.devices[2].index, 2);
        QCOMPARE(inv.devices[2].totalBytes, 4096 * kMiB);
        QVERIFY2(inv.unreachableNote.find("GPU 1") != std::string::npos &&
                     inv.unreachableNote.find("Insufficient Permissions") != std::string::npos,
                 inv.unreachableNote.c_str());
        qunsetenv("FAKE_GPU_NO_ACCESS");
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
