// Test-loads through the real LibTorch helper: every fixture onto the CPU, every storage's bytes
// equal to the file's and each tensor's materialised C-order bytes equal to what PyTorch itself
// loaded (the oracle's sha256); cuda:0 on a CPU LibTorch fails with the rebuild instructions; and
// `ckptscope testload`'s exit codes and JSON.
#include "checkpoint/checkpoint.h"
#include "cli/cmd_testload.h"
#include "cli_run.h"
#include "device/testload.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <cstdlib>
#include <map>

using namespace ckpt::device;

namespace {

QJsonObject readJson(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    return QJsonDocument::fromJson(f.readAll()).object();
}

QString fixture(const char* name)
{
    return QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/") + QString::fromLatin1(name);
}

using ckpt::test::CliRun;

CliRun runCli(const std::vector<std::string>& args)
{
    return ckpt::test::capture(ckpt::cli::cmdTestload, args);
}

}  // namespace

class TestTestloadTorch : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        qputenv("CKPTSCOPE_TORCH_HELPER", QByteArray(CKPTSCOPE_TEST_HELPER));
        qputenv("CKPTSCOPE_NVML_LIBRARY", QByteArray("/nonexistent/libnvidia-ml.so.1"));
        QVERIFY2(QFile::exists(fixture("manifest.json")), "fixtures not generated");
    }

    void everyFixtureLoadsOnCpuWithTorchsBytes_data()
    {
        QTest::addColumn<QString>("file");
        const QJsonArray files = readJson(fixture("manifest.json")).value(QStringLiteral("files")).toArray();
        QVERIFY(!files.isEmpty());
        for (const auto& f : files) {
            const QString name = f.toString();
            QTest::newRow(qPrintable(name)) << name;
        }
    }
    void everyFixtureLoadsOnCpuWithTorchsBytes()
    {
        QFETCH(QString, file);
        const QString path = QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/") + file;
        const QString oraclePath = QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/") + QFileInfo(file).completeBaseName() +
                                   QStringLiteral(".oracle.json");
        const QJsonObject oracle = readJson(oraclePath);
        QVERIFY2(!oracle.isEmpty(), qPrintable(oraclePath));

        auto ck = ckpt::openCheckpoint(path.toStdString());
        QVERIFY2(ck, ck ? "" : ck.error().describe().c_str());
        TestloadRequest req;
        req.path = path.toStdString();
        req.device = "cpu";
        req.verify = true;
        req.fileStorageSha256 = ckpt::cli::fileStorageHasher(*ck);
        auto r = testLoad(req);
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QCOMPARE(QString::fromStdString(r->device), QStringLiteral("cpu"));
        QCOMPARE(QString::fromStdString(r->peakSource), QStringLiteral("rss-anon"));
        QCOMPARE(r->storageChecks.size(), static_cast<std::size_t>(r->storagesLoaded));
        for (const auto& c : r->storageChecks) {
            QVERIFY2(c.matchesFile, c.storage.c_str());
        }

        std::map<std::string, std::string> got;
        for (const auto& c : r->checks) {
            got[c.path] = c.sha256;
        }
        std::size_t placeable = 0;
        std::size_t compared = 0;
        std::size_t hashed = 0;  // the oracle has no C-order bytes for quantized tensors
        for (const auto& v : oracle.value(QStringLiteral("tensors")).toArray()) {
            const QJsonObject t = v.toObject();
            const QString form = t.value(QStringLiteral("form")).toString();
            if (form != QStringLiteral("strided") && form != QStringLiteral("quantized")) {
                continue;
            }
            ++placeable;
            const std::string tp = t.value(QStringLiteral("path")).toString().toStdString();
            auto it = got.find(tp);
            QVERIFY2(it != got.end(), ("not materialised: " + tp).c_str());
            const bool expanded =
                t.value(QStringLiteral("nbytes")).toDouble() > t.value(QStringLiteral("storage_nbytes")).toDouble();
            QCOMPARE(it->second.empty(), expanded);  // only views bigger than their storage go unhashed
            if (t.value(QStringLiteral("sha256")).isString() && !expanded) {
                ++hashed;
                QCOMPARE(QString::fromStdString(it->second), t.value(QStringLiteral("sha256")).toString());
                ++compared;
            }
        }
        QCOMPARE(r->tensorsLoaded, static_cast<std::uint64_t>(placeable));
        QCOMPARE(r->checks.size(), placeable);
        QCOMPARE(compared, hashed);
        if (placeable > 0) {
            QVERIFY(r->storagesLoaded > 0);
        }
    }

    void selectLoadsOnlyThatSubtree()
    {
        TestloadRequest req;
        req.path = fixture("train_ckpt.pt").toStdString();
        req.select = "optimizer";
        req.verify = true;
        auto r = testLoad(req);
        QVERIFY2(r, r ? "" : r.error().describe().c_str());
        QVERIFY(r->tensorsLoaded > 0);
        for (const auto& c : r->checks) {
            QVERIFY2(c.path.rfind("optimizer/", 0) == 0, c.path.c_str());
        }
        req.select = "no/such/key";
        auto none = testLoad(req);
        QVERIFY(!none);
        QCOMPARE(none.error().code, ckpt::ErrorCode::Usage);
    }

    void cudaOnACpuLibTorchSaysHowToRebuild()
    {
        TestloadRequest req;
        req.path = fixture("plain_sd.pt").toStdString();
        req.device = "cuda:0";
        req.engine = Engine::Torch;  // Auto would pick the CUDA engine for cuda:N
        auto r = testLoad(req);
        QVERIFY(!r);
        QCOMPARE(r.error().code, ckpt::ErrorCode::DeviceUnavailable);
        const QString msg = QString::fromStdString(r.error().message);
        QVERIFY2(msg.contains(QStringLiteral("built against a LibTorch without CUDA")), qPrintable(msg));
        QVERIFY2(msg.contains(QStringLiteral("-DCKPTSCOPE_WITH_CUDA=ON")), qPrintable(msg));
    }

    void unreadableFileIsTheFilesError()
    {
        TestloadRequest req;
        req.path = fixture("bad/does-not-exist.pt").toStdString();
        auto r = testLoad(req);
        QVERIFY(!r);
        QCOMPARE(ckpt::exitCodeFor(r.error().code), 2);
    }

    void cliJsonAndExitCodes()
    {
        const std::string pt = fixture("plain_sd.pt").toStdString();
        const CliRun ok = runCli({pt, "--device", "cpu", "--json", "--interval-ms", "5"});
        QVERIFY2(ok.rc == 0, ok.err.c_str());
        const QJsonObject j = QJsonDocument::fromJson(QByteArray::fromStdString(ok.out)).object();
        for (const char* key : {"device", "tensors_loaded", "bytes", "seconds", "gb_per_s", "peak_bytes",
                                "other_devices_touched", "timeline"}) {
            QVERIFY2(j.contains(QString::fromLatin1(key)), key);
        }
        QCOMPARE(j.value(QStringLiteral("device")).toString(), QStringLiteral("cpu"));
        QVERIFY(j.value(QStringLiteral("tensors_loaded")).toInt() > 0);
        QCOMPARE(j.value(QStringLiteral("other_devices_touched")).toBool(), false);
        const QJsonObject tl = j.value(QStringLiteral("timeline")).toObject();
        QCOMPARE(tl.value(QStringLiteral("devices")).toArray().size(), 1);
        QVERIFY(tl.value(QStringLiteral("samples")).toArray().size() >= 2);
        QVERIFY(j.value(QStringLiteral("gpu_note")).toString().contains(QStringLiteral("NVML")));

        const CliRun text = runCli({pt});
        QCOMPARE(text.rc, 0);
        QVERIFY2(QString::fromStdString(text.out).contains(QStringLiteral("onto cpu")), text.out.c_str());

        const CliRun cuda = runCli({pt, "--device", "cuda:0", "--engine", "torch"});
        QCOMPARE(cuda.rc, 2);  // no usable device is bad input, as for the CUDA engine
        QVERIFY2(QString::fromStdString(cuda.err).contains(QStringLiteral("without CUDA")), cuda.err.c_str());
        QCOMPARE(static_cast<int>(std::count(cuda.err.begin(), cuda.err.end(), '\n')), 1);

        QCOMPARE(runCli({pt, "--device", "gpu"}).rc, 2);
        QCOMPARE(runCli({fixture("bad/does-not-exist.pt").toStdString()}).rc, 2);
        QCOMPARE(runCli({pt, "--select", "nope"}).rc, 2);
        QCOMPARE(runCli({}).rc, 2);

        // cuda3.pt was saved from cuda:3: plain torch.load fails here, and the CPU test-load works.
        const CliRun cmp = runCli({fixture("cuda3.pt").toStdString(), "--compare-torch-load", "--json"});
        QCOMPARE(cmp.rc, 0);
        const QJsonObject c = QJsonDocument::fromJson(QByteArray::fromStdString(cmp.out)).object();
        const QJsonObject tl2 = c.value(QStringLiteral("torch_load")).toObject();
        QCOMPARE(tl2.value(QStringLiteral("would_fail")).toBool(), true);
    }

    void missingHelperIsClear()
    {
        qputenv("CKPTSCOPE_TORCH_HELPER", QByteArray("/nonexistent/helper"));
        const CliRun r = runCli({fixture("plain_sd.pt").toStdString()});
        qputenv("CKPTSCOPE_TORCH_HELPER", QByteArray(CKPTSCOPE_TEST_HELPER));
        QCOMPARE(r.rc, 1);
        QVERIFY2(QString::fromStdString(r.err).contains(QStringLiteral("/nonexistent/helper")), r.err.c_str());
    }
};

QTEST_GUILESS_MAIN(TestTestloadTorch)
#include "tst_testload_torch.moc"
