// What ckptscope says of files only PyTorch 2.x writes (gen_torch2_values.py, run in the PyTorch 2.x
// root): dtypes saved through an UntypedStorage (uint16/32/64, float8, complex32, bits16), whose
// storage counts bytes while their views step in their own element size. Every number is held
// against what torch 2.x itself says (oracle.json), and every output is loaded back by torch 2.x.
#include "checkpoint/checkpoint.h"
#include "cli_json.h"
#include "diagnose/values.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

namespace {

using ckpt::test::ckptscope;
using ckpt::test::CliRun;
using ckpt::test::findingCodes;
using ckpt::test::jsonOf;

std::string fixture(const char* name)
{
    return std::string(CKPTSCOPE_TORCH2_VALUES_DIR "/") + name;
}

QJsonObject oracleOf(const char* file)
{
    QFile f(QStringLiteral(CKPTSCOPE_TORCH2_VALUES_DIR "/oracle.json"));
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    return QJsonDocument::fromJson(f.readAll())
        .object()
        .value(QString::fromLatin1(file))
        .toObject()
        .value(QStringLiteral("tensors"))
        .toObject();
}

// torch 2.x loads both (weights_only, its default) to the same keys, dtypes, shapes and bytes;
// "equal" or what differs.
QString torchCompare(const std::string& a, const std::string& b)
{
    QProcess p;
    p.setWorkingDirectory(QStringLiteral(CKPTSCOPE_SOURCE_DIR));
    // The root's runner of this tree, or another checkout's ($CKPTSCOPE_TORCH2_PYTHON).
    p.start(qEnvironmentVariable("CKPTSCOPE_TORCH2_PYTHON", QStringLiteral(CKPTSCOPE_TORCH2_PYTHON)),
            {QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/torch2/gen_torch2_values.py"), QStringLiteral("compare"),
             QString::fromStdString(a), QString::fromStdString(b)});
    if (!p.waitForFinished(300000)) {
        return QStringLiteral("torch did not finish: ") + p.errorString();
    }
    const QString out = QString::fromUtf8(p.readAllStandardOutput()).trimmed();
    return p.exitCode() == 0 ? out : out + QString::fromUtf8(p.readAllStandardError()).right(600);
}

// `inspect --json`'s storages by key.
QHash<QString, QJsonObject> storagesOf(const QJsonObject& inspect)
{
    QHash<QString, QJsonObject> out;
    for (const auto& s : inspect.value(QStringLiteral("storages")).toArray()) {
        out.insert(s.toObject().value(QStringLiteral("key")).toString(), s.toObject());
    }
    return out;
}

}  // namespace

class TestTorch2Values : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        if (!QFile::exists(QStringLiteral(CKPTSCOPE_TORCH2_VALUES_DIR "/manifest.json"))) {
            QSKIP("no PyTorch 2.x fixtures (generate_torch2_values did not run: scripts/modern-torch.sh makes the "
                  "root): not run");
        }
        QVERIFY(dir_.isValid());
    }

    // Every storage reaches exactly the bytes torch says its tensors view, counted in the tensor's
    // element size; a file of whole tensors has no finding at all.
    void reachIsInTheTensorsElementSize_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("whole tensors") << QStringLiteral("untyped_dtypes.pt");
        QTest::newRow("views") << QStringLiteral("untyped_views.pt");
    }
    void reachIsInTheTensorsElementSize()
    {
        QFETCH(QString, file);
        const QByteArray name = file.toLatin1();
        const QJsonObject oracle = oracleOf(name.constData());
        QVERIFY(!oracle.isEmpty());
        const CliRun r = ckptscope({"inspect", "--json", fixture(name.constData())});
        QCOMPARE(r.rc, 0);
        const QJsonObject doc = jsonOf(r);
        const auto storages = storagesOf(doc);
        const auto tensors = doc.value(QStringLiteral("tensors")).toArray();
        QCOMPARE(tensors.size(), oracle.size());
        for (const auto& v : tensors) {
            const QJsonObject t = v.toObject();
            const QString path = t.value(QStringLiteral("path")).toString();
            const QJsonObject want = oracle.value(path).toObject();
            QCOMPARE(t.value(QStringLiteral("dtype")).toString(), want.value(QStringLiteral("dtype")).toString());
            const QJsonObject s = storages.value(t.value(QStringLiteral("storage")).toString());
            const auto reached = want.value(QStringLiteral("reached")).toArray();
            QCOMPARE(s.value(QStringLiteral("nbytes")).toInteger(),
                     want.value(QStringLiteral("storage_nbytes")).toInteger());
            QVERIFY2(s.value(QStringLiteral("reached_bytes")).toInteger() ==
                         reached.at(1).toInteger() - reached.at(0).toInteger(),
                     qPrintable(path));
        }
    }

    // A clean file of such dtypes is clean: `check` exits 0 with no storage-bloat.
    void cleanFileChecksClean()
    {
        const CliRun r = ckptscope({"check", "--json", fixture("untyped_dtypes.pt")});
        QVERIFY2(r.rc == 0, r.out.c_str());
        QVERIFY(findingCodes(r).isEmpty());
    }

    // Real waste is counted in bytes ("views 24 bytes of a 80 bytes storage"), `--compact` removes it
    // (the output checks clean and each storage holds what its view reaches), and torch 2.x loads the
    // output to the same values under weights_only.
    void compactRemovesRealWaste()
    {
        const QJsonObject oracle = oracleOf("untyped_views.pt");
        const CliRun check = ckptscope({"check", fixture("untyped_views.pt")});
        QCOMPARE(check.rc, 1);
        const QJsonObject slice = oracle.value(QStringLiteral("u64_slice")).toObject();
        const auto reached = slice.value(QStringLiteral("reached")).toArray();
        const std::string views =
            "views " + std::to_string(reached.at(1).toInteger() - reached.at(0).toInteger()) + " bytes of a " +
            std::to_string(slice.value(QStringLiteral("storage_nbytes")).toInteger()) + " bytes storage";
        QVERIFY2(check.out.find(views) != std::string::npos, check.out.c_str());

        const std::string out = dir_.filePath(QStringLiteral("views.compact.pt")).toStdString();
        const CliRun convert = ckptscope({"convert", fixture("untyped_views.pt"), "-o", out, "--compact"});
        QVERIFY2(convert.rc == 0, convert.err.c_str());
        QVERIFY2(convert.out.find("compact u64_slice") != std::string::npos, convert.out.c_str());
        const CliRun again = ckptscope({"check", "--json", out});
        QVERIFY2(again.rc == 0, again.out.c_str());
        const CliRun inspect = ckptscope({"inspect", "--json", out});
        for (const auto& s : storagesOf(jsonOf(inspect))) {
            QCOMPARE(s.value(QStringLiteral("reached_bytes")).toInteger(),
                     s.value(QStringLiteral("nbytes")).toInteger());
        }
        QCOMPARE(torchCompare(fixture("untyped_views.pt"), out), QStringLiteral("equal"));
    }

    // The single-card preset's output of such a file checks clean and loads in torch 2.x under
    // weights_only (its UntypedStorage is written as `torch.storage.UntypedStorage`, as torch does).
    void singleCardOutputChecksCleanAndLoads()
    {
        const std::string out = dir_.filePath(QStringLiteral("dtypes.single.pt")).toStdString();
        const CliRun convert = ckptscope({"convert", fixture("untyped_dtypes.pt"), "-o", out, "--single-card"});
        QVERIFY2(convert.rc == 0, convert.err.c_str());
        const CliRun check = ckptscope({"check", out});
        QVERIFY2(check.rc == 0, check.out.c_str());
        QCOMPARE(torchCompare(fixture("untyped_dtypes.pt"), out), QStringLiteral("equal"));
    }

    // A nested tensor shows its components' shapes (not a 0-d scalar of 4 bytes), its statistics are
    // over its real values, and a file equals itself.
    void nestedTensorShowsItsComponents()
    {
        const QJsonObject want = oracleOf("nested.pt").value(QStringLiteral("nested")).toObject();
        const CliRun r = ckptscope({"inspect", "--json", fixture("nested.pt")});
        QCOMPARE(r.rc, 0);
        QJsonObject nested;
        for (const auto& t : jsonOf(r).value(QStringLiteral("tensors")).toArray()) {
            if (t.toObject().value(QStringLiteral("path")).toString() == QStringLiteral("nested")) {
                nested = t.toObject();
            }
        }
        QCOMPARE(nested.value(QStringLiteral("layout")).toString(), QStringLiteral("nested"));
        QCOMPARE(nested.value(QStringLiteral("components")).toArray(),
                 want.value(QStringLiteral("components")).toArray());
        QCOMPARE(nested.value(QStringLiteral("numel")).toInteger(), want.value(QStringLiteral("numel")).toInteger());
        QCOMPARE(nested.value(QStringLiteral("nbytes")).toInteger(),
                 want.value(QStringLiteral("numel")).toInteger() * 4);

        std::string shapes;  // "[2, 3], [2, 2]"
        for (const auto& c : want.value(QStringLiteral("components")).toArray()) {
            std::string dims;
            for (const auto& d : c.toArray()) {
                dims += (dims.empty() ? "" : ", ") + std::to_string(d.toInteger());
            }
            shapes += (shapes.empty() ? "[" : ", [") + dims + "]";
        }
        const CliRun text = ckptscope({"inspect", fixture("nested.pt")});
        QVERIFY2(text.out.find("nested 2: " + shapes) != std::string::npos, text.out.c_str());

        auto ck = ckpt::openCheckpoint(fixture("nested.pt"));
        QVERIFY(ck);
        const ckpt::NodeIndex node = (*ck)->find("nested");
        QVERIFY(node.valid());
        auto stats = ckpt::diagnose::tensorStats(**ck, (*ck)->nodes[node].tensor);
        QVERIFY(stats);
        QCOMPARE(stats->numel, static_cast<std::uint64_t>(want.value(QStringLiteral("numel")).toInteger()));
        QCOMPARE(stats->min, want.value(QStringLiteral("min")).toDouble());
        QCOMPARE(stats->max, want.value(QStringLiteral("max")).toDouble());
        QCOMPARE(stats->mean, want.value(QStringLiteral("mean")).toDouble());

        const CliRun self = ckptscope({"diff", "--strict", fixture("nested.pt"), fixture("nested.pt")});
        QVERIFY2(self.rc == 0, self.out.c_str());
    }

    // convert keeps a nested tensor whole: torch 2.x loads the output to the same components.
    void nestedTensorConverts()
    {
        const std::string out = dir_.filePath(QStringLiteral("nested.single.pt")).toStdString();
        const CliRun convert = ckptscope({"convert", fixture("nested.pt"), "-o", out, "--single-card"});
        QVERIFY2(convert.rc == 0, convert.err.c_str());
        QCOMPARE(torchCompare(fixture("nested.pt"), out), QStringLiteral("equal"));
        const CliRun diff = ckptscope({"diff", "--strict", fixture("nested.pt"), out});
        QVERIFY2(diff.rc == 0, diff.out.c_str());
    }

private:
    QTemporaryDir dir_;
};

QTEST_GUILESS_MAIN(TestTorch2Values)
#include "tst_torch2_values.moc"
