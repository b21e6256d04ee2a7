// The CUDA engine through the test-load client, on a fake NVIDIA driver (fake_cuda.c and
// fake_nvml.c sharing FAKE_GPU_STATE): the copy path with its bytes checked, out of memory in the
// middle of a load, two devices where nothing lands on the other, no driver, cancel mid-load, and
// the DDP replay's bookkeeping. Each test gets a fresh fake machine, whose copies are asynchronous
// (a staging buffer refilled too early shows in the hashes), and the engine fills its staging
// buffers with four host threads unless a test says otherwise.
#include "cli_run.h"
#include "device/ddp_replay.h"
#include "device/gpu_map.h"
#include "device/nvml.h"
#include "device/sha256.h"
#include "device/testload.h"
#include "util/bytes.h"

#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern "C" {
#include "fake_gpu_state.h"
}

using namespace ckpt;
using namespace ckpt::device;

namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;

// Writes a checkpoint of `count` float32 tensors of `mib` MiB each (distinct storages) with real
// PyTorch; their storages are tagged cuda:0 with a register_package tagger, as a GPU save would.
QString writeCheckpoint(const QTemporaryDir& dir, const QString& name, int count, int mib)
{
    const QString path = dir.filePath(name);
    const QString script = QStringLiteral(
        "import sys, torch\n"
        "torch.serialization.register_package(0, lambda o: 'cuda:0' if o.device.type == 'cpu' else None,\n"
        "    lambda o, loc: None)\n"
        "n, mib = int(sys.argv[2]), int(sys.argv[3])\n"
        "torch.save({'w%d' % i: torch.full((mib * 262144,), float(i)) for i in range(n)}, sys.argv[1])\n");
    QProcess py;
    py.start(QStringLiteral(CKPTSCOPE_PYTHON),
             {QStringLiteral("-c"), script, path, QString::number(count), QString::number(mib)});
    if (!py.waitForFinished(120000) || py.exitCode() != 0) {
        qWarning("%s", py.readAllStandardError().constData());
        return {};
    }
    return path;
}

// Storages of random bytes, sizes from one byte to several staging buffers and rarely a multiple of
// anything; `hashes` gets the sha256 of each storage's bytes as PyTorch holds them.
QString writeOddSizes(const QTemporaryDir& dir, std::vector<std::string>& hashes)
{
    QString path = dir.filePath(QStringLiteral("odd.pt"));
    const QString script = QStringLiteral(
        "import sys, hashlib, torch\n"
        "g = torch.Generator().manual_seed(7)\n"
        "sizes = [1, 4097, 65536, 300001, 1 << 20, (5 << 20) + 7, (9 << 20) + 1]\n"
        "sd = {'t%d' % i: torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g) for i, n in enumerate(sizes)}\n"
        "torch.save(sd, sys.argv[1])\n"
        "for t in sd.values():\n"
        "    print(hashlib.sha256(t.numpy().tobytes()).hexdigest())\n");
    QProcess py;
    py.start(QStringLiteral(CKPTSCOPE_PYTHON), {QStringLiteral("-c"), script, path});
    if (!py.waitForFinished(120000) || py.exitCode() != 0) {
        qWarning("%s", py.readAllStandardError().constData());
        return {};
    }
    for (const auto& line : py.readAllStandardOutput().trimmed().split('\n')) {
        hashes.push_back(line.toStdString());
    }
    std::sort(hashes.begin(), hashes.end());
    return path;
}

std::uint64_t usedOn(int gpu)
{
    auto nvml = Nvml::load();
    if (!nvml) {
        return ~0ULL;
    }
    auto mem = (*nvml)->memory(gpu);
    return mem ? mem->usedBytes : ~0ULL;
}

// Another process on a shared node: a child that only sleeps, charged with `bytes` on the fake
// machine's state slot `slot` (a physical GPU), as another job's allocation would be.
class Stranger {
public:
    Stranger(int slot, std::uint64_t bytes) : pid_(fork())
    {
        if (pid_ == 0) {
            pause();
            _exit(0);
        }
        FakeGpuState* s = fakeGpuState();
        for (auto& row : s->rows) {
            int free = 0;
            if (__atomic_compare_exchange_n(&row.pid, &free, static_cast<int>(pid_), false, __ATOMIC_SEQ_CST,
                                            __ATOMIC_SEQ_CST)) {
                row.device = slot;
                __atomic_store_n(&row.bytes, static_cast<unsigned long long>(bytes), __ATOMIC_SEQ_CST);
                break;
            }
        }
    }
    Stranger(const Stranger&) = delete;
    Stranger& operator=(const Stranger&) = delete;
    ~Stranger()
    {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }

private:
    pid_t pid_;
};

}  // namespace

class TestCudaEngine : public QObject {
    Q_OBJECT

    QTemporaryDir m_files;
    QString m_small;   // 3 x 8 MiB
    QString m_many;    // 40 x 1 MiB
    QString m_odd;     // random bytes, odd sizes (writeOddSizes)
    QString m_eleven;  // 2 x 11 MiB: the allocator settings change what torch would reserve
    QString m_big;     // 1 x 48 MiB: one storage that takes a while to hash
    std::vector<std::string> m_oddHashes;
    std::unique_ptr<QTemporaryDir> m_machine;

    // A fresh fake driver: `devices` in MiB, what a context costs.
    void newMachine(const char* devices, int contextMib = 64)
    {
        m_machine = std::make_unique<QTemporaryDir>();
        qputenv("FAKE_GPU_STATE", QByteArray(qPrintable(m_machine->filePath(QStringLiteral("gpu.state")))));
        qputenv("FAKE_CUDA_DEVICES", QByteArray(devices));
        qputenv("FAKE_CUDA_CONTEXT_MIB", QByteArray(qPrintable(QString::number(contextMib))));
        qputenv("FAKE_CUDA_LOG", QByteArray(qPrintable(m_machine->filePath(QStringLiteral("calls.log")))));
        for (const char* v :
             {"FAKE_CUDA_DELAY_US", "FAKE_CUDA_NO_DEVICE", "FAKE_CUDA_DTOH_DELAY_US", "FAKE_NVML_PID_OFFSET",
              "FAKE_CUDA_ORDER", "CUDA_VISIBLE_DEVICES", "FAKE_MIG_GPU", "FAKE_MIG_MIB", "PYTORCH_CUDA_ALLOC_CONF",
              "PYTORCH_ALLOC_CONF", "CKPTSCOPE_HELPER_TIMEOUT", "FAKE_CUDA_HOST_OOM"}) {
            qunsetenv(v);
        }
        qputenv("CKPTSCOPE_CUDA_LIBRARY", QByteArray(FAKE_CUDA_PATH));
        qputenv("CKPTSCOPE_CUDA_THREADS", QByteArray("4"));
        qunsetenv("CKPTSCOPE_CUDA_BUFFER_KIB");
    }
    QString calls() const
    {
        QFile f(m_machine->filePath(QStringLiteral("calls.log")));
        return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
    }
    TestloadRequest request(const QString& file, const char* device) const
    {
        TestloadRequest r;
        r.path = file.toStdString();
        r.device = device;
        r.engine = Engine::Cuda;
        r.interval = std::chrono::milliseconds(5);
        return r;
    }

private Q_SLOTS:
    void initTestCase()
    {
        qputenv("CKPTSCOPE_CUDA_ENGINE", QByteArray(CKPTSCOPE_TEST_ENGINE));
        qputenv("CKPTSCOPE_NVML_LIBRARY", QByteArray(FAKE_NVML_PATH));
        qunsetenv("FAKE_NVML_STATE");
        m_small = writeCheckpoint(m_files, QStringLiteral("small.pt"), 3, 8);
        m_many = writeCheckpoint(m_files, QStringLiteral("many.pt"), 40, 1);
        m_odd = writeOddSizes(m_files, m_oddHashes);
        m_eleven = writeCheckpoint(m_files, QStringLiteral("eleven.pt"), 2, 11);
        m_big = writeCheckpoint(m_files, QStringLiteral("big.pt"), 1, 48);
        QVERIFY(!m_small.isEmpty() && !m_many.isEmpty() && !m_odd.isEmpty() && !m_eleven.isEmpty() && !m_big.isEmpty());
        QCOMPARE(m_oddHashes.size(), std::size_t{7});
    }

    // Every byte lands: the storages read back from the device hash to the file's bytes.
    void copiesEveryStorage()
    {
        newMachine("1024,1024");
        auto req = request(m_small, "cuda:0");
        req.verify = true;
        auto r = testLoad(req);
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->engine, std::string("cuda"));
        QCOMPARE(r->tensorsLoaded, 3ULL);
        QCOMPARE(r->storagesLoaded, 3ULL);
        QCOMPARE(r->bytes, 24 * kMiB);
        QCOMPARE(r->storageChecks.size(), std::size_t{3});
        QCOMPARE(r->contextBytes, 64 * kMiB);
        QCOMPARE(r->peakBytes, 64 * kMiB + 24 * kMiB);
        QCOMPARE(r->peakSource, std::string("nvml-process"));
        // torch would take three 8 MiB blocks out of one 20 MiB segment and a second one.
        QCOMPARE(r->torchReservedBytes, 40 * kMiB);
        QCOMPARE(r->torchPeakBytes, 64 * kMiB + 40 * kMiB);
        QCOMPARE(r->deviceName, std::string("Fake GPU 0"));
        // Bytes compared with the file by sha256, storage by storage.
        std::vector<std::string> expected;
        for (int i = 0; i < 3; ++i) {
            std::vector<float> values(2 * 1024 * 1024, static_cast<float>(i));
            expected.push_back(sha256Hex(std::as_bytes(std::span(values))));
        }
        for (const auto& c : r->storageChecks) {
            QVERIFY2(std::find(expected.begin(), expected.end(), c.sha256) != expected.end(), c.sha256.c_str());
        }
        // The engine is gone and freed everything.
        QCOMPARE(usedOn(0), 0ULL);
    }

    // Every byte lands whatever the staging: one thread or several, storages smaller and larger
    // than a buffer, packed into buffers across their ends, slices that do not divide evenly.
    void copiesEveryByteWithAnyStaging_data()
    {
        QTest::addColumn<QByteArray>("threads");
        QTest::addColumn<QByteArray>("bufferKib");
        QTest::newRow("1 thread, 64 KiB buffers") << QByteArray("1") << QByteArray("64");
        QTest::newRow("4 threads, 1 MiB buffers") << QByteArray("4") << QByteArray("1024");
        QTest::newRow("8 threads, 3 MiB + 1 KiB buffers") << QByteArray("8") << QByteArray("3073");
        QTest::newRow("3 threads, default buffers") << QByteArray("3") << QByteArray();
    }
    void copiesEveryByteWithAnyStaging()
    {
        QFETCH(QByteArray, threads);
        QFETCH(QByteArray, bufferKib);
        newMachine("1024");
        qputenv("CKPTSCOPE_CUDA_THREADS", QByteArray(threads.constData()));
        if (!bufferKib.isEmpty()) {
            qputenv("CKPTSCOPE_CUDA_BUFFER_KIB", QByteArray(bufferKib.constData()));
        }
        auto req = request(m_odd, "cuda:0");
        req.verify = true;
        auto r = testLoad(req);
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->bytes, 1ULL + 4097 + 65536 + 300001 + kMiB + 5 * kMiB + 7 + 9 * kMiB + 1);
        std::vector<std::string> seen;
        for (const auto& c : r->storageChecks) {
            seen.push_back(c.sha256);
        }
        std::sort(seen.begin(), seen.end());
        QCOMPARE(seen, m_oddHashes);
        QCOMPARE(usedOn(0), 0ULL);
    }

    // The engine says how it staged (bench/testload/run.sh prints it): the overrides, clamped.
    void reportsItsStaging()
    {
        auto resultOf = [&](const char* threads, const char* bufferKib) {
            newMachine("1024");
            qputenv("CKPTSCOPE_CUDA_THREADS", QByteArray(threads));
            qputenv("CKPTSCOPE_CUDA_BUFFER_KIB", QByteArray(bufferKib));
            QProcess engine;
            engine.start(QStringLiteral(CKPTSCOPE_TEST_ENGINE), {});
            const QJsonObject request{{QStringLiteral("cmd"), QStringLiteral("testload")},
                                      {QStringLiteral("path"), m_small},
                                      {QStringLiteral("device"), QStringLiteral("cuda:0")}};
            const QByteArray line = QJsonDocument(request).toJson(QJsonDocument::Compact);
            engine.write(line + '\n');
            engine.closeWriteChannel();
            engine.waitForFinished(60000);
            const QList<QByteArray> events = engine.readAllStandardOutput().trimmed().split('\n');
            return QJsonDocument::fromJson(events.last()).object();
        };
        QJsonObject r = resultOf("3", "512");
        QCOMPARE(r.value(QStringLiteral("event")).toString(), QStringLiteral("result"));
        QCOMPARE(r.value(QStringLiteral("host_threads")).toInt(), 3);
        QCOMPARE(r.value(QStringLiteral("staging_buffers")).toInt(), 3);
        QCOMPARE(r.value(QStringLiteral("staging_bytes")).toInteger(), 3 * 512 * 1024);
        QCOMPARE(r.value(QStringLiteral("bytes")).toInteger(), 24 * 1024 * 1024);
        r = resultOf("0", "1000000");  // at least one thread, at most 256 MiB a buffer
        QCOMPARE(r.value(QStringLiteral("host_threads")).toInt(), 1);
        QCOMPARE(r.value(QStringLiteral("staging_bytes")).toInteger(), 3 * 256 * 1024 * 1024);
        r = resultOf("lots", "");  // not a number: the defaults (3 x 32 MiB, measured on an H100)
        QVERIFY(r.value(QStringLiteral("host_threads")).toInt() >= 1);
        QCOMPARE(r.value(QStringLiteral("staging_bytes")).toInteger(), 3 * 32 * 1024 * 1024);
    }

    // Nothing is created on the other GPU: no context, no allocation, no memory moved.
    void leavesTheOtherDeviceAlone()
    {
        newMachine("1024,1024");
        auto r = testLoad(request(m_small, "cuda:1"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QVERIFY(!r->otherDevicesTouched);
        const QString log = calls();
        QVERIFY2(log.contains(QStringLiteral("ctx 1")), qPrintable(log));
        QVERIFY2(!log.contains(QStringLiteral("ctx 0")) && !log.contains(QStringLiteral("alloc 0")), qPrintable(log));
        QCOMPARE(r->timeline.maxRise(static_cast<std::size_t>(r->timeline.column("cuda:1"))), 64 * kMiB + 24 * kMiB);
        QCOMPARE(r->timeline.maxRise(static_cast<std::size_t>(r->timeline.column("cuda:0"))), 0ULL);
    }

    // 76 MiB: the context (64) and the first 8 MiB storage fit, the second does not. The error says
    // what was needed, what was free and what the context took, and everything is freed.
    void outOfMemoryStopsAtTheFirstStorageThatDoesNotFit()
    {
        newMachine("76", 64);
        auto r = testLoad(request(m_small, "cuda:0"));
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::OutOfMemory);
        const QString msg = QString::fromStdString(r.error().message);
        QVERIFY2(msg.contains(QStringLiteral("did not fit after 8.0 MiB of 24.0 MiB")), qPrintable(msg));
        QVERIFY2(msg.contains(QStringLiteral("12.0 MiB free of 76.0 MiB")), qPrintable(msg));
        QVERIFY2(msg.contains(QStringLiteral("the context itself took 64.0 MiB")), qPrintable(msg));
        QCOMPARE(usedOn(0), 0ULL);
        QVERIFY(calls().contains(QStringLiteral("free 0 8388608")));  // freed before exiting, too
    }

    void noDriverNoDeviceNoSuchDevice()
    {
        newMachine("1024");
        qputenv("CKPTSCOPE_CUDA_LIBRARY", QByteArray("/nonexistent/libcuda.so.1"));
        auto r = testLoad(request(m_small, "cuda:0"));
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::DeviceUnavailable);
        QVERIFY2(r.error().message.starts_with("no NVIDIA driver found"), r.error().message.c_str());
        qputenv("CKPTSCOPE_CUDA_LIBRARY", QByteArray(FAKE_CUDA_PATH));
        qputenv("FAKE_CUDA_NO_DEVICE", QByteArray("1"));
        r = testLoad(request(m_small, "cuda:0"));
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::DeviceUnavailable);
        QVERIFY2(r.error().message.find("no CUDA-capable device") != std::string::npos, r.error().message.c_str());
        qunsetenv("FAKE_CUDA_NO_DEVICE");
        r = testLoad(request(m_small, "cuda:3"));
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::DeviceUnavailable);
        QVERIFY2(r.error().message.find("cuda:3 does not exist: the NVIDIA driver sees 1 GPU") != std::string::npos,
                 r.error().message.c_str());
    }

    // Cancelled after the first progress: the engine is killed, and the driver frees what it held.
    void cancelFreesEverything()
    {
        newMachine("1024");
        qputenv("FAKE_CUDA_DELAY_US", QByteArray("20000"));  // 40 copies: 0.8 s
        std::stop_source stop;
        bool sawBytes = false;
        auto r = testLoad(
            request(m_many, "cuda:0"),
            [&](const TestloadProgress& p) {
                if (p.bytes > 0 && !sawBytes) {
                    sawBytes = true;
                    QVERIFY(usedOn(0) > 0);
                    stop.request_stop();
                }
            },
            stop.get_token());
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::Cancelled);
        QVERIFY(sawBytes);
        QTRY_COMPARE(usedOn(0), 0ULL);  // the killed engine's memory counts for nothing
    }

    // Four ranks on two GPUs, a file saved from cuda:0: every rank puts a context and the weights
    // on GPU 0. With map_location=cpu, each GPU holds its own two ranks' contexts only.
    void ddpReplayPilesUpOnGpu0()
    {
        newMachine("4096,4096", 32);
        ReplayRequest req;
        req.path = m_small.toStdString();
        req.ranks = 4;
        req.interval = std::chrono::milliseconds(5);
        req.hold = std::chrono::milliseconds(200);
        int reported = 0;
        auto r = ddpReplay(req, [&](int loaded) { reported = loaded; });
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(reported, 4);
        QCOMPARE(r->ranks.size(), std::size_t{4});
        QCOMPARE(r->ranks[1].device, std::string("cuda:1"));
        QCOMPARE(r->ranks[1].bytesByDevice.at("cuda:0"), 24 * kMiB);
        QCOMPARE(r->devices.size(), std::size_t{2});
        const ReplayDevice& gpu0 = r->devices[0];
        QCOMPARE(gpu0.device, std::string("cuda:0"));
        QCOMPARE(gpu0.contexts, 4);
        QCOMPARE(gpu0.weightCopies, 4);
        QCOMPARE(gpu0.expectedBytes, 4 * (32 * kMiB + 24 * kMiB));
        QCOMPARE(gpu0.measuredPeakBytes, gpu0.expectedBytes);
        QCOMPARE(r->devices[1].contexts, 2);
        QCOMPARE(r->devices[1].measuredPeakBytes, 2 * 32 * kMiB);
        QVERIFY2(r->verdict.starts_with("cuda:0 peaks at 4 x (context 32.0 MiB + 24.0 MiB) = 224.0 MiB"),
                 r->verdict.c_str());
        QCOMPARE(usedOn(0), 0ULL);

        req.mapLocation = "cpu";
        r = ddpReplay(req, {});
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        for (const auto& d : r->devices) {
            QCOMPARE(d.weightCopies, 0);
            QCOMPARE(d.contexts, 2);
            QCOMPARE(d.measuredPeakBytes, 2 * 32 * kMiB);
        }
        QCOMPARE(r->ranks[0].bytesByDevice.at("cpu"), 24 * kMiB);
    }

    // One GPU: the ranks share it and the pile-up still shows.
    void ddpReplayOnOneGpu()
    {
        newMachine("4096", 32);
        ReplayRequest req;
        req.path = m_small.toStdString();
        req.ranks = 3;
        req.hold = std::chrono::milliseconds(100);
        auto r = ddpReplay(req, {});
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->devices.size(), std::size_t{1});
        QCOMPARE(r->devices[0].contexts, 3);
        QCOMPARE(r->devices[0].measuredPeakBytes, 3 * (32 * kMiB + 24 * kMiB));
    }

    // --- Where GPUs really live (issue 24) ---

    // In a container NVML reports host PIDs, so the engine never finds its own row: the context is
    // the device's rise around creating it, the peak the driver's free memory, and nothing reads 0.
    void pidNamespaceFallsBackToTheDriver()
    {
        newMachine("1024");
        qputenv("FAKE_NVML_PID_OFFSET", QByteArray("100000"));
        auto r = testLoad(request(m_small, "cuda:0"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QVERIFY(r->pidHidden);
        QCOMPARE(r->contextSource, std::string("nvml-device"));
        QCOMPARE(r->contextBytes, 64 * kMiB);
        QCOMPARE(r->peakSource, std::string("driver-meminfo"));
        QCOMPARE(r->peakBytes, 64 * kMiB + 24 * kMiB);
        QVERIFY2(r->peakNote.find("PID namespace") != std::string::npos, r->peakNote.c_str());
        QCOMPARE(r->torchPeakBytes, 64 * kMiB + 40 * kMiB);
    }

    // CUDA's order is not NVML's (FASTEST_FIRST on mixed GPUs): cuda:0 is the second GPU on the bus.
    // The load, the chart's column, the UUID and "other GPUs" all follow CUDA's numbering.
    void cudaOrderDiffersFromNvml()
    {
        newMachine("1024,2048");
        qputenv("FAKE_CUDA_ORDER", QByteArray("1,0"));
        auto r = testLoad(request(m_small, "cuda:0"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QVERIFY2(calls().contains(QStringLiteral("ctx 1 ")), qPrintable(calls()));
        QCOMPARE(r->deviceUuid, std::string("GPU-00000000-0000-0000-0000-000000000001"));
        const int column = r->timeline.column("cuda:0");
        QVERIFY(column > 0);
        QCOMPARE(r->timeline.uuids[static_cast<std::size_t>(column)], r->deviceUuid);
        QCOMPARE(r->timeline.maxRise(static_cast<std::size_t>(column)), 64 * kMiB + 24 * kMiB);
        QVERIFY(!r->otherDevicesTouched);
        QCOMPARE(r->peakSource, std::string("nvml-process"));

        const Inventory inv = queryInventory();
        QCOMPARE(inv.gpuCount(), 2);
        QCOMPARE(inv.devices[1].id, std::string("cuda:0"));
        QCOMPARE(inv.devices[1].index, 1);  // NVML's index of the same GPU
        QCOMPARE(inv.devices[1].pciBusId, std::string("0000:11:00.0"));
        QCOMPARE(inv.devices[1].totalBytes, 2048 * kMiB);
        QCOMPARE(inv.devices[2].id, std::string("cuda:1"));
        QCOMPARE(inv.devices[2].index, 0);
    }

    // Slurm's CUDA_VISIBLE_DEVICES, by index and by UUID: the job sees one GPU, cuda:0, which is the
    // machine's second; the other is listed as not visible, and torch's device count is 1.
    void visibleDevicesNarrowWhatCudaSees_data()
    {
        QTest::addColumn<QByteArray>("visible");
        QTest::newRow("index") << QByteArray("1");
        QTest::newRow("uuid") << QByteArray("GPU-00000000-0000-0000-0000-000000000001");
        QTest::newRow("uuid prefix") << QByteArray("GPU-00000000-0000-0000-0000-000000000001");
    }
    void visibleDevicesNarrowWhatCudaSees()
    {
        QFETCH(QByteArray, visible);
        newMachine("1024,2048");
        qputenv("CUDA_VISIBLE_DEVICES", visible);
        const Inventory inv = queryInventory();
        QCOMPARE(inv.cudaCount(), 1);
        QCOMPARE(inv.devices[1].id, std::string("cuda:0"));
        QCOMPARE(inv.devices[1].uuid, std::string("GPU-00000000-0000-0000-0000-000000000001"));
        QCOMPARE(inv.devices[2].id, std::string("nvml:0"));
        QCOMPARE(inv.devices[2].cudaOrdinal, -1);
        auto r = testLoad(request(m_small, "cuda:0"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QVERIFY2(calls().contains(QStringLiteral("ctx 1 ")), qPrintable(calls()));
        QCOMPARE(r->timeline.devices, (std::vector<std::string>{"cpu", "cuda:0"}));  // another job's GPU: unwatched

        // A file saved on cuda:1 fails under plain torch.load here, as torch says.
        const auto p = torchLoadPlacement({{"cuda:1", 10}}, inv.cudaCount());
        QVERIFY(p.wouldFail);
        QVERIFY2(p.rows[0].reason.find("device_count() is 1") != std::string::npos, p.rows[0].reason.c_str());
        // cuda:1 does not exist for this job: exit 2 with one line naming CUDA_VISIBLE_DEVICES.
        const auto cli = test::ckptscope({"testload", m_small.toStdString(), "--device", "cuda:1"});
        QCOMPARE(cli.rc, 2);
        QVERIFY2(cli.err.find("CUDA_VISIBLE_DEVICES=" + visible.toStdString()) != std::string::npos, cli.err.c_str());
        QCOMPARE(std::count(cli.err.begin(), cli.err.end(), '\n'), 1);
    }

    void emptyVisibleDevicesIsOneLine()
    {
        newMachine("1024");
        qputenv("CUDA_VISIBLE_DEVICES", QByteArray(""));
        const auto cli = test::ckptscope({"testload", m_small.toStdString(), "--device", "cuda:0"});
        QCOMPARE(cli.rc, 2);
        QVERIFY2(cli.err.find("CUDA_VISIBLE_DEVICES=''") != std::string::npos, cli.err.c_str());
        QCOMPARE(std::count(cli.err.begin(), cli.err.end(), '\n'), 1);
    }

    // The JSON names every GPU by all its identities, null where it has none here.
    void jsonCarriesEveryIdentity()
    {
        newMachine("1024,2048");
        qputenv("CUDA_VISIBLE_DEVICES", QByteArray("1"));
        const auto cli = test::ckptscope({"testload", m_small.toStdString(), "--device", "cuda:0", "--json"});
        QVERIFY2(cli.rc == 0, (cli.err + cli.out).c_str());
        const auto j = nlohmann::json::parse(cli.out);
        const auto& gpus = j["gpus"];
        QCOMPARE(gpus.size(), std::size_t{3});
        QCOMPARE(gpus[1]["id"].get<std::string>(), std::string("cuda:0"));
        QCOMPARE(gpus[1]["cuda_ordinal"].get<int>(), 0);
        QCOMPARE(gpus[1]["nvml_index"].get<int>(), 1);
        QCOMPARE(gpus[1]["pci_bus_id"].get<std::string>(), std::string("0000:11:00.0"));
        QCOMPARE(gpus[1]["uuid"].get<std::string>(), j["device_uuid"].get<std::string>());
        QCOMPARE(gpus[2]["id"].get<std::string>(), std::string("nvml:0"));
        QVERIFY(gpus[2]["cuda_ordinal"].is_null());
        QCOMPARE(j["timeline"]["devices"], nlohmann::json::parse(R"(["cpu","cuda:0"])"));
    }

    // A MIG instance: CUDA's UUID is the instance's (MIG-...), NVML reaches it through its parent and
    // hides per-process memory there, so the context is measured on the instance's own memory.
    void migInstanceIsMatched()
    {
        newMachine("8192");
        qputenv("FAKE_MIG_GPU", QByteArray("0"));
        qputenv("FAKE_MIG_MIB", QByteArray("2048"));
        const Inventory inv = queryInventory();
        QCOMPARE(inv.gpuCount(), 1);
        QCOMPARE(inv.devices[1].id, std::string("cuda:0"));
        QVERIFY2(inv.devices[1].uuid.starts_with("MIG-"), inv.devices[1].uuid.c_str());
        QCOMPARE(inv.devices[1].mig, 0);
        QCOMPARE(inv.devices[1].totalBytes, 2048 * kMiB);
        auto r = testLoad(request(m_small, "cuda:0"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->deviceUuid, inv.devices[1].uuid);
        QCOMPARE(r->contextSource, std::string("nvml-device"));
        QCOMPARE(r->contextBytes, 64 * kMiB);
        QCOMPARE(r->peakSource, std::string("driver-meminfo"));
        QCOMPARE(r->peakBytes, 64 * kMiB + 24 * kMiB);
        QVERIFY2(r->peakNote.find("MIG") != std::string::npos, r->peakNote.c_str());
        QVERIFY(!r->otherDevicesTouched);
        QCOMPARE(r->timeline.maxRise(1), 64 * kMiB + 24 * kMiB);
    }

    // Another job allocates on the other GPU during the load: NVML's process list says it is not
    // ours, so it is named, never blamed; with host PIDs NVML cannot tell, and that is a doubt.
    void anotherProcessIsNotBlamed_data()
    {
        QTest::addColumn<bool>("pidNamespace");
        QTest::newRow("host") << false;
        QTest::newRow("container") << true;
    }
    void anotherProcessIsNotBlamed()
    {
        QFETCH(bool, pidNamespace);
        newMachine("1024,1024");
        if (pidNamespace) {
            qputenv("FAKE_NVML_PID_OFFSET", QByteArray("100000"));
        }
        qputenv("FAKE_CUDA_DELAY_US", QByteArray("20000"));  // 40 copies: 0.8 s to be seen in
        std::unique_ptr<Stranger> other;
        auto r = testLoad(request(m_many, "cuda:0"), [&](const TestloadProgress& p) {
            if (p.bytes > 0 && !other) {
                other = std::make_unique<Stranger>(1, 512 * kMiB);
            }
        });
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QVERIFY(other);
        QVERIFY(!r->otherDevicesTouched);
        QCOMPARE(r->otherDevices.size(), std::size_t{1});
        QCOMPARE(r->otherDevices[0].device, std::string("cuda:1"));
        QCOMPARE(r->otherDevices[0].riseBytes, 512 * kMiB);
        QCOMPARE(r->otherDevices[0].by, std::string(pidNamespace ? "unknown" : "other processes"));
        QCOMPARE(r->otherDevicesDoubt.empty(), !pidNamespace);
    }

    // torch.load allocates every storage, whatever --select keeps; and the allocator's settings
    // change what it reserves: two 11 MiB storages take 24 MiB by default, two 20 MiB pages with
    // expandable segments.
    void torchPredictionCoversTheFileAndItsSettings()
    {
        newMachine("1024");
        auto req = request(m_small, "cuda:0");
        req.select = "w0";
        auto r = testLoad(req);
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->bytes, 8 * kMiB);
        QCOMPARE(r->torchReservedBytes, 40 * kMiB);  // all three storages, as torch.load places them

        r = testLoad(request(m_eleven, "cuda:0"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->torchReservedBytes, 24 * kMiB);
        qputenv("PYTORCH_CUDA_ALLOC_CONF", QByteArray("expandable_segments:True"));
        r = testLoad(request(m_eleven, "cuda:0"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->torchReservedBytes, 40 * kMiB);
        QCOMPARE(r->torchAllocConf, std::string("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
        qputenv("PYTORCH_CUDA_ALLOC_CONF", QByteArray("expandable_segments:perhaps"));
        r = testLoad(request(m_eleven, "cuda:0"));
        QVERIFY(!r);
        QVERIFY2(r.error().message.find("PYTORCH_CUDA_ALLOC_CONF") != std::string::npos, r.error().message.c_str());
    }

    // The driver's "out of memory" when pinning host memory is about the host: the GPU is not blamed.
    void pinnedHostOutOfMemoryIsNotTheGpus()
    {
        newMachine("1024");
        qputenv("FAKE_CUDA_HOST_OOM", QByteArray("1"));
        auto r = testLoad(request(m_small, "cuda:0"));
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::LoadFailed);
        QVERIFY2(r.error().message.find("the host, not the GPU") != std::string::npos, r.error().message.c_str());
        QCOMPARE(usedOn(0), 0ULL);
    }

    // Hashing one large storage for --verify takes longer than the client's silence limit; the
    // engine keeps saying how far it is.
    void verifyOfALargeStorageKeepsTalking()
    {
        newMachine("1024");
        qputenv("CKPTSCOPE_CUDA_BUFFER_KIB", QByteArray("1024"));
        qputenv("FAKE_CUDA_DTOH_DELAY_US", QByteArray("60000"));  // 48 reads of 1 MiB: 2.9 s
        auto req = request(m_big, "cuda:0");
        req.verify = true;
        req.silenceTimeout = std::chrono::milliseconds(1500);
        auto r = testLoad(req);
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->storageChecks.size(), std::size_t{1});
    }

    // Ranks waiting for the others hold their memory, and keep saying so: a hold longer than the
    // silence limit is not a dead rank. The limit is CKPTSCOPE_HELPER_TIMEOUT, as for a test-load.
    void replayRanksHoldingAreAlive()
    {
        newMachine("4096", 32);
        qputenv("CKPTSCOPE_HELPER_TIMEOUT", QByteArray("1.5"));
        ReplayRequest req;
        req.path = m_small.toStdString();
        req.ranks = 2;
        req.hold = std::chrono::milliseconds(3000);
        auto r = ddpReplay(req, {});
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        qputenv("CKPTSCOPE_HELPER_TIMEOUT", QByteArray("soon"));
        r = ddpReplay(req, {});
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::Usage);
    }

    // Under CUDA_VISIBLE_DEVICES=0 on a two-GPU machine torch sees one GPU, so every rank is on
    // cuda:0; the replay counts as CUDA does and measures the GPU each rank reported by UUID.
    void replayCountsGpusAsCudaDoes()
    {
        newMachine("4096,4096", 32);
        qputenv("CUDA_VISIBLE_DEVICES", QByteArray("1"));
        ReplayRequest req;
        req.path = m_small.toStdString();
        req.ranks = 2;
        req.hold = std::chrono::milliseconds(200);
        auto r = ddpReplay(req, {});
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->ranks[1].device, std::string("cuda:0"));
        QCOMPARE(r->ranks[1].uuids.at("cuda:0"), std::string("GPU-00000000-0000-0000-0000-000000000001"));
        QCOMPARE(r->devices.size(), std::size_t{1});
        QCOMPARE(r->devices[0].uuid, std::string("GPU-00000000-0000-0000-0000-000000000001"));
        QCOMPARE(r->devices[0].measuredPeakBytes, 2 * (32 * kMiB + 24 * kMiB));
    }

    // One GPU that holds three contexts and eight of the nine 8 MiB storages the ranks place: one
    // rank runs out of memory part-way (which one, and after how many, is the ranks' race), and the
    // table of every device still comes back, naming it and how far it got.
    void replayOutOfMemoryKeepsTheTable()
    {
        newMachine("160", 32);
        ReplayRequest req;
        req.path = m_small.toStdString();
        req.ranks = 3;
        req.hold = std::chrono::milliseconds(300);
        auto r = ddpReplay(req, {});
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->failedRanks, 1);
        const auto failed =
            std::find_if(r->ranks.begin(), r->ranks.end(), [](const auto& k) { return !k.error.empty(); });
        QVERIFY(failed != r->ranks.end());
        QVERIFY(failed->bytesPlaced <= 16 * kMiB && failed->bytesPlaced % (8 * kMiB) == 0);
        QCOMPARE(failed->totalBytes, 24 * kMiB);
        QVERIFY2(failed->error.find("out of memory") != std::string::npos ||
                     failed->error.find("cannot hold") != std::string::npos,
                 failed->error.c_str());
        QCOMPARE(r->devices.size(), std::size_t{1});
        QCOMPARE(r->devices[0].measuredPeakBytes, 160 * kMiB);
        const std::string howFar = humanBytes(failed->bytesPlaced) + " of 24.0 MiB";
        QVERIFY2(r->verdict.find("failed after placing " + howFar) != std::string::npos, r->verdict.c_str());
        QTRY_COMPARE(usedOn(0), 0ULL);
        const auto cli = test::ckptscope({"testload", m_small.toStdString(), "--ddp-ranks", "3"});
        QCOMPARE(cli.rc, 1);
        QVERIFY2(cli.out.find("FAILED after placing ") != std::string::npos, cli.out.c_str());
        QVERIFY2(cli.out.find("cuda:0: 3 contexts") != std::string::npos, cli.out.c_str());
    }
};

QTEST_GUILESS_MAIN(TestCudaEngine)
#include "tst_cuda_engine.moc"
