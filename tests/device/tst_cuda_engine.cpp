// The CUDA engine through the test-load client, on a fake NVIDIA driver (fake_cuda.c and
// fake_nvml.c sharing FAKE_GPU_STATE): the copy path with its bytes checked, out of memory in the
// middle of a load, two devices where nothing lands on the other, no driver, cancel mid-load, and
// the DDP replay's bookkeeping. Each test gets a fresh fake machine, whose copies are asynchronous
// (a staging buffer refilled too early shows in the hashes), and the engine fills its staging
// buffers with four host threads unless a test says otherwise.
#include "device/ddp_replay.h"
#include "device/nvml.h"
#include "device/sha256.h"
#include "device/testload.h"

#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cstdlib>
#include <thread>

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

}  // namespace

class TestCudaEngine : public QObject {
    Q_OBJECT

    QTemporaryDir m_files;
    QString m_small;  // 3 x 8 MiB
    QString m_many;   // 40 x 1 MiB
    QString m_odd;    // random bytes, odd sizes (writeOddSizes)
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
        qunsetenv("FAKE_CUDA_DELAY_US");
        qunsetenv("FAKE_CUDA_NO_DEVICE");
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
        QVERIFY(!m_small.isEmpty() && !m_many.isEmpty() && !m_odd.isEmpty());
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
        r = resultOf("0", "1000000");  // at least one thread, at most 64 MiB a buffer
        QCOMPARE(r.value(QStringLiteral("host_threads")).toInt(), 1);
        QCOMPARE(r.value(QStringLiteral("staging_bytes")).toInteger(), 3 * 64 * 1024 * 1024);
        r = resultOf("lots", "");  // not a number: the defaults
        QVERIFY(r.value(QStringLiteral("host_threads")).toInt() >= 1);
        QCOMPARE(r.value(QStringLiteral("staging_bytes")).toInteger(), 3 * 64 * 1024 * 1024);
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
};

QTEST_GUILESS_MAIN(TestCudaEngine)
#include "tst_cuda_engine.moc"
