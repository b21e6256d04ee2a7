// DeepSpeed ZeRO folders through `ckptscope` in-process, on the sets gen_zero.py hand-builds to
// DeepSpeed's source (no DeepSpeed here): consolidation loaded by real PyTorch 1.13 and compared
// value by value with the dict built from the original tensors; the listing; the findings; refusals.
#include "cli/cli.h"
#include "cli_json.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <sstream>

namespace {

QString fixture(const QString& name)
{
    return QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR "/") + name;
}

using Run = ckpt::test::CliRun;
using ckpt::test::ckptscope;
using ckpt::test::findingCodes;
using ckpt::test::jsonOf;

QStringList entries(const QString& dir)
{
    return QDir(dir).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot);
}

// Runs `script` with torch 1.13 on `args`; it prints "ok" when every assertion held.
void pythonSaysOk(const QString& script, const QStringList& args)
{
    QProcess py;
    py.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), script} + args);
    QVERIFY(py.waitForFinished(120000));
    QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
    QCOMPARE(py.readAllStandardOutput().trimmed(), QByteArray("ok"));
}

// Same keys in the same order (zero_to_fp32's: buffers, frozen, trainable, shared), same dtypes,
// equal values, and the shared_params alias one tensor with its partner.
const QString kSameAsExpected = QStringLiteral(
    "import sys, torch\n"
    "got, want = torch.load(sys.argv[1]), torch.load(sys.argv[2])\n"
    "assert list(got) == list(want), (list(got), list(want))\n"
    "for k in want:\n"
    "    assert got[k].dtype == want[k].dtype, (k, got[k].dtype, want[k].dtype)\n"
    "    assert got[k].shape == want[k].shape and torch.equal(got[k], want[k]), k\n"
    "if 'head.weight' in want and want['head.weight'].data_ptr() == want['embed.weight'].data_ptr():\n"
    "    assert got['head.weight'].data_ptr() == got['embed.weight'].data_ptr(), 'shared param not aliased'\n"
    "print('ok')\n");

}  // namespace

class TestZero : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // Stage 3 (2 and 3 ranks: padded partitions, a 1-element param that leaves ranks empty, frozen
    // fragments per rank), bf16 sets of stages 2 and 3, stages 1 and 2: each opened from the save
    // dir (with `latest`) or the tag folder.
    void consolidatesToTheOriginalModel_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QString>("entry");
        QTest::newRow("stage 3, 2 ranks") << "zero3_w2"
                                          << "zero3_w2";
        QTest::newRow("stage 3, 3 ranks, tag folder") << "zero3_w3"
                                                      << "zero3_w3/global_step3";
        QTest::newRow("stage 3, bf16") << "zero3_bf16_w2"
                                       << "zero3_bf16_w2";
        QTest::newRow("stage 2, 3 ranks") << "zero2_w3"
                                          << "zero2_w3";
        QTest::newRow("stage 2, bf16") << "zero2_bf16_w2"
                                       << "zero2_bf16_w2/global_step3";
        QTest::newRow("stage 1") << "zero1_w2"
                                 << "zero1_w2";
    }
    void consolidatesToTheOriginalModel()
    {
        QFETCH(QString, set);
        QFETCH(QString, entry);
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("model.pt"));
        const Run r = ckptscope({"convert", fixture(entry).toStdString(), "-o", out.toStdString(), "--single-card"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        QVERIFY(r.out.find("zero_to_fp32") != std::string::npos);
        pythonSaysOk(kSameAsExpected, {out, fixture(set + QStringLiteral(".expected.pt"))});
        QCOMPARE(entries(tmp.path()), QStringList{QStringLiteral("model.pt")});
    }

    // --zero-weights module: the 16-bit `module` of the stage 1/2 model states as saved, ties kept;
    // ZeRO-3 has only placeholders there, and any other input is no ZeRO folder.
    void moduleWeights()
    {
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("half.pt"));
        for (const auto& set : {QStringLiteral("zero2_w3"), QStringLiteral("zero2_bf16_w2")}) {
            const Run r =
                ckptscope({"convert", fixture(set).toStdString(), "-o", out.toStdString(), "--zero-weights", "module"});
            QVERIFY2(r.rc == 0, r.err.c_str());
            pythonSaysOk(kSameAsExpected, {out, fixture(set + QStringLiteral(".module.pt"))});
        }
        QVERIFY(QFile::remove(out));
        const Run z3 = ckptscope({"convert", fixture(QStringLiteral("zero3_w2")).toStdString(), "-o", out.toStdString(),
                                  "--zero-weights", "module"});
        QCOMPARE(z3.rc, 2);
        QVERIFY2(z3.err.find("placeholders") != std::string::npos, z3.err.c_str());
        const Run file = ckptscope({"convert", fixture(QStringLiteral("zero3_w2.expected.pt")).toStdString(), "-o",
                                    out.toStdString(), "--zero-weights", "module"});
        QCOMPARE(file.rc, 2);
        QVERIFY(entries(tmp.path()).isEmpty());
    }

    // --keep-optimizer: {model, optimizer: {state: {name: {exp_avg, exp_avg_sq}}}}, the moments
    // consolidated per parameter from stage 3's per-sub-group state, stage 1/2's lean per-group
    // states and (bf16 set) the torch state_dict form with the tail padding still in it.
    void keepsTheOptimizerState_data()
    {
        QTest::addColumn<QString>("set");
        QTest::newRow("stage 3") << "zero3_w3";
        QTest::newRow("stage 3, bf16") << "zero3_bf16_w2";
        QTest::newRow("stage 2, lean states") << "zero2_w3";
        QTest::newRow("stage 2, torch state_dict form") << "zero2_bf16_w2";
    }
    void keepsTheOptimizerState()
    {
        QFETCH(QString, set);
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("full.pt"));
        const Run r = ckptscope({"convert", fixture(set).toStdString(), "-o", out.toStdString(), "--keep-optimizer"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QString script =
            QStringLiteral("import sys, torch\n"
                           "got, want = torch.load(sys.argv[1]), torch.load(sys.argv[2])\n"
                           "def same(a, b, at):\n"
                           "    if isinstance(b, dict):\n"
                           "        assert isinstance(a, dict) and list(a) == list(b), (at, list(a), list(b))\n"
                           "        for k in b: same(a[k], b[k], at + '/' + str(k))\n"
                           "    else:\n"
                           "        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), at\n"
                           "same(got, want, '')\n"
                           "print('ok')\n");
        pythonSaysOk(script, {out, fixture(set + QStringLiteral(".optimizer.pt"))});
        const Run single = ckptscope(
            {"convert", fixture(set).toStdString(), "-o", out.toStdString(), "--keep-optimizer", "--single-card"});
        QCOMPARE(single.rc, 2);
    }

    // Edits and safetensors go through the staged copy, as for every set.
    void takesEditsThroughTheStagedCopy()
    {
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("model.safetensors"));
        const Run r = ckptscope({"convert", fixture(QStringLiteral("zero3_w3")).toStdString(), "-o", out.toStdString(),
                                 "--strip-prefix", "layers.", "--drop", "head.weight"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const Run shown = ckptscope({"inspect", "--json", out.toStdString()});
        QCOMPARE(shown.rc, 0);
        QVERIFY(shown.out.find("\"1.scale\"") != std::string::npos);
        QVERIFY(shown.out.find("head.weight") == std::string::npos);
        QCOMPARE(entries(tmp.path()), QStringList{QStringLiteral("model.safetensors")});
    }

    // inspect shows the consolidated model: global shapes, the rank files holding each tensor.
    void inspectListsTheConsolidatedModel_data()
    {
        QTest::addColumn<QString>("entry");
        QTest::addColumn<QString>("storedIn");
        QTest::newRow("save dir") << "zero3_w2"
                                  << "2 rank files: zero_pp_rank_0_mp_rank_00_optim_states.pt";
        QTest::newRow("tag folder") << "zero3_bf16_w2/global_step3"
                                    << "2 rank files: bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt";
        QTest::newRow("missing ranks") << "zero3_no_optim"
                                       << "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt (missing)";
    }
    void inspectListsTheConsolidatedModel()
    {
        QFETCH(QString, entry);
        QFETCH(QString, storedIn);
        const Run r = ckptscope({"inspect", "--json", fixture(entry).toStdString()});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QJsonArray tensors = jsonOf(r).value(QStringLiteral("tensors")).toArray();
        QCOMPARE(tensors.size(), 11);
        QJsonObject embed;
        QJsonObject steps;
        for (const auto& v : tensors) {
            const QJsonObject t = v.toObject();
            if (t.value(QStringLiteral("key")).toString() == QStringLiteral("embed.weight")) {
                embed = t;
            }
            if (t.value(QStringLiteral("key")).toString() == QStringLiteral("layers.0.norm.num_batches_tracked")) {
                steps = t;
            }
        }
        QCOMPARE(embed.value(QStringLiteral("shape")).toArray(), (QJsonArray{50, 16}));
        QCOMPARE(embed.value(QStringLiteral("dtype")).toString(), QStringLiteral("float32"));
        QVERIFY2(embed.value(QStringLiteral("file")).toString().contains(storedIn),
                 qPrintable(embed.value(QStringLiteral("file")).toString()));
        QCOMPARE(steps.value(QStringLiteral("dtype")).toString(), QStringLiteral("float32"));  // .float()
        const Run text = ckptscope({"inspect", fixture(entry).toStdString()});
        QCOMPARE(text.rc, 0);
        QVERIFY(text.out.find("DeepSpeed ZeRO checkpoint") != std::string::npos);
    }

    void checkNamesWhatIsBroken_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QStringList>("codes");
        QTest::addColumn<int>("rc");
        QTest::addColumn<QString>("names");
        QTest::newRow("stage 2 complete") << "zero2_w3" << QStringList{} << 0 << "";
        QTest::newRow("stage 3 complete")
            << "zero3_w2" << QStringList{QStringLiteral("zero3-placeholder-module")} << 1 << "module/embed.weight";
        QTest::newRow("no optimizer files")
            << "zero3_no_optim"
            << QStringList{QStringLiteral("zero-rank-missing"), QStringLiteral("zero3-placeholder-module")} << 1
            << "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt";
        QTest::newRow("stale rank file") << "zero2_stale_rank" << QStringList{QStringLiteral("world-size-mismatch")}
                                         << 1 << "zero_pp_rank_2_mp_rank_00_optim_states.pt";
        QTest::newRow("truncated rank file")
            << "zero3_truncated"
            << QStringList{QStringLiteral("shard-unreadable"), QStringLiteral("zero3-placeholder-module")} << 1
            << "zero_pp_rank_1_mp_rank_00_optim_states.pt";
    }
    void checkNamesWhatIsBroken()
    {
        QFETCH(QString, set);
        QFETCH(QStringList, codes);
        QFETCH(int, rc);
        QFETCH(QString, names);
        const Run r = ckptscope({"check", "--json", fixture(set).toStdString()});
        QVERIFY2(r.rc == rc, r.err.c_str());
        QCOMPARE(findingCodes(r), codes);
        QVERIFY2(r.out.find(names.toStdString()) != std::string::npos, r.out.c_str());
    }

    // Refused in one line, exit 2, before anything is written.
    void refusals_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QString>("says");
        QTest::newRow("BF16_Optimizer") << "bf16_optimizer_w2"
                                        << "BF16_Optimizer";
        QTest::newRow("no optimizer files") << "zero3_no_optim"
                                            << "zero-rank-missing";
        QTest::newRow("stale rank file") << "zero2_stale_rank"
                                         << "world-size-mismatch";
        QTest::newRow("truncated rank file") << "zero3_truncated"
                                             << "shard-unreadable";
        QTest::newRow("tensor parallel") << "zero2_tensor_parallel"
                                         << "mp_world_size is 2";
    }
    void refusals()
    {
        QFETCH(QString, set);
        QFETCH(QString, says);
        QTemporaryDir tmp;
        for (const bool edits : {false, true}) {
            std::vector<std::string> args{"convert", fixture(set).toStdString(), "-o",
                                          tmp.filePath(QStringLiteral("out.pt")).toStdString()};
            if (edits) {
                args.insert(args.end(), {"--strip-prefix", "layers."});
            }
            const Run r = ckptscope(args);
            QCOMPARE(r.rc, 2);
            QVERIFY2(r.err.find(says.toStdString()) != std::string::npos, r.err.c_str());
            QVERIFY(r.err.find('\n') == r.err.size() - 1);
            QVERIFY(entries(tmp.path()).isEmpty());
        }
    }

    // The real partial ZeRO-3 set of the corpus (bf16, 2 ranks, its optimizer files not fetched):
    // listed from its model states, its findings name the missing files, convert refuses it.
    void realPartialZero3Set()
    {
        const QDir corpus(QStringLiteral("/work/shared/corpus"));
        const QStringList dirs =
            corpus.entryList({QStringLiteral("bigyanghimire__deepspeed-experiments*")}, QDir::Dirs);
        if (dirs.isEmpty()) {
            QSKIP("the shared corpus is not on this machine");
        }
        const std::string dir = corpus.filePath(dirs.first()).toStdString();
        const Run shown = ckptscope({"inspect", "--json", dir});
        QVERIFY2(shown.rc == 0, shown.err.c_str());
        QVERIFY(jsonOf(shown).value(QStringLiteral("tensors")).toArray().size() > 100);
        const Run check = ckptscope({"check", "--json", dir});
        QCOMPARE(check.rc, 1);
        QCOMPARE(findingCodes(check),
                 (QStringList{QStringLiteral("zero-rank-missing"), QStringLiteral("zero3-placeholder-module")}));
        QVERIFY(check.out.find("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt") != std::string::npos);
        QTemporaryDir tmp;
        const Run convert = ckptscope({"convert", dir, "-o", tmp.filePath(QStringLiteral("m.pt")).toStdString()});
        QCOMPARE(convert.rc, 2);
        QVERIFY2(convert.err.find("incomplete (zero-rank-missing") != std::string::npos, convert.err.c_str());
        QVERIFY(entries(tmp.path()).isEmpty());
        // One rank file alone stays the torch.save file it is.
        const Run rank = ckptscope({"inspect", dir + "/global_step99/zero_pp_rank_1_mp_rank_00_model_states.pt"});
        QCOMPARE(rank.rc, 0);
    }
};

QTEST_GUILESS_MAIN(TestZero)
#include "tst_zero.moc"
