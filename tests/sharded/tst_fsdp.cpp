// FSDP per-rank pickles through `ckptscope` in-process. gen_fsdp.py builds them to PyTorch 2.x's
// source (sharded_tensor/api.py, tensor/_api.py; no PyTorch 2.x here): ShardedTensor and DTensor
// wrappers around real torch.save'd local tensors. Consolidation is checked by torch.load against
// the full state dict the generator saved.
#include "cli_json.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

namespace {

QString fixture(const QString& name)
{
    return QStringLiteral(CKPTSCOPE_FSDP_FIXTURE_DIR "/") + name;
}

using Run = ckpt::test::CliRun;
using ckpt::test::ckptscope;
using ckpt::test::findingCodes;
using ckpt::test::jsonOf;

// What torch itself says of the expected state dict: key -> [dtype, shape].
QJsonObject expectedShapes(const QString& set)
{
    QProcess py;
    py.start(QStringLiteral(CKPTSCOPE_PYTHON),
             QStringList{QStringLiteral("-c"),
                         QStringLiteral("import sys, json, torch\n"
                                        "sd = torch.load(sys.argv[1])\n"
                                        "print(json.dumps({k: [str(v.dtype)[6:], list(v.shape)] for k, v in "
                                        "sd.items()}))\n"),
                         fixture(set + QStringLiteral(".expected.pt"))});
    if (!py.waitForFinished(60000) || py.exitCode() != 0) {
        return {};
    }
    return QJsonDocument::fromJson(py.readAllStandardOutput()).object();
}

}  // namespace

class TestFsdp : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void folderShowsGlobalTensors_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QString>("kind");
        QTest::newRow("ShardedTensor") << "fsdp_st"
                                       << "ShardedTensor";
        QTest::newRow("DTensor") << "fsdp_dtensor"
                                 << "DTensor";
    }
    void folderShowsGlobalTensors()
    {
        QFETCH(QString, set);
        QFETCH(QString, kind);
        const QJsonObject want = expectedShapes(set);
        QVERIFY(!want.isEmpty());
        const Run r = ckptscope({"inspect", fixture(set).toStdString(), "--json"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QJsonArray tensors = jsonOf(r).value(QStringLiteral("tensors")).toArray();
        QCOMPARE(tensors.size(), want.size());
        for (const auto& t : tensors) {
            const QJsonObject o = t.toObject();
            const QJsonArray w = want.value(o.value(QStringLiteral("path")).toString()).toArray();
            QCOMPARE(o.value(QStringLiteral("dtype")).toString(), w.at(0).toString());
            QCOMPARE(o.value(QStringLiteral("shape")).toArray(), w.at(1).toArray());
            QCOMPARE(o.value(QStringLiteral("stored_as")).toString(), kind);
            QVERIFY(!o.value(QStringLiteral("pieces")).toArray().isEmpty());
            QVERIFY(!o.value(QStringLiteral("stored_in")).toArray().isEmpty());
        }
    }

    void oneRankFileShowsItsShards()
    {
        const QString file = fixture(QStringLiteral("fsdp_st/pytorch_model_fsdp_0_rank1.bin"));
        const Run r = ckptscope({"inspect", file.toStdString(), "--json"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QJsonObject j = jsonOf(r);
        QVERIFY(j.value(QStringLiteral("set")).toObject().value(QStringLiteral("one_file")).toBool());
        QCOMPARE(j.value(QStringLiteral("set")).toObject().value(QStringLiteral("kind")).toString(),
                 QStringLiteral("fsdp-ranks"));
        for (const auto& t : j.value(QStringLiteral("tensors")).toArray()) {
            for (const auto& s : t.toObject().value(QStringLiteral("pieces")).toArray()) {
                QCOMPARE(s.toObject().value(QStringLiteral("file")).toString(),
                         QStringLiteral("pytorch_model_fsdp_0_rank1.bin"));
            }
        }
        const Run check = ckptscope({"check", file.toStdString(), "--json"});
        QCOMPARE(findingCodes(check), QStringList{QStringLiteral("needs-process-group")});
        QVERIFY(check.out.find("Need to initialize default process group") != std::string::npos);
        QTemporaryDir tmp;
        const Run convert =
            ckptscope({"convert", file.toStdString(), "-o", tmp.filePath(QStringLiteral("x.pt")).toStdString()});
        QVERIFY(convert.rc != 0);
    }

    void convertGivesTheFullStateDict()
    {
        QTemporaryDir tmp;
        QStringList pairs;
        for (const char* set : {"fsdp_st", "fsdp_dtensor"}) {
            const QString out = tmp.filePath(QString::fromLatin1(set) + QStringLiteral(".pt"));
            const Run r =
                ckptscope({"convert", fixture(QString::fromLatin1(set)).toStdString(), "-o", out.toStdString()});
            QVERIFY2(r.rc == 0, r.err.c_str());
            pairs << out << fixture(QString::fromLatin1(set) + QStringLiteral(".expected.pt"));
        }
        const QString script =
            QStringLiteral("import sys, torch\n"
                           "a = sys.argv[1:]\n"
                           "for out, exp in zip(a[::2], a[1::2]):\n"
                           "    got, want = torch.load(out), torch.load(exp)\n"
                           "    assert list(got) == list(want), (out, list(got), list(want))\n"
                           "    for k in want:\n"
                           "        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), (out, k)\n"
                           "print('ok')\n");
        QProcess py;
        py.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), script} + pairs);
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
        QCOMPARE(py.readAllStandardOutput().trimmed(), QByteArray("ok"));
    }

    // The window, diff and testload see the folder through sharded::listSet/consolidateSet; one
    // rank file alone stays the torch.save file it is.
    void diffSeesTheConsolidatedSet()
    {
        for (const char* set : {"fsdp_st", "fsdp_dtensor"}) {
            const QString dir = fixture(QString::fromLatin1(set));
            const Run r = ckptscope(
                {"diff", "--strict", dir.toStdString(), (dir + QStringLiteral(".expected.pt")).toStdString()});
            QVERIFY2(r.rc == 0, (r.out + r.err).c_str());
        }
    }

    void lostRankIsAWorldSizeMismatch()
    {
        const Run check = ckptscope({"check", fixture(QStringLiteral("fsdp_lost_rank")).toStdString(), "--json"});
        QVERIFY(findingCodes(check).contains(QStringLiteral("world-size-mismatch")));
        QVERIFY(check.out.find("missing rank(s): 2") != std::string::npos);
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("x.pt"));
        const Run convert =
            ckptscope({"convert", fixture(QStringLiteral("fsdp_lost_rank")).toStdString(), "-o", out.toStdString()});
        QCOMPARE(convert.rc, 2);
        QVERIFY(convert.err.find("world-size-mismatch") != std::string::npos);
        QVERIFY(!QFile::exists(out));
    }

    void optimizerValuesAreNotDropped()
    {
        const QString set = fixture(QStringLiteral("fsdp_optim"));
        const Run inspect = ckptscope({"inspect", set.toStdString(), "--json"});
        QVERIFY2(inspect.rc == 0, inspect.err.c_str());
        QCOMPARE(jsonOf(inspect).value(QStringLiteral("tensors")).toArray().size(), 2);
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("x.pt"));
        const Run convert = ckptscope({"convert", set.toStdString(), "-o", out.toStdString()});
        QCOMPARE(convert.rc, 2);
        QVERIFY2(convert.err.find("values besides tensors") != std::string::npos, convert.err.c_str());
        QVERIFY(!QFile::exists(out));
    }

    void localStateDictIsRefused()
    {
        for (const char* cmd : {"inspect", "check"}) {
            const Run r = ckptscope({cmd, fixture(QStringLiteral("fsdp_local")).toStdString()});
            QVERIFY(r.rc != 0);
            QVERIFY2(r.err.find("LOCAL_STATE_DICT") != std::string::npos, r.err.c_str());
            QVERIFY(r.err.find("without the model") != std::string::npos);
        }
    }
};

QTEST_GUILESS_MAIN(TestFsdp)
#include "tst_fsdp.moc"
