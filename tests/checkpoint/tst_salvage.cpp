// Truncated torch.save archives (issue 17): a real PyTorch 1.13 file cut inside a tensor record,
// inside data.pkl, inside the central directory and just before the end record. What opens is
// read from the local headers; the lost tensors are exactly those whose records the cut reached;
// check names the cut (truncated-archive); convert refuses, and --salvage writes what survived,
// which torch.load reads back with the surviving tensors' values.
#include "archive/zip.h"
#include "checkpoint/checkpoint.h"
#include "diagnose/diagnose.h"

#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <set>

using namespace ckpt;

namespace {

QByteArray readAll(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

bool writeAll(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(bytes) == bytes.size();
}

struct Run {
    int rc = -1;
    QByteArray out;
    QByteArray err;
};

Run run(const QString& program, const QStringList& args)
{
    QProcess p;
    p.start(program, args);
    p.waitForFinished(120000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

Run python(const QString& code, const QStringList& args)
{
    return run(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), code} + args);
}

const QString kCli = QStringLiteral(CKPTSCOPE_BINARY_DIR "/app/ckptscope");

const diagnose::Finding* findingOf(const std::vector<diagnose::Finding>& fs, const std::string& code)
{
    for (const auto& f : fs) {
        if (f.code == code) {
            return &f;
        }
    }
    return nullptr;
}

}  // namespace

class TestSalvage : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void cuts_data();
    void cuts();
    void insideDataPkl();
    void convertRefusesAndSalvages();
    void corpusFile();

private:
    QString path(const QString& name) const { return dir_.filePath(name); }
    QTemporaryDir dir_;
    QByteArray full_;
    std::vector<archive::ZipRecord> records_;
    std::uint64_t directoryAt_ = 0;
};

void TestSalvage::initTestCase()
{
    QVERIFY(dir_.isValid());
    const Run r = python(QStringLiteral("import sys, torch\n"
                                        "torch.manual_seed(0)\n"
                                        "torch.save({'w%d' % i: torch.randn(64 * (i + 1)) for i in range(6)}, "
                                        "sys.argv[1])\n"),
                         {path(QStringLiteral("full.pt"))});
    QVERIFY2(r.rc == 0, r.err.constData());
    full_ = readAll(path(QStringLiteral("full.pt")));
    const Bytes bytes(reinterpret_cast<const std::byte*>(full_.constData()), std::size_t(full_.size()));  // NOLINT
    auto z = archive::ZipReader::parse(bytes);
    QVERIFY(z.ok());
    records_ = z->records();
    const auto& last = records_.back();
    directoryAt_ = last.dataOffset + last.compressedSize + (last.size == 0 ? 0 : 16);
}

void TestSalvage::cuts_data()
{
    QTest::addColumn<qint64>("cut");
    QTest::addColumn<int>("lost");  // tensors whose records the cut reaches
    // torch.save writes data.pkl, then data/0.. in key order, then version.
    const auto& w3 = records_[4];  // folder/data/3
    QVERIFY(w3.name.ends_with("/data/3"));
    QTest::newRow("inside data/3") << qint64(w3.dataOffset + w3.size / 2) << 3;
    QTest::newRow("data/3's descriptor") << qint64(w3.dataOffset + w3.size + 8) << 3;
    QTest::newRow("after data/5") << qint64(records_[6].dataOffset + records_[6].size + 16) << 0;
    QTest::newRow("inside the central directory") << qint64(directoryAt_ + 30) << 0;
    QTest::newRow("just before the end record") << qint64(full_.size() - 22) << 0;
}

void TestSalvage::cuts()
{
    QFETCH(qint64, cut);
    QFETCH(int, lost);
    const QString file = path(QStringLiteral("cut_%1.pt").arg(cut));
    QVERIFY(writeAll(file, full_.left(cut)));
    // The oracle: torch.load refuses the whole file.
    const Run t = python(QStringLiteral("import sys, torch\n"
                                        "try:\n    torch.load(sys.argv[1])\nexcept Exception as e:\n    print(e)\n"),
                         {file});
    const QByteArray torchSays =
        lost > 0 ? QByteArray(archive::kTruncatedTorchError.data()) : QByteArray("[Errno 22] Invalid argument");
    QVERIFY2(t.out.contains(torchSays), t.out.constData());

    auto ck = openCheckpoint(file.toStdString());
    QVERIFY2(ck.ok(), ck.ok() ? "" : ck.error().describe().c_str());
    const Checkpoint& c = **ck;
    QVERIFY(c.truncation.salvaged);
    QCOMPARE(c.tensors.size(), 6U);
    std::set<std::string> missing;
    for (const auto& te : c.tensors) {
        const bool whole = c.storages[te.storage].present;
        // w0..w5 use storages 0..5 in that order: the first 6 - lost survive.
        const int index = std::stoi(te.path.substr(1));
        QCOMPARE(whole, index < 6 - lost);
        if (!whole) {
            missing.insert(te.path);
            std::vector<std::byte> scratch;
            QVERIFY(!c.storageData(te.storage, scratch).ok());  // unreadable, never zeros
        }
    }
    auto findings = diagnose::check(c);
    QVERIFY(findings.ok());
    const auto* f = findingOf(*findings, "truncated-archive");
    QVERIFY(f != nullptr);
    QCOMPARE(f->severity, diagnose::Severity::Error);
    QVERIFY(f->title.find("byte " + std::to_string(cut)) != std::string::npos);
    QCOMPARE(std::set<std::string>(f->paths.begin(), f->paths.end()), missing);
    QVERIFY(f->detail.find(torchSays.toStdString()) != std::string::npos);
    QVERIFY(f->detail.find("download or copy the file again") != std::string::npos);
    QVERIFY(findingOf(*findings, "truncated-or-missing-storage") == nullptr);

    const Run cli = run(kCli, {QStringLiteral("check"), file});
    QCOMPARE(cli.rc, 1);
    QVERIFY(cli.out.contains("ERROR [truncated-archive]"));
}

void TestSalvage::insideDataPkl()
{
    const auto& pkl = records_.front();
    QVERIFY(pkl.name.ends_with("/data.pkl"));
    const QString file = path(QStringLiteral("cut_pkl.pt"));
    QVERIFY(writeAll(file, full_.left(qint64(pkl.dataOffset + pkl.size / 2))));
    auto ck = openCheckpoint(file.toStdString());
    QVERIFY(!ck.ok());
    QCOMPARE(ck.error().code, ErrorCode::Truncated);
    QVERIFY(ck.error().message.find("data.pkl") != std::string::npos);
    for (const char* cmd : {"inspect", "check"}) {
        const Run r = run(kCli, {QLatin1String(cmd), file});
        QCOMPARE(r.rc, 2);
        QCOMPARE(r.err.count('\n'), 1);
        QVERIFY(r.err.contains("truncated"));
    }
}

void TestSalvage::convertRefusesAndSalvages()
{
    const auto& w3 = records_[4];
    const QString file = path(QStringLiteral("cut_convert.pt"));
    QVERIFY(writeAll(file, full_.left(qint64(w3.dataOffset + w3.size / 2))));
    const QString out = path(QStringLiteral("salvaged.pt"));

    const Run refused = run(kCli, {QStringLiteral("convert"), file, QStringLiteral("-o"), out});
    QCOMPARE(refused.rc, 2);
    QCOMPARE(refused.err.count('\n'), 1);
    QVERIFY(refused.err.contains("--salvage"));
    QVERIFY(!QFile::exists(out));

    const Run salvaged =
        run(kCli, {QStringLiteral("convert"), file, QStringLiteral("-o"), out, QStringLiteral("--salvage")});
    QVERIFY2(salvaged.rc == 0, salvaged.err.constData());
    for (const char* lost : {"w3", "w4", "w5"}) {
        QVERIFY(salvaged.out.contains(QByteArray("drop ") + lost) || salvaged.out.contains(QByteArray(lost)));
    }
    QVERIFY(salvaged.out.contains("3 tensors were lost with its end: w3, w4, w5"));
    // torch reads the output back: the survivors with their values, the lost ones gone.
    const Run check = python(QStringLiteral("import sys, torch\n"
                                            "a = torch.load(sys.argv[1]); b = torch.load(sys.argv[2])\n"
                                            "print(sorted(b))\n"
                                            "print(all(torch.equal(a[k], b[k]) for k in b))\n"),
                             {path(QStringLiteral("full.pt")), out});
    QVERIFY2(check.rc == 0, check.err.constData());
    QCOMPARE(check.out, QByteArray("['w0', 'w1', 'w2']\nTrue\n"));
}

void TestSalvage::corpusFile()
{
    const QString corpus =
        qEnvironmentVariable("CKPTSCOPE_CORPUS_DIR", QStringLiteral(CKPTSCOPE_SOURCE_DIR "/../shared/corpus"));
    const QString file = corpus + QStringLiteral("/OzanD09__tableTennisBallCollector__yolov8n.pt");
    if (!QFile::exists(file)) {
        QSKIP("no shared corpus");
    }
    auto ck = openCheckpoint(file.toStdString());
    QVERIFY2(ck.ok(), ck.ok() ? "" : ck.error().describe().c_str());
    const Checkpoint& c = **ck;
    QVERIFY(c.truncation.salvaged);
    QVERIFY(c.find("model").valid());
    std::size_t lost = 0;
    for (const auto& s : c.storages) {
        lost += s.present ? 0 : 1;
    }
    QVERIFY(lost > 0 && lost < c.storages.size());
    auto findings = diagnose::check(c);
    QVERIFY(findings.ok());
    const auto* f = findingOf(*findings, "truncated-archive");
    QVERIFY(f != nullptr);
    QVERIFY(f->title.find("byte 2170880") != std::string::npos);
}

QTEST_GUILESS_MAIN(TestSalvage)
#include "tst_salvage.moc"
