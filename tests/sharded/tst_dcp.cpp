// DCP directories through `ckptscope` in-process. The sets are hand-built by gen_dcp.py to
// PyTorch 2.x's source (metadata.py, filesystem.py, _traverse.py), not written by PyTorch 2.x,
// which this machine lacks; each comes with the dict dcp_to_torch_save gives, saved by real
// PyTorch 1.13, and its flat keys' shapes. Consolidation is checked by torch.load against it.
#include "cli_run.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>

namespace {

QString fixture(const QString& name)
{
    return QStringLiteral(CKPTSCOPE_DCP_FIXTURE_DIR "/") + name;
}

using Run = ckpt::test::CliRun;
using ckpt::test::ckptscope;

QJsonObject parse(const QByteArray& text)
{
    return QJsonDocument::fromJson(text).object();
}

QJsonObject readJson(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    return parse(f.readAll());
}

QStringList findingCodes(const Run& r)
{
    QStringList codes;
    for (const auto& f : parse(QByteArray::fromStdString(r.out)).value(QStringLiteral("findings")).toArray()) {
        codes << f.toObject().value(QStringLiteral("code")).toString();
    }
    return codes;
}

}  // namespace

class TestDcp : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void inspectShowsGlobalTensors_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QString>("open");
        QTest::newRow("basic, folder") << "dcp_basic"
                                       << "";
        QTest::newRow("basic, a data file") << "dcp_basic"
                                            << "__1_0.distcp";
        QTest::newRow("old TensorProperties, no version") << "dcp_old"
                                                          << ".metadata";
        QTest::newRow("one file per item") << "dcp_per_item"
                                           << "";
        QTest::newRow("zstd items") << "dcp_zstd"
                                    << "";
        QTest::newRow("safetensors data files") << "dcp_safetensors"
                                                << "__0_0.distcp";
    }
    void inspectShowsGlobalTensors()
    {
        QFETCH(QString, set);
        QFETCH(QString, open);
        const QString path = open.isEmpty() ? fixture(set) : fixture(set + QStringLiteral("/") + open);
        const Run r = ckptscope({"inspect", path.toStdString(), "--json"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QJsonObject got = parse(QByteArray::fromStdString(r.out));
        const QJsonObject want = readJson(fixture(set + QStringLiteral(".expected.json")));
        const QJsonObject wantTensors = want.value(QStringLiteral("tensors")).toObject();
        QVERIFY(!wantTensors.isEmpty());
        const QJsonArray tensors = got.value(QStringLiteral("tensors")).toArray();
        QCOMPARE(tensors.size(), wantTensors.size());
        for (const auto& t : tensors) {
            const QJsonObject o = t.toObject();
            const QString key = o.value(QStringLiteral("path")).toString();
            QVERIFY2(wantTensors.contains(key), qPrintable(key));
            const QJsonObject w = wantTensors.value(key).toObject();
            QCOMPARE(o.value(QStringLiteral("shape")).toArray(), w.value(QStringLiteral("shape")).toArray());
            QCOMPARE(o.value(QStringLiteral("dtype")).toString(), w.value(QStringLiteral("dtype")).toString());
            const QJsonArray chunks = o.value(QStringLiteral("pieces")).toArray();
            QCOMPARE(chunks.size(), w.value(QStringLiteral("chunks")).toInt());
            for (const auto& c : chunks) {
                QVERIFY(QFile::exists(
                    fixture(set + QStringLiteral("/") + c.toObject().value(QStringLiteral("file")).toString())));
            }
        }
        const QJsonObject wantValues = want.value(QStringLiteral("values")).toObject();
        const QJsonArray values = got.value(QStringLiteral("values")).toArray();
        QCOMPARE(values.size(), wantValues.size());
        for (const auto& v : values) {
            const QJsonObject o = v.toObject();
            const QString key = o.value(QStringLiteral("path")).toString();
            QCOMPARE(o.value(QStringLiteral("value")).toString(), wantValues.value(key).toString());
        }
        // A safetensors layout's one finding says that PyTorch's own reader cannot load it.
        QStringList codes;
        for (const auto& f : got.value(QStringLiteral("set")).toObject().value(QStringLiteral("findings")).toArray()) {
            codes << f.toObject().value(QStringLiteral("code")).toString();
        }
        QCOMPARE(codes, set == QStringLiteral("dcp_safetensors") ? QStringList{QStringLiteral("dcp-safetensors-format")}
                                                                 : QStringList{});
        // The text view names each chunk's box and file.
        const Run text = ckptscope({"inspect", path.toStdString()});
        QCOMPARE(text.rc, 0);
        QVERIFY(text.out.find("at [5, 0] size [4, 6]") != std::string::npos);
        QVERIFY(text.out.find(".distcp @ ") != std::string::npos);
    }

    void convertEqualsDcpToTorchSave()
    {
        QTemporaryDir tmp;
        QStringList pairs;
        for (const char* set : {"dcp_basic", "dcp_old", "dcp_per_item", "dcp_zstd", "dcp_safetensors"}) {
            const QString out = tmp.filePath(QString::fromLatin1(set) + QStringLiteral(".pt"));
            const Run r = ckptscope(
                {"convert", fixture(QString::fromLatin1(set)).toStdString(), "-o", out.toStdString(), "--single-card"});
            QVERIFY2(r.rc == 0, r.err.c_str());
            pairs << out << fixture(QString::fromLatin1(set) + QStringLiteral(".expected.pt"));
        }
        const QString script =
            QStringLiteral("import sys, torch\n"
                           "def same(a, b, at):\n"
                           "    assert type(a) is type(b), (at, type(a), type(b))\n"
                           "    if isinstance(a, torch.Tensor):\n"
                           "        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), at\n"
                           "    elif isinstance(a, dict):\n"
                           "        assert list(a) == list(b), (at, list(a), list(b))\n"
                           "        for k in a: same(a[k], b[k], at + '/' + str(k))\n"
                           "    elif isinstance(a, (list, tuple)):\n"
                           "        assert len(a) == len(b), at\n"
                           "        for i, (x, y) in enumerate(zip(a, b)): same(x, y, at + '/' + str(i))\n"
                           "    else:\n"
                           "        assert a == b, (at, a, b)\n"
                           "a = sys.argv[1:]\n"
                           "for out, exp in zip(a[::2], a[1::2]):\n"
                           "    same(torch.load(out), torch.load(exp), out)\n"
                           "print('ok')\n");
        QProcess py;
        py.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), script} + pairs);
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
        QCOMPARE(py.readAllStandardOutput().trimmed(), QByteArray("ok"));
    }

    // Issue 40: a TransformerEngine _extra_state value holding a uint8 tensor (Megatron-LM's
    // ShardedObject, torch.save([state])) stopped the view and the consolidation ("a bytes item holds
    // a tensor"). convert keeps it as dcp_to_torch_save does and says so; --drop-extra-state leaves
    // every such value out, each a plan step; check's extra-state finding carries that fix.
    void extraStateIsKeptOrDropped()
    {
        const std::string set = fixture(QStringLiteral("dcp_extra_state")).toStdString();
        QTemporaryDir tmp;
        const QString kept = tmp.filePath(QStringLiteral("kept.pt"));
        const Run r = ckptscope({"convert", set, "-o", kept.toStdString()});
        QVERIFY2(r.rc == 0, r.err.c_str());
        QVERIFY2(r.out.find("2 _extra_state values kept") != std::string::npos, r.out.c_str());
        const QString dropped = tmp.filePath(QStringLiteral("dropped.pt"));
        const Run d = ckptscope({"convert", set, "-o", dropped.toStdString(), "--drop-extra-state"});
        QVERIFY2(d.rc == 0, d.err.c_str());
        QVERIFY2(d.out.find("drop    decoder.layers.linear_fc1._extra_state/shard_1_2") != std::string::npos,
                 d.out.c_str());
        const Run json = ckptscope({"check", "--json", set});
        QVERIFY(findingCodes(json).contains(QStringLiteral("extra-state")));
        const QString script =
            QStringLiteral("import pickle, sys, torch\n"
                           "kept = torch.load(sys.argv[1])\n"
                           "state = kept['decoder.layers.linear_fc1._extra_state/shard_1_2']\n"
                           "assert isinstance(state, list) and state[0].dtype == torch.uint8, state\n"
                           "assert pickle.loads(state[0].numpy().tobytes()) == {'scale_fwd': [1.0, 1.0]}\n"
                           "assert kept['decoder.layers.linear_fc1._extra_state/shard_0_2'] == [None]\n"
                           "dropped = torch.load(sys.argv[2])\n"
                           "assert list(dropped) == ['decoder.layers.linear_fc1.weight'], list(dropped)\n"
                           "assert torch.equal(dropped['decoder.layers.linear_fc1.weight'], "
                           "kept['decoder.layers.linear_fc1.weight'])\n"
                           "print('ok')\n");
        QProcess py;
        py.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), script, kept, dropped});
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
        QCOMPARE(py.readAllStandardOutput().trimmed(), QByteArray("ok"));
    }

    // The window, diff and testload see a set through sharded::listSet/consolidateSet.
    void diffSeesTheConsolidatedSet()
    {
        for (const char* set : {"dcp_basic", "dcp_per_item"}) {
            const QString dir = fixture(QString::fromLatin1(set));
            const Run r = ckptscope(
                {"diff", "--strict", dir.toStdString(), (dir + QStringLiteral(".expected.pt")).toStdString()});
            QVERIFY2(r.rc == 0, (r.out + r.err).c_str());
        }
    }

    void brokenSetsAreFoundAndNotConsolidated_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QString>("code");
        QTest::newRow("overlap") << "dcp_overlap"
                                 << "chunk-overlap";
        QTest::newRow("hole") << "dcp_hole"
                              << "chunk-hole";
        QTest::newRow("out of bounds") << "dcp_bounds"
                                       << "chunk-out-of-bounds";
        QTest::newRow("missing rank file") << "dcp_missing_file"
                                           << "shard-missing";
    }
    void brokenSetsAreFoundAndNotConsolidated()
    {
        QFETCH(QString, set);
        QFETCH(QString, code);
        const Run check = ckptscope({"check", fixture(set).toStdString(), "--json"});
        QVERIFY2(check.rc != 0, check.out.c_str());
        QCOMPARE(findingCodes(check), QStringList{code});
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("x.pt"));
        const Run convert = ckptscope({"convert", fixture(set).toStdString(), "-o", out.toStdString()});
        QCOMPARE(convert.rc, 2);
        QVERIFY2(convert.err.find(code.toStdString()) != std::string::npos, convert.err.c_str());
        QVERIFY(!QFile::exists(out));
    }

    // A data file cut short: inspect still shows the plan, check names the chunks past the end
    // (dcp-item-unreadable), and convert refuses the set with one line and leaves nothing behind.
    void truncatedDataFileIsOneLine()
    {
        const QString set = fixture(QStringLiteral("dcp_truncated"));
        QCOMPARE(ckptscope({"inspect", set.toStdString()}).rc, 0);
        const Run checked = ckptscope({"check", set.toStdString()});
        QCOMPARE(checked.rc, 1);
        QVERIFY2(checked.out.find("__1_0.distcp") != std::string::npos, checked.out.c_str());
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("x.pt"));
        const Run r = ckptscope({"convert", set.toStdString(), "-o", out.toStdString()});
        QVERIFY(r.rc != 0);
        QVERIFY2(r.err.find("dcp-item-unreadable") != std::string::npos, r.err.c_str());
        QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), 1);
        QVERIFY(!QFile::exists(out));
    }

    // A .distcp is torch.save records back to back, no single-file reader's input: read alone
    // (--file-only, or several files given, where no set is looked for) each command says what it
    // is and where to go, one line a file, with the exit code of any unreadable input, and writes
    // nothing. (With no .metadata beside it, the set reader names the missing file instead.)
    void dataFileAloneIsNamed_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<int>("files");
        QTest::newRow("inspect --file-only")
            << QStringList{QStringLiteral("inspect"), QStringLiteral("--file-only")} << 1;
        QTest::newRow("check --file-only") << QStringList{QStringLiteral("check"), QStringLiteral("--file-only")} << 1;
        QTest::newRow("convert --file-only")
            << QStringList{QStringLiteral("convert"), QStringLiteral("--file-only")} << 1;
        QTest::newRow("testload --file-only") << QStringList{QStringLiteral("testload"), QStringLiteral("--file-only"),
                                                             QStringLiteral("--device"), QStringLiteral("cpu")}
                                              << 1;
        QTest::newRow("inspect, several files") << QStringList{QStringLiteral("inspect")} << 2;
    }
    void dataFileAloneIsNamed()
    {
        QFETCH(QStringList, args);
        QFETCH(int, files);
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        std::vector<std::string> argv;
        for (const auto& a : args) {
            argv.push_back(a.toStdString());
        }
        for (int i = 0; i < files; ++i) {
            argv.push_back(fixture(QStringLiteral("dcp_basic/__%1_0.distcp").arg(i)).toStdString());
        }
        const QString out = tmp.filePath(QStringLiteral("x.pt"));
        if (args.front() == QStringLiteral("convert")) {
            argv.insert(argv.end(), {"-o", out.toStdString()});
        }
        const Run r = ckptscope(argv);
        QCOMPARE(r.rc, 2);
        QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), files);
        QVERIFY2(r.err.find("torch.distributed.checkpoint (DCP) data file") != std::string::npos, r.err.c_str());
        const std::string folder =
            "open its folder (ckptscope inspect " + fixture(QStringLiteral("dcp_basic")).toStdString() + ")";
        QVERIFY2(r.err.find(folder) != std::string::npos, r.err.c_str());
        QVERIFY(!QFile::exists(out));
    }

    void unreadKindsAreNamed_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QString>("says");
        QTest::newRow("1.12 prototype") << "dcp_prototype"
                                        << "PyTorch 1.12 prototype";
        QTest::newRow("unknown transform") << "dcp_unknown_transform"
                                           << "stream.lz4/1";
    }
    void unreadKindsAreNamed()
    {
        QFETCH(QString, set);
        QFETCH(QString, says);
        for (const char* cmd : {"inspect", "check", "convert"}) {
            std::vector<std::string> args{cmd, fixture(set).toStdString()};
            QTemporaryDir tmp;
            if (std::string(cmd) == "convert") {
                args.insert(args.end(), {"-o", tmp.filePath(QStringLiteral("x.pt")).toStdString()});
            }
            const Run r = ckptscope(args);
            QVERIFY2(r.rc != 0, cmd);
            QVERIFY2(r.err.find(says.toStdString()) != std::string::npos, r.err.c_str());
            QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), 1);
        }
    }
};

QTEST_GUILESS_MAIN(TestDcp)
#include "tst_dcp.moc"
