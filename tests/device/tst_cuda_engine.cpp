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
#include "fake_gpu_process.h"
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

using namespace ckpt;
using namespace ckpt::device;

namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;

// Writes a checkpoint of `count` float32 tensors of `kib` KiB each (distinct storages) with real
// PyTorch; their storages are tagged `location` with a register_package tagger, as a GPU save would.
QString writeTensors(const QTemporaryDir& dir, const QString& name, int count, int kib, const char* location = "cuda:0")
{
    const QString path = dir.filePath(name);
    const QString script =
        QStringLiteral("import sys, torch\n"
                       "where = sys.argv[4]\n"
                       "torch.serialization.register_package(0, lambda o: where if o.device.type == 'cpu' else None,\n"
                       "    lambda o, loc: None)\n"
                       "n, kib = int(sys.argv[2]), int(sys.argv[3])\n"
                       "torch.save({'w%d' % i: torch.full((kib * 256,), float(i)) for i in range(n)}, sys.argv[1])\n");
    QProcess py;
    py.start(QStringLiteral(CKPTSCOPE_PYTHON), {QStringLiteral("-c"), script, path, QString::number(count),
                                                QString::number(kib), QString::fromLatin1(location)});
    if (!py.waitForFinished(120000) || py.exitCode() != 0) {
        qWarning("%s", py.readAllStandardError().constData());
        return {};
    }
    return path;
}

// `count` float32 tensors of `mib` MiB each, tagged cuda:0.
QString writeCheckpoint(const QTemporaryDir& dir, const QString& name, int count, int mib)
{
    return writeTensors(dir, name, count, mib * 1024);
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

}  // namespace

class TestCudaEngine : public QObject {
    Q_OBJECT

    QTemporaryDir m_files;
    QString m_small;   // 3 x 8 MiB
    QString m_many;    // 40 x 1 MiB
    QString m_odd;     // random bytes, odd sizes (writeOddSizes)
    QString m_eleven;  // 2 x 11 MiB: the allocator settings change what torch would reserve
    QString m_big;     // 1 x 48 MiB: one storage that takes a while to hash
    QString m_tiny;    // 100 x 64 KiB: small storages the driver packs into shared pages
    QString m_on1;     // 2 x 1 MiB saved on cuda:1
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
              "PYTORCH_ALLOC_CONF", "CKPTSCOPE_HELPER_TIMEOUT", "FAKE_CUDA_HOST_OOM", "FAKE_MIG_INSTANCES",
              "FAKE_NVML_MPS_SERVER", "FAKE_GPU_NO_ACCESS", "FAKE_CUDA_CONTEXT_DELAY_US", "FAKE_CUDA_INIT_DELAY_US",
              "PYTORCH_HIP_ALLOC_CONF"}) {
            qunsetenv(v);
        }
        qputenv("CKPTSCOPE_CUDA_LIBRARY", QByteArray(FAKE_CUDA_PATH));
        qputenv("CKPTSCOPE_NVML_LIBRARY", QByteArray(FAKE_NVML_PATH));
        qputenv("CKPTSCOPE_CUDA_THREADS", QByteArray("4"));
        qunsetenv("CKPTSCOPE_CUDA_BUFFER_KIB");
    }
    QString calls() const
    {
        QFile f(m_machine->filePath(QStringLiteral("calls.log")));
        return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
    }
    static ReplayRequest replayOf(const QString& file, int ranks, int holdMs = 800)
    {
        ReplayRequest r;
        r.path = file.toStdString();
        r.ranks = ranks;
        r.hold = std::chrono::milliseconds(holdMs);
        return r;
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
        m_tiny = writeTensors(m_files, QStringLiteral("tiny.pt"), 100, 64);
        m_on1 = writeTensors(m_files, QStringLiteral("on1.pt"), 2, 1024, "cuda:1");
        QVERIFY(!m_small.isEmpty() && !m_many.isEmpty() && !m_odd.isEmpty() && !m_eleven.isEmpty() &&
                !m_big.isEmpty() && !m_tiny.isEmpty() && !m_on1.isEmpty());
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
        // ... once the copy still in flight into it (and out of the pinned staging) had landed.
        QVERIFY2(!calls().contains(QStringLiteral("busy")), qPrintable(calls()));
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
        auto req = replayOf(m_small, 4, 200);
        req.interval = std::chrono::milliseconds(5);
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
        QCOMPARE(gpu0.contextBytes, 32 * kMiB);
        QCOMPARE(gpu0.contextSource, std::string("nvml-process"));
        // torch.load would reserve 40 MiB for three 8 MiB storages (two 20 MiB segments) in each rank;
        // the engines hold exactly what they placed.
        QCOMPARE(gpu0.expectedBytes, 4 * (32 * kMiB + 40 * kMiB));
        QCOMPARE(gpu0.measuredPeakBytes, 4 * (32 * kMiB + 24 * kMiB));
        QCOMPARE(r->devices[1].contexts, 2);
        QCOMPARE(r->devices[1].measuredPeakBytes, 2 * 32 * kMiB);
        QVERIFY2(r->verdict.starts_with("cuda:0 peaks at 4 x (context 32.0 MiB + 40.0 MiB) = 288.0 MiB"),
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
        auto req = replayOf(m_small, 3, 100);
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
        QTest::newRow("uuid prefix") << QByteArray("GPU-00");  // GPU 0's is GPU-01...
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
        std::unique_ptr<FakeGpuProcess> other;
        auto r = testLoad(request(m_many, "cuda:0"), [&](const TestloadProgress& p) {
            if (p.bytes > 0 && !other) {
                other = std::make_unique<FakeGpuProcess>(1, 512 * kMiB);
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
        auto req = replayOf(m_small, 2, 3000);
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
        auto req = replayOf(m_small, 2, 200);
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
        auto req = replayOf(m_small, 3, 300);
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

    // --- The second review (issue 42) ---

    // Thirty processes on the GPU, the engine one of them, on drivers whose _v3 process entries are
    // 32 bytes (535.43-535.86) and 16 (550.127): the engine finds its own row, so it neither says it
    // runs in a container nor falls back to the device's figures.
    void findsItselfAmongThirtyProcesses_data()
    {
        QTest::addColumn<QByteArray>("library");
        QTest::newRow("535.43: 32-byte entries") << QByteArray(FAKE_NVML_R535_43_PATH);
        QTest::newRow("550.127: 16-byte entries") << QByteArray(FAKE_NVML_R550_127_PATH);
    }
    void findsItselfAmongThirtyProcesses()
    {
        QFETCH(QByteArray, library);
        newMachine("4096");
        qputenv("CKPTSCOPE_NVML_LIBRARY", library);
        std::vector<std::unique_ptr<FakeGpuProcess>> others;
        for (int i = 0; i < 29; ++i) {
            others.push_back(std::make_unique<FakeGpuProcess>(0, 16 * kMiB));
        }
        auto r = testLoad(request(m_small, "cuda:0"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QVERIFY(!r->pidHidden);
        QCOMPARE(r->contextSource, std::string("nvml-process"));
        QCOMPARE(r->contextBytes, 64 * kMiB);
        QCOMPARE(r->peakSource, std::string("nvml-process"));
        QCOMPARE(r->peakBytes, 64 * kMiB + 24 * kMiB);
    }

    // 25 ranks on one GPU (`--ddp-ranks 25`), with the 32-byte driver: every engine reads a list of
    // 25 or more processes, and finds its own row in it.
    void replayOfTwentyFiveRanksOnOneGpu()
    {
        newMachine("4096", 32);
        qputenv("CKPTSCOPE_NVML_LIBRARY", QByteArray(FAKE_NVML_R535_43_PATH));
        auto req = replayOf(m_small, 25, 100);
        auto r = ddpReplay(req, {});
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->failedRanks, 0);
        QCOMPARE(r->devices.size(), std::size_t{1});
        QCOMPARE(r->devices[0].contexts, 25);
        QCOMPARE(r->devices[0].contextSource, std::string("nvml-process"));
        QCOMPARE(r->devices[0].contextBytes, 32 * kMiB);
        QCOMPARE(r->devices[0].measuredPeakBytes, 25 * (32 * kMiB + 24 * kMiB));
    }

    // In a container NVML names no process of ours, so the peak is the driver's fall in free memory
    // when that agrees with what the load's allocations take. A hundred 64 KiB storages take four
    // 2 MiB pages, which the driver shares among them, not a hundred: the fall agrees, and no other
    // process is blamed.
    void containerWithAHundredSmallTensors()
    {
        newMachine("1024");
        qputenv("FAKE_NVML_PID_OFFSET", QByteArray("100000"));
        auto r = testLoad(request(m_tiny, "cuda:0"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QVERIFY(r->pidHidden);
        QCOMPARE(r->bytes, 100 * 64 * 1024ULL);
        QCOMPARE(r->peakSource, std::string("driver-meminfo"));
        QCOMPARE(r->peakBytes, 64 * kMiB + 4 * 2 * kMiB);
        QVERIFY2(r->peakNote.find("another process") == std::string::npos, r->peakNote.c_str());
    }

    // Four ranks create their contexts at the same moment, each taking a while (the memory is set
    // aside at the start): a rank that measures its context as the device's rise around creating it
    // sees the others' too. In a container that is all the ranks have; the replay measures each
    // device with every context there and nothing else, and the verdict states one context.
    void delayedContextsInAFourRankReplay()
    {
        newMachine("4096", 32);
        qputenv("FAKE_NVML_PID_OFFSET", QByteArray("100000"));
        qputenv("FAKE_CUDA_CONTEXT_DELAY_US", QByteArray("400000"));
        auto req = replayOf(m_small, 4, 200);
        auto r = ddpReplay(req, {});
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->devices.size(), std::size_t{1});
        QCOMPARE(r->devices[0].contextSource, std::string("device-rise"));
        QCOMPARE(r->contextBytes, 32 * kMiB);
        for (const auto& rank : r->ranks) {
            QCOMPARE(rank.contextBytes, 32 * kMiB);
        }
        QCOMPARE(r->devices[0].expectedBytes, 4 * (32 * kMiB + 40 * kMiB));
        QVERIFY2(r->verdict.starts_with("cuda:0 peaks at 4 x (context 32.0 MiB + 40.0 MiB) = 288.0 MiB"),
                 r->verdict.c_str());
    }

    // A file saved on cuda:1, replayed where torch sees one GPU: torch.load fails on every rank, and
    // the replay says so in torch's words and exits 2, as the single test-load does, instead of a
    // table of "4 x context 0 B = 0 B".
    void replayOfAFileSavedOnAGpuThisMachineLacks()
    {
        newMachine("4096", 32);
        const auto req = replayOf(m_on1, 4);
        auto r = ddpReplay(req, {});
        QVERIFY(!r);
        QCOMPARE(r.error().code, ErrorCode::DeviceUnavailable);
        QVERIFY2(r.error().message.find("torch.cuda.device_count() is 1") != std::string::npos,
                 r.error().message.c_str());
        const auto cli = test::ckptscope({"testload", m_on1.toStdString(), "--ddp-ranks", "4"});
        QCOMPARE(cli.rc, 2);
        QVERIFY2(cli.err.find("CUDA device 1 but torch.cuda.device_count() is 1") != std::string::npos,
                 cli.err.c_str());
        QCOMPARE(std::count(cli.err.begin(), cli.err.end(), '\n'), 1);
        QVERIFY2(cli.out.find("0 B = 0 B") == std::string::npos, cli.out.c_str());
    }

    // Under the Multi-Process Service the engine is an MPS client: NVML lists it with the MPS calls,
    // beside the server in the compute list. It finds itself there; no PID namespace is blamed.
    void mpsClientFindsItself()
    {
        newMachine("4096");
        const FakeGpuProcess server(0, 30 * kMiB);
        qputenv("FAKE_NVML_MPS_SERVER", QByteArray::number(server.pid()));
        auto r = testLoad(request(m_small, "cuda:0"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QVERIFY(!r->pidHidden);
        QCOMPARE(r->contextSource, std::string("nvml-process"));
        QCOMPARE(r->peakSource, std::string("nvml-process"));
        QCOMPARE(r->peakBytes, 64 * kMiB + 24 * kMiB);
    }

    // A GPU in MIG mode with two instances beside a GPU that is not: CUDA enumerates one compute
    // instance, and no other GPU once a MIG device is enumerated. torch sees one device; the second
    // instance and the other GPU are listed as not visible here, and nothing lands on them.
    void migLayoutAsCudaEnumeratesIt()
    {
        newMachine("8192,4096");
        qputenv("FAKE_MIG_GPU", QByteArray("0"));
        qputenv("FAKE_MIG_INSTANCES", QByteArray("2"));
        qputenv("FAKE_MIG_MIB", QByteArray("2048"));
        const Inventory inv = queryInventory();
        QCOMPARE(inv.cudaCount(), 1);
        QCOMPARE(inv.gpuCount(), 3);
        QCOMPARE(inv.devices[1].id, std::string("cuda:0"));
        QCOMPARE(inv.devices[1].mig, 0);
        QVERIFY2(inv.devices[1].uuid.starts_with("MIG-"), inv.devices[1].uuid.c_str());
        QCOMPARE(inv.devices[2].id, std::string("nvml:0/mig:1"));
        QCOMPARE(inv.devices[3].id, std::string("nvml:1"));
        auto r = testLoad(request(m_small, "cuda:0"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->deviceUuid, inv.devices[1].uuid);
        QCOMPARE(r->timeline.devices, (std::vector<std::string>{"cpu", "cuda:0"}));
        QCOMPARE(r->timeline.maxRise(1), 64 * kMiB + 24 * kMiB);
        const auto cli = test::ckptscope({"testload", m_small.toStdString(), "--device", "cuda:1"});
        QCOMPARE(cli.rc, 2);
        QVERIFY2(cli.err.find("sees 1 GPU") != std::string::npos, cli.err.c_str());

        // Naming the second instance picks it, and still only it.
        qputenv("CUDA_VISIBLE_DEVICES", QByteArray(inv.devices[2].uuid.c_str()));
        const Inventory named = queryInventory();
        QCOMPARE(named.cudaCount(), 1);
        QCOMPARE(named.devices[1].uuid, inv.devices[2].uuid);
        QCOMPARE(named.devices[1].mig, 1);
    }

    // Before R470 a MIG device had no UUID of its own: NVML names it MIG-GPU-<its GPU's uuid>/<gi>/<ci>
    // and libcuda has no cuDeviceGetUuid_v2, so CUDA answers with the GPU's UUID. The instance is
    // still matched (the one CUDA_VISIBLE_DEVICES names, else the first), watched and loaded onto.
    void preR470MigIsMatched()
    {
        newMachine("8192");
        qputenv("CKPTSCOPE_NVML_LIBRARY", QByteArray(FAKE_NVML_R460_PATH));
        qputenv("CKPTSCOPE_CUDA_LIBRARY", QByteArray(FAKE_CUDA_R460_PATH));
        qputenv("FAKE_MIG_GPU", QByteArray("0"));
        qputenv("FAKE_MIG_INSTANCES", QByteArray("2"));
        qputenv("FAKE_MIG_MIB", QByteArray("2048"));
        const Inventory inv = queryInventory();
        QCOMPARE(inv.devices[1].id, std::string("cuda:0"));
        QCOMPARE(inv.devices[1].uuid, std::string("MIG-GPU-01000000-0000-0000-0000-000000000000/1/0"));
        QCOMPARE(inv.devices[1].mig, 0);
        auto r = testLoad(request(m_small, "cuda:0"));
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(r->deviceUuid, inv.devices[1].uuid);
        QCOMPARE(r->contextSource, std::string("nvml-device"));
        QCOMPARE(r->timeline.devices, (std::vector<std::string>{"cpu", "cuda:0"}));
        QCOMPARE(r->timeline.maxRise(1), 64 * kMiB + 24 * kMiB);

        qputenv("CUDA_VISIBLE_DEVICES", QByteArray("MIG-GPU-01000000-0000-0000-0000-000000000000/2/0"));
        const Inventory second = queryInventory();
        QCOMPARE(second.cudaCount(), 1);
        QCOMPARE(second.devices[1].uuid, std::string("MIG-GPU-01000000-0000-0000-0000-000000000000/2/0"));
        QCOMPARE(second.devices[1].mig, 1);
    }

    // Another job's GPU under Slurm's cgroups: NVML counts it, cannot open it, and CUDA does not see
    // it. The command names it apart rather than listing a nameless GPU of 0 B.
    void gpusLeftOutAreNamed()
    {
        newMachine("1024,2048,4096");
        qputenv("FAKE_GPU_NO_ACCESS", QByteArray("1"));
        const auto cli = test::ckptscope({"testload", m_small.toStdString(), "--device", "cuda:1", "--json"});
        QVERIFY2(cli.rc == 0, (cli.err + cli.out).c_str());
        const auto j = nlohmann::json::parse(cli.out);
        QCOMPARE(j["gpus"].size(), std::size_t{3});  // the CPU and the two GPUs this job may open
        QCOMPARE(j["gpus"][2]["nvml_index"].get<int>(), 2);
        QCOMPARE(j["device_uuid"].get<std::string>(), j["gpus"][2]["uuid"].get<std::string>());
        const auto left = j.value("gpus_left_out", std::string());
        QVERIFY2(left.find("GPU 1") != std::string::npos, left.c_str());
    }

    // cuInit can take seconds (many GPUs, persistence mode off): the engine says it is starting, so a
    // client with a short silence limit does not take it for dead.
    void slowStartUpIsNotSilence()
    {
        newMachine("1024");
        qputenv("FAKE_CUDA_INIT_DELAY_US", QByteArray("2500000"));
        auto req = request(m_small, "cuda:0");
        req.silenceTimeout = std::chrono::milliseconds(1200);
        auto r = testLoad(req);
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
    }

    // The live rate inside one large storage: progress within its copy carries the time so far, not
    // the time the previous storage ended at (0 for the first).
    void liveRateInsideALargeStorage()
    {
        newMachine("1024");
        qputenv("CKPTSCOPE_CUDA_BUFFER_KIB", QByteArray("1024"));
        qputenv("FAKE_CUDA_DELAY_US", QByteArray("15000"));  // 48 copies of 1 MiB: 0.7 s
        std::vector<TestloadProgress> seen;
        auto r = testLoad(request(m_big, "cuda:0"), [&](const TestloadProgress& p) { seen.push_back(p); });
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        const auto inside = std::count_if(seen.begin(), seen.end(),
                                          [](const TestloadProgress& p) { return p.bytes > 0 && p.bytes < 48 * kMiB; });
        QVERIFY2(inside >= 3, qPrintable(QString::number(inside)));
        for (const auto& p : seen) {
            if (p.bytes > 0 && p.bytes < 48 * kMiB) {
                QVERIFY2(p.seconds > 0 && p.bytesPerSecond > 0, qPrintable(QString::number(p.seconds)));
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestCudaEngine)
#include "tst_cuda_engine.moc"
