// The command line in-process (streams injected): output shapes, exit codes, one-line errors.
// The JSON shape is guarded by golden files: tests/cli/golden/*.schema lists every key path and
// its JSON type, so a renamed or retyped field fails here before it breaks someone's script.
#include "cli_json.h"
#include "cli_run.h"
#include "python_file.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QStringList>
#include <QTemporaryDir>
#include <QTest>

#include <set>

namespace {

using ckpt::test::ckptscope;
using ckpt::test::schemaLines;

std::string fixture(const char* name)
{
    return std::string(CKPTSCOPE_FIXTURE_DIR) + "/" + name;
}

}  // namespace

class TestCli : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void helpAndVersion();
    void inspectText();
    void sparseLayoutShown();
    void inspectJsonMatchesGolden();
    void quantizersAndMetaTensorsInJson();
    void inspectSeveralFiles();
    void badInputIsOneLineExit2();
    void usageErrorsExit2();
    void severalFilesForCheckAndConvert();
    void quietPrintsOnlyJsonAndErrors();
};

void TestCli::helpAndVersion()
{
    auto r = ckptscope({"--help"});
    QCOMPARE(r.rc, 0);
    QVERIFY(r.out.find("inspect") != std::string::npos);
    r = ckptscope({"--version"});
    QCOMPARE(r.rc, 0);
    QVERIFY(r.out.starts_with("ckptscope "));
    r = ckptscope({"inspect", "--help"});
    QCOMPARE(r.rc, 0);
    QVERIFY(r.out.find("Examples:") != std::string::npos);
    QVERIFY(ckpt::cli::isSubcommand("inspect"));
    QVERIFY(!ckpt::cli::isSubcommand("model.pt"));
}

void TestCli::inspectText()
{
    auto r = ckptscope({"inspect", fixture("ddp_sd_cuda0.pt")});
    QCOMPARE(r.rc, 0);
    QVERIFY2(r.out.find("module.") != std::string::npos, r.out.c_str());
    QVERIFY(r.out.find("cuda:0") != std::string::npos);
    QVERIFY(r.out.find("float32") != std::string::npos);
    QVERIFY(r.out.find("Storage bytes by location") != std::string::npos);
    QVERIFY(r.err.empty());
}

// A sparse COO tensor shows its layout and stored values' count (torch's _nnz()), not a plain
// dense tensor: exotic.pt's `sparse` holds 3 values of a [3, 3] matrix.
void TestCli::sparseLayoutShown()
{
    QProcess py;
    py.start(QStringLiteral(CKPTSCOPE_PYTHON),
             {QStringLiteral("-c"),
              QStringLiteral("import sys, torch; t = torch.load(sys.argv[1])['sparse']; "
                             "print(t.layout, t._nnz())"),
              QString::fromStdString(fixture("exotic.pt"))});
    QVERIFY(py.waitForFinished(120000));
    const QStringList oracle = QString::fromUtf8(py.readAllStandardOutput()).trimmed().split(QLatin1Char(' '));
    QCOMPARE(oracle.value(0), QStringLiteral("torch.sparse_coo"));
    const std::string nnz = oracle.value(1).toStdString();
    auto r = ckptscope({"inspect", fixture("exotic.pt")});
    QCOMPARE(r.rc, 0);
    QVERIFY2(r.out.find("sparse [3, 3], nnz " + nnz) != std::string::npos, r.out.c_str());
    r = ckptscope({"inspect", "--json", fixture("exotic.pt")});
    const auto doc = QJsonDocument::fromJson(QByteArray::fromStdString(r.out)).object();
    for (const auto& t : doc.value(QStringLiteral("tensors")).toArray()) {
        if (t.toObject().value(QStringLiteral("path")).toString() == QStringLiteral("sparse")) {
            QCOMPARE(t.toObject().value(QStringLiteral("layout")).toString(), QStringLiteral("sparse"));
            QCOMPARE(t.toObject().value(QStringLiteral("nnz")).toInteger(), std::stoll(nnz));
        }
    }
}

void TestCli::inspectJsonMatchesGolden()
{
    auto r = ckptscope({"inspect", "--json", fixture("train_ckpt.pt")});
    QCOMPARE(r.rc, 0);
    const auto doc = QJsonDocument::fromJson(QByteArray::fromStdString(r.out)).object();
    QCOMPARE(doc.value(QStringLiteral("schema")).toInt(), 2);
    QCOMPARE(doc.value(QStringLiteral("format")).toString(), QStringLiteral("torch-zip"));
    QVERIFY(doc.value(QStringLiteral("tensors")).toArray().size() > 5);
    QVERIFY(doc.value(QStringLiteral("totals"))
                .toObject()
                .value(QStringLiteral("by_location"))
                .toObject()
                .contains(QStringLiteral("cuda:0")));

    const QString goldenPath = QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/cli/golden/inspect.schema");
    const QStringList got = schemaLines(r.out);
    if (qEnvironmentVariableIsSet("CKPTSCOPE_UPDATE_GOLDEN")) {
        QFile f(goldenPath);
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(got.join(QLatin1Char('\n')).toUtf8() + '\n');
    }
    QFile f(goldenPath);
    QVERIFY2(f.open(QIODevice::ReadOnly), "golden file missing (run with CKPTSCOPE_UPDATE_GOLDEN=1)");
    const QStringList want = QString::fromUtf8(f.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    for (const auto& line : want) {
        QVERIFY2(got.contains(line), qPrintable(QStringLiteral("JSON lost: ") + line));
    }
    for (const auto& line : got) {
        QVERIFY2(want.contains(line), qPrintable(QStringLiteral("JSON gained (update the golden file): ") + line));
    }
}

// Issue 40: a quantized tensor's scale and zero point (per tensor, per channel) and a meta tensor's
// missing data, in inspect --json as torch itself reports them.
void TestCli::quantizersAndMetaTensorsInJson()
{
    QTemporaryDir dir;
    const QString file = dir.filePath(QStringLiteral("q.pt"));
    const QString wrote = ckpt::test::writeWithPython(
        QStringLiteral("import sys, torch\n"
                       "x = torch.linspace(-1, 1, 12).reshape(3, 4)\n"
                       "torch.save({'q': torch.quantize_per_tensor(x, 0.25, 3, torch.quint8),\n"
                       "            'qc': torch.quantize_per_channel(x, torch.tensor([0.5, 0.125, 0.25], "
                       "dtype=torch.float64), torch.tensor([1, 0, -1]), 0, torch.qint8),\n"
                       "            'm': torch.empty(64, 64, device='meta'), 'x': x}, sys.argv[1])\n"),
        file);
    QVERIFY2(wrote.isEmpty(), qPrintable(wrote));
    const auto r = ckptscope({"inspect", "--json", file.toStdString()});
    QCOMPARE(r.rc, 0);
    const auto doc = QJsonDocument::fromJson(QByteArray::fromStdString(r.out)).object();
    QJsonObject byPath;
    for (const auto& t : doc.value(QStringLiteral("tensors")).toArray()) {
        byPath.insert(t.toObject().value(QStringLiteral("path")).toString(), t);
    }
    const auto q = byPath.value(QStringLiteral("q")).toObject().value(QStringLiteral("quantizer")).toObject();
    QCOMPARE(q.value(QStringLiteral("scheme")).toString(), QStringLiteral("per_tensor_affine"));
    QCOMPARE(q.value(QStringLiteral("scale")).toDouble(), 0.25);
    QCOMPARE(q.value(QStringLiteral("zero_point")).toInt(), 3);
    const auto qc = byPath.value(QStringLiteral("qc")).toObject().value(QStringLiteral("quantizer")).toObject();
    QCOMPARE(qc.value(QStringLiteral("axis")).toInt(), 0);
    const auto scales = qc.value(QStringLiteral("scales")).toObject();
    QCOMPARE(scales.value(QStringLiteral("count")).toInt(), 3);
    QCOMPARE(scales.value(QStringLiteral("first")).toArray(), (QJsonArray{0.5, 0.125, 0.25}));
    QCOMPARE(scales.value(QStringLiteral("min")).toDouble(), 0.125);
    QCOMPARE(qc.value(QStringLiteral("zero_points")).toObject().value(QStringLiteral("first")).toArray(),
             (QJsonArray{1.0, 0.0, -1.0}));
    const auto m = byPath.value(QStringLiteral("m")).toObject();
    QCOMPARE(m.value(QStringLiteral("has_data")).toBool(true), false);
    QVERIFY(!byPath.value(QStringLiteral("x")).toObject().contains(QStringLiteral("has_data")));
    // totals count what the file holds: 0 for the meta tensor
    const auto totals = doc.value(QStringLiteral("totals")).toObject();
    QCOMPARE(totals.value(QStringLiteral("tensor_bytes")).toInteger(), 12 + 12 + 48);
    const auto text = ckptscope({"inspect", file.toStdString()});
    QVERIFY2(text.out.find("scale 0.25, zero point 3") != std::string::npos, text.out.c_str());
    QVERIFY(text.out.find("no data") != std::string::npos);
}

void TestCli::inspectSeveralFiles()
{
    auto r = ckptscope({"inspect", "--json", fixture("plain_sd.pt"), fixture("ddp_sd.pt")});
    QCOMPARE(r.rc, 0);
    const auto doc = QJsonDocument::fromJson(QByteArray::fromStdString(r.out)).object();
    QCOMPARE(doc.value(QStringLiteral("files")).toArray().size(), 2);
    r = ckptscope({"inspect", "--json", std::string(CKPTSCOPE_FIXTURE_DIR) + "/*_sd.pt"});
    QCOMPARE(r.rc, 0);
    QVERIFY(QJsonDocument::fromJson(QByteArray::fromStdString(r.out))
                .object()
                .value(QStringLiteral("files"))
                .toArray()
                .size() >= 3);
}

void TestCli::badInputIsOneLineExit2()
{
    const std::string lfs = fixture("bad/lfs_pointer.pt");
    auto r = ckptscope({"inspect", lfs});
    QCOMPARE(r.rc, 2);
    QVERIFY(r.out.empty());
    QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), 1L);
    QVERIFY2(r.err.find(lfs) != std::string::npos, r.err.c_str());
    r = ckptscope({"inspect", "/nonexistent/model.pt"});
    QCOMPARE(r.rc, 2);
    QVERIFY(r.err.find("cannot open") != std::string::npos);

    // A picture picked by mistake is named as one; a 3-byte file is too short to be anything.
    r = ckptscope({"inspect", CKPTSCOPE_SOURCE_DIR "/docs/screenshots/compare.png"});
    QCOMPARE(r.rc, 2);
    QVERIFY2(r.err.find("is a PNG image, not a PyTorch checkpoint") != std::string::npos, r.err.c_str());
    QTemporaryDir dir;
    const std::string tiny = dir.filePath(QStringLiteral("tiny.pt")).toStdString();
    {
        QFile f(QString::fromStdString(tiny));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("\x80\x02}", 3);  // the first bytes torch.save's legacy stream writes
    }
    r = ckptscope({"inspect", tiny});
    QCOMPARE(r.rc, 2);
    QVERIFY2(r.err.find("is 3 bytes, shorter than any checkpoint: truncated") != std::string::npos, r.err.c_str());
}

void TestCli::usageErrorsExit2()
{
    QCOMPARE(ckptscope({"inspect"}).rc, 2);
    QCOMPARE(ckptscope({"inspect", "--bogus", fixture("plain_sd.pt")}).rc, 2);
}

void TestCli::severalFilesForCheckAndConvert()
{
    auto r = ckptscope({"check", "--json", fixture("ddp_sd.pt"), fixture("plain_sd.pt")});
    QCOMPARE(r.rc, 1);  // the DDP file has a warning: the worst exit code wins
    const auto files =
        QJsonDocument::fromJson(QByteArray::fromStdString(r.out)).object().value(QStringLiteral("files")).toArray();
    QCOMPARE(files.size(), 2);
    QVERIFY(!files[0].toObject().value(QStringLiteral("findings")).toArray().isEmpty());
    QVERIFY(files[1].toObject().value(QStringLiteral("findings")).toArray().isEmpty());

    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string outDir = dir.path().toStdString();
    r = ckptscope({"convert", fixture("ddp_sd.pt"), fixture("compile_sd.pt"), "-o", outDir, "--single-card"});
    QCOMPARE(r.rc, 0);
    for (const char* name : {"ddp_sd.pt", "compile_sd.pt"}) {
        auto back = ckptscope({"inspect", "--json", outDir + "/" + name});
        QCOMPARE(back.rc, 0);
        QVERIFY2(back.out.find("module.") == std::string::npos && back.out.find("_orig_mod.") == std::string::npos,
                 name);
    }
    // Several inputs need a directory to write into.
    r = ckptscope({"convert", fixture("ddp_sd.pt"), fixture("compile_sd.pt"), "-o", outDir + "/one.pt"});
    QCOMPARE(r.rc, 2);

    // An option's value is never taken for an input: which options take one is read from the
    // commands' own definitions (--header's value used to be a third input).
    for (const char* cmd : {"check", "convert"}) {
        std::vector<std::string> args{
            cmd, fixture("ddp_sd.pt"), "--header", "Authorization: Bearer x", fixture("plain_sd.pt"), "--json"};
        if (std::string(cmd) == "convert") {
            args.insert(args.end(), {"--dry-run", "-o", outDir});
        }
        r = ckptscope(args);
        QVERIFY2(r.rc != 2, (std::string(cmd) + ": " + r.err).c_str());
        QCOMPARE(QJsonDocument::fromJson(QByteArray::fromStdString(r.out))
                     .object()
                     .value(QStringLiteral("files"))
                     .toArray()
                     .size(),
                 2);
    }
    // --help names FILE... for both.
    for (const char* cmd : {"check", "convert"}) {
        r = ckptscope({cmd, "--help"});
        QVERIFY2(r.out.find("Usage: ckptscope " + std::string(cmd) + " [OPTIONS] FILE...\n") != std::string::npos,
                 r.out.c_str());
    }
}

void TestCli::quietPrintsOnlyJsonAndErrors()
{
    auto r = ckptscope({"inspect", "--quiet", fixture("plain_sd.pt")});
    QCOMPARE(r.rc, 0);
    QVERIFY(r.out.empty());
    r = ckptscope({"inspect", "-q", "--json", fixture("plain_sd.pt")});
    QVERIFY(!QJsonDocument::fromJson(QByteArray::fromStdString(r.out)).isNull());
    r = ckptscope({"inspect", "-q", fixture("bad/lfs_pointer.pt")});
    QCOMPARE(r.rc, 2);
    QVERIFY(r.out.empty());
    QVERIFY(!r.err.empty());
}

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
