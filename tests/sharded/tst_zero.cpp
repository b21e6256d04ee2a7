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

#include <cstdlib>
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

    // --keep-optimizer: {model, optimizer: {state: {name: {step, exp_avg, exp_avg_sq}}, param_groups}},
    // the moments consolidated per parameter (in their stored dtype) from stage 3's per-sub-group
    // state, stage 1/2's lean per-group states and the torch state_dict form with the tail padding
    // still in it; each flat group's step repeated per param; Adam's param_groups with `params`
    // naming the consolidated params (stage 3: two sub-groups under one group). torch 1.13 then
    // loads the optimizer dict into an optimizer over those params and steps it.
    void keepsTheOptimizerState_data()
    {
        QTest::addColumn<QString>("set");
        QTest::newRow("stage 3, tensor step") << "zero3_w3";
        QTest::newRow("stage 3, int step") << "zero3_w2";
        QTest::newRow("stage 3, bf16 exp_avg") << "zero3_bf16_w2";
        QTest::newRow("stage 2, lean states") << "zero2_w3";
        QTest::newRow("stage 2, torch state_dict form, fp16 exp_avg_sq") << "zero2_bf16_w2";
        QTest::newRow("stage 2, FusedAdam step in the groups") << "zero2_fused_w2";
    }
    void keepsTheOptimizerState()
    {
        QFETCH(QString, set);
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("full.pt"));
        const Run r = ckptscope({"convert", fixture(set).toStdString(), "-o", out.toStdString(), "--keep-optimizer"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QString script = QStringLiteral(
            "import sys, torch\n"
            "got, want = torch.load(sys.argv[1]), torch.load(sys.argv[2])\n"
            "def same(a, b, at):\n"
            "    assert type(a) == type(b) or isinstance(b, dict) and isinstance(a, dict), (at, type(a), type(b))\n"
            "    if isinstance(b, dict):\n"
            "        assert list(a) == list(b), (at, list(a), list(b))\n"
            "        for k in b: same(a[k], b[k], at + '/' + str(k))\n"
            "    elif isinstance(b, (list, tuple)):\n"
            "        assert len(a) == len(b), at\n"
            "        for i, (x, y) in enumerate(zip(a, b)): same(x, y, at + '/' + str(i))\n"
            "    elif torch.is_tensor(b):\n"
            "        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), at\n"
            "    else:\n"
            "        assert a == b, (at, a, b)\n"
            "same(got, want, '')\n"
            "osd = got['optimizer']\n"
            "if 'param_groups' not in want['optimizer']:\n"
            "    assert 'param_groups' not in osd\n"
            "    print('ok'); sys.exit(0)\n"
            "params = {n: torch.nn.Parameter(got['model'][n].clone()) for g in osd['param_groups'] for n in "
            "g['params']}\n"
            "groups = [{'params': [params[n] for n in g['params']]} for g in osd['param_groups']]\n"
            "adam = all('step' in s for s in osd['state'].values())\n"
            "opt = torch.optim.Adam(groups) if adam else torch.optim.Optimizer(groups, {})\n"
            "opt.load_state_dict(osd)\n"
            "for g, saved in zip(opt.param_groups, osd['param_groups']):\n"
            "    assert g['lr'] == saved['lr'] and g['betas'] == saved['betas'], (g, saved)\n"
            "for n, p in params.items():\n"
            "    for k, v in want['optimizer']['state'][n].items():\n"
            "        if k != 'step': assert torch.equal(opt.state[p][k], v.float()), (n, k)\n"
            "    p.grad = torch.ones_like(p)\n"
            "if adam:\n"
            "    opt.step()\n"
            "    steps = [float(opt.state[p]['step']) for p in params.values()]\n"
            "    assert steps == [4.0] * len(params), steps\n"
            "print('ok')\n");
        pythonSaysOk(script, {out, fixture(set + QStringLiteral(".optimizer.pt"))});
        const Run single = ckptscope(
            {"convert", fixture(set).toStdString(), "-o", out.toStdString(), "--keep-optimizer", "--single-card"});
        QCOMPARE(single.rc, 2);
    }

    // Straight into a .pt, a stage 1/2 param group is one storage with the params as views, as
    // zero_to_fp32's torch.save of narrow(...).view(shape) leaves it (the tail padding included);
    // through the staged copy (--compact here) every tensor has its own. Values equal either way,
    // and `check` finds nothing to warn about in the grouped file.
    void writesParamGroupsAsZeroToFp32Does_data()
    {
        QTest::addColumn<QString>("set");
        QTest::newRow("stage 2, 3 ranks") << "zero2_w3";
        QTest::newRow("stage 2, bf16") << "zero2_bf16_w2";
        QTest::newRow("stage 1") << "zero1_w2";
    }
    void writesParamGroupsAsZeroToFp32Does()
    {
        QFETCH(QString, set);
        QTemporaryDir tmp;
        const QString grouped = tmp.filePath(QStringLiteral("grouped.pt"));
        const QString own = tmp.filePath(QStringLiteral("own.pt"));
        const Run g = ckptscope({"convert", fixture(set).toStdString(), "-o", grouped.toStdString()});
        QVERIFY2(g.rc == 0, g.err.c_str());
        const Run o = ckptscope({"convert", fixture(set).toStdString(), "-o", own.toStdString(), "--compact"});
        QVERIFY2(o.rc == 0, o.err.c_str());
        const QString expected = fixture(set + QStringLiteral(".expected.pt"));
        pythonSaysOk(kSameAsExpected, {grouped, expected});
        pythonSaysOk(kSameAsExpected, {own, expected});
        // The fixtures' groups: [embed, layers.0.attn.weight, layers.0.attn.bias] and
        // [layers.1.attn.weight, layers.1.scale]; head.weight is shared with embed.weight.
        pythonSaysOk(
            QStringLiteral("import sys, torch, zipfile\n"
                           "assert zipfile.ZipFile(sys.argv[1]).testzip() is None, 'a record CRC is wrong'\n"
                           "def layout(path):\n"
                           "    sd = torch.load(path)\n"
                           "    return {k: (v.storage().data_ptr(), v.storage_offset(), v.storage().size())\n"
                           "            for k, v in sd.items()}\n"
                           "g, o = layout(sys.argv[1]), layout(sys.argv[2])\n"
                           "groups = [['embed.weight', 'layers.0.attn.weight', 'layers.0.attn.bias'],\n"
                           "          ['layers.1.attn.weight', 'layers.1.scale']]\n"
                           "for keys in groups:\n"
                           "    assert len({g[k][0] for k in keys}) == 1, ('group not one storage', keys)\n"
                           "    offsets = [g[k][1] for k in keys]\n"
                           "    assert offsets[0] == 0 and offsets == sorted(offsets), offsets\n"
                           "    assert g[keys[0]][2] >= sum(torch.Size(torch.load(sys.argv[1])[k].shape).numel()\n"
                           "                                for k in keys)\n"
                           "    assert all(o[k][1] == 0 for k in keys), 'staged copy keeps views'\n"
                           "    assert len({o[k][0] for k in keys}) == len(keys), 'staged copy shares storages'\n"
                           "assert g['head.weight'][:2] == g['embed.weight'][:2], 'shared param not aliased'\n"
                           "assert g['layers.0.norm.weight'][0] not in {g[k][0] for k in groups[0]}\n"
                           "print('ok')\n"),
            {grouped, own});
        const Run check = ckptscope({"check", grouped.toStdString()});
        QVERIFY2(check.rc == 0, (check.out + check.err).c_str());
        // head.weight shares embed.weight's view inside the group's storage: still named a tie.
        QVERIFY2(check.out.find("some of them the same: tied") != std::string::npos, check.out.c_str());
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
        QTest::addColumn<QString>("storedIn");  // the text's STORED IN column
        QTest::addColumn<QString>("rankFile");  // in the JSON's stored_in
        QTest::addColumn<QString>("fileError");
        QTest::newRow("save dir") << "zero3_w2"
                                  << "2 rank files: zero_pp_rank_0_mp_rank_00_optim_states.pt"
                                  << "zero_pp_rank_0_mp_rank_00_optim_states.pt"
                                  << "";
        QTest::newRow("tag folder") << "zero3_bf16_w2/global_step3"
                                    << "2 rank files: bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
                                    << "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
                                    << "";
        QTest::newRow("missing ranks") << "zero3_no_optim"
                                       << "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt (missing)"
                                       << "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
                                       << "missing";
    }
    void inspectListsTheConsolidatedModel()
    {
        QFETCH(QString, entry);
        QFETCH(QString, storedIn);
        QFETCH(QString, rankFile);
        QFETCH(QString, fileError);
        const Run r = ckptscope({"inspect", "--json", fixture(entry).toStdString()});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QJsonObject doc = jsonOf(r);
        QCOMPARE(doc.value(QStringLiteral("set")).toObject().value(QStringLiteral("kind")).toString(),
                 QStringLiteral("deepspeed-zero"));
        const QJsonArray tensors = doc.value(QStringLiteral("tensors")).toArray();
        QCOMPARE(tensors.size(), 11);
        QJsonObject embed;
        QJsonObject steps;
        for (const auto& v : tensors) {
            const QJsonObject t = v.toObject();
            if (t.value(QStringLiteral("path")).toString() == QStringLiteral("embed.weight")) {
                embed = t;
            }
            if (t.value(QStringLiteral("path")).toString() == QStringLiteral("layers.0.norm.num_batches_tracked")) {
                steps = t;
            }
        }
        QCOMPARE(embed.value(QStringLiteral("shape")).toArray(), (QJsonArray{50, 16}));
        QCOMPARE(embed.value(QStringLiteral("dtype")).toString(), QStringLiteral("float32"));
        QCOMPARE(embed.value(QStringLiteral("location")).toString(), QStringLiteral("cpu"));
        QVERIFY(embed.value(QStringLiteral("stored_in")).toArray().contains(rankFile));
        bool listed = false;
        for (const auto& f : doc.value(QStringLiteral("set")).toObject().value(QStringLiteral("files")).toArray()) {
            if (f.toObject().value(QStringLiteral("path")).toString() == rankFile) {
                listed = true;
                QCOMPARE(f.toObject().value(QStringLiteral("error")).toString(), fileError);
                QCOMPARE(f.toObject().value(QStringLiteral("read")).toBool(), fileError.isEmpty());
            }
        }
        QVERIFY(listed);
        QCOMPARE(steps.value(QStringLiteral("dtype")).toString(), QStringLiteral("float32"));  // .float()
        const Run text = ckptscope({"inspect", fixture(entry).toStdString()});
        QCOMPARE(text.rc, 0);
        QVERIFY(text.out.find("DeepSpeed ZeRO checkpoint") != std::string::npos);
        QVERIFY2(text.out.find(storedIn.toStdString()) != std::string::npos, text.out.c_str());
    }

    // zero3-placeholder-module is info where every rank's optimizer states were read (the set
    // consolidates: a healthy ZeRO-3 folder passes check), a warning where they were not.
    void checkNamesWhatIsBroken_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QStringList>("codes");
        QTest::addColumn<int>("rc");
        QTest::addColumn<QString>("names");
        QTest::addColumn<QString>("placeholders");  // the zero3-placeholder-module severity
        // shared-storage: the consolidated model's param groups are one storage each (zero_to_fp32's
        // layout), which `check` of the set now sees as `check` of the converted file does.
        QTest::newRow("stage 2 complete") << "zero2_w3" << QStringList{QStringLiteral("shared-storage")} << 0 << ""
                                          << "";
        QTest::newRow("stage 3 complete")
            << "zero3_w2" << QStringList{QStringLiteral("zero3-placeholder-module"), QStringLiteral("shared-storage")}
            << 0 << "module/embed.weight"
            << "info";
        QTest::newRow("stage 3 complete, from a rank file")
            << "zero3_w3/global_step3/zero_pp_rank_2_mp_rank_00_optim_states.pt"
            << QStringList{QStringLiteral("zero3-placeholder-module"), QStringLiteral("shared-storage")} << 0
            << "module/embed.weight"
            << "info";
        QTest::newRow("no optimizer files")
            << "zero3_no_optim"
            << QStringList{QStringLiteral("zero-rank-missing"), QStringLiteral("zero3-placeholder-module"),
                           QStringLiteral("shared-storage")}
            << 1 << "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"
            << "warning";
        QTest::newRow("stale rank file") << "zero2_stale_rank"
                                         << QStringList{QStringLiteral("world-size-mismatch"),
                                                        QStringLiteral("shared-storage")}
                                         << 1 << "zero_pp_rank_2_mp_rank_00_optim_states.pt"
                                         << "";
        QTest::newRow("truncated rank file")
            << "zero3_truncated"
            << QStringList{QStringLiteral("shard-unreadable"), QStringLiteral("zero3-placeholder-module"),
                           QStringLiteral("shared-storage")}
            << 1 << "zero_pp_rank_1_mp_rank_00_optim_states.pt"
            << "warning";
    }
    void checkNamesWhatIsBroken()
    {
        QFETCH(QString, set);
        QFETCH(QStringList, codes);
        QFETCH(int, rc);
        QFETCH(QString, names);
        QFETCH(QString, placeholders);
        const Run r = ckptscope({"check", "--json", fixture(set).toStdString()});
        QVERIFY2(r.rc == rc, r.err.c_str());
        QCOMPARE(findingCodes(r), codes);
        QVERIFY2(r.out.find(names.toStdString()) != std::string::npos, r.out.c_str());
        QString severity;
        for (const auto& f : jsonOf(r).value(QStringLiteral("findings")).toArray()) {
            if (f.toObject().value(QStringLiteral("code")).toString() == QStringLiteral("zero3-placeholder-module")) {
                severity = f.toObject().value(QStringLiteral("severity")).toString();
            }
        }
        QCOMPARE(severity, placeholders);
    }

    // Any one rank file (or `latest`) of a folder ckptscope reads opens that folder's set, and says
    // so; --file-only reads the file alone.
    void rankFileOpensItsSet_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("stage 1/2 model states") << "zero2_w3/global_step3/mp_rank_00_model_states.pt";
        QTest::newRow("stage 3 model states") << "zero3_w2/global_step3/zero_pp_rank_1_mp_rank_00_model_states.pt";
        QTest::newRow("bf16 optimizer states")
            << "zero3_bf16_w2/global_step3/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt";
        QTest::newRow("latest") << "zero1_w2/latest";
    }
    void rankFileOpensItsSet()
    {
        QFETCH(QString, file);
        const std::string path = fixture(file).toStdString();
        const std::string set = file.left(file.indexOf(QLatin1Char('/'))).toStdString();
        const Run shown = ckptscope({"inspect", path});
        QVERIFY2(shown.rc == 0, shown.err.c_str());
        QVERIFY2(shown.out.rfind("opened as part of the DeepSpeed ZeRO checkpoint in ", 0) == 0, shown.out.c_str());
        QVERIFY(shown.out.find("--file-only") != std::string::npos);
        const Run json = ckptscope({"inspect", "--json", path});
        QVERIFY2(json.rc == 0, json.err.c_str());
        QCOMPARE(jsonOf(json).value(QStringLiteral("tensors")).toArray().size(), 11);
        const Run check = ckptscope({"check", path});
        QVERIFY2(check.rc == 0, check.out.c_str());
        QVERIFY(check.out.find("opened as part of") != std::string::npos);
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("model.pt"));
        const Run convert = ckptscope({"convert", path, "-o", out.toStdString()});
        QVERIFY2(convert.rc == 0, convert.err.c_str());
        QVERIFY(convert.out.find("opened as part of") != std::string::npos);
        pythonSaysOk(kSameAsExpected, {out, fixture(QString::fromStdString(set) + QStringLiteral(".expected.pt"))});
        const Run keep = ckptscope({"convert", path, "-o", out.toStdString(), "--keep-optimizer"});
        QVERIFY2(keep.rc == 0, keep.err.c_str());

        // --file-only: the torch.save file as it is (`latest` is no torch file at all).
        const Run alone = ckptscope({"inspect", "--file-only", "--json", path});
        if (file.endsWith(QStringLiteral("latest"))) {
            QCOMPARE(alone.rc, 2);
            return;
        }
        QVERIFY2(alone.rc == 0, alone.err.c_str());
        QVERIFY(alone.out.find(file.contains(QStringLiteral("optim")) ? "\"optimizer_state_dict/" : "\"module/") !=
                std::string::npos);
        QVERIFY(alone.out.find("opened as part of") == std::string::npos);
        const Run aloneText = ckptscope({"inspect", "--file-only", path});
        QVERIFY(aloneText.out.find("opened as part of") == std::string::npos);
        const Run copied =
            ckptscope({"convert", "--file-only", path, "-o", tmp.filePath(QStringLiteral("copy.pt")).toStdString()});
        QVERIFY2(copied.rc == 0, copied.err.c_str());
        const Run noKeep = ckptscope({"convert", "--file-only", path, "-o", out.toStdString(), "--keep-optimizer"});
        QCOMPARE(noKeep.rc, 2);
        QVERIFY2(noKeep.err.find("not --file-only") != std::string::npos, noKeep.err.c_str());
#ifdef CKPTSCOPE_TEST_HELPER
        // testload (LibTorch on the CPU): the set as the one file convert writes, or the file alone.
        qputenv("CKPTSCOPE_TORCH_HELPER", QByteArray(CKPTSCOPE_TEST_HELPER));
        const Run loaded = ckptscope({"testload", path, "--device", "cpu"});
        QVERIFY2(loaded.rc == 0, loaded.err.c_str());
        QVERIFY2(loaded.out.rfind("opened as part of the DeepSpeed ZeRO checkpoint", 0) == 0, loaded.out.c_str());
        QVERIFY(loaded.out.find("loaded 11 tensors") != std::string::npos);
        const Run loadedAlone = ckptscope({"testload", path, "--device", "cpu", "--file-only"});
        QVERIFY2(loadedAlone.rc == 0, loadedAlone.err.c_str());
        QVERIFY(loadedAlone.out.find("opened as part of") == std::string::npos);
        QVERIFY(loadedAlone.out.find("loaded 11 tensors") == std::string::npos);
#endif
    }

    // A file whose folder is no set ckptscope reads stays the torch.save file it is: a lone model
    // states file (its rank files not fetched: the stage 1/2 one holds the whole 16-bit module),
    // and the model states of a BF16_Optimizer or tensor-parallel run, which open() refuses.
    void otherFilesStayFiles_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("copyAlone");  // "yes": copied into a folder of its own first
        QTest::newRow("lone stage 1/2 model states") << "zero2_w3/global_step3/mp_rank_00_model_states.pt"
                                                     << "yes";
        QTest::newRow("stage 3 model states, no optimizer files")
            << "zero3_no_optim/global_step3/zero_pp_rank_0_mp_rank_00_model_states.pt"
            << "";
        QTest::newRow("BF16_Optimizer") << "bf16_optimizer_w2/global_step3/mp_rank_00_model_states.pt"
                                        << "";
        QTest::newRow("tensor parallel") << "zero2_tensor_parallel/global_step3/mp_rank_00_model_states.pt"
                                         << "";
    }
    void otherFilesStayFiles()
    {
        QFETCH(QString, file);
        QFETCH(QString, copyAlone);
        QTemporaryDir tmp;
        QString path = fixture(file);
        if (copyAlone == QStringLiteral("yes")) {
            const QString alone = tmp.filePath(QStringLiteral("mp_rank_00_model_states.pt"));
            QVERIFY(QFile::copy(path, alone));
            path = alone;
        }
        const Run shown = ckptscope({"inspect", "--json", path.toStdString()});
        QVERIFY2(shown.rc == 0, shown.err.c_str());
        QVERIFY(shown.out.find("\"path\": \"module/") != std::string::npos);  // the file's own tree
        const Run text = ckptscope({"inspect", path.toStdString()});
        QCOMPARE(text.rc, 0);
        QVERIFY(text.out.find("opened as part of") == std::string::npos);
        const Run check = ckptscope({"check", "--json", path.toStdString()});
        QVERIFY(!findingCodes(check).contains(QStringLiteral("zero-rank-missing")));
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
                 (QStringList{QStringLiteral("zero-rank-missing"), QStringLiteral("zero3-placeholder-module"),
                              QStringLiteral("shared-storage")}));
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

    // One ZeRO-3 rank's model states read alone: its 0-element `module` tensors are named as
    // placeholders with where the weights are, and no finding offers an export of this file (it
    // would write the placeholders as the model).
    void oneRankModelStatesAlone()
    {
        const QString name = QStringLiteral("zero_pp_rank_0_mp_rank_00_model_states.pt");
        const QString inSet = fixture(QStringLiteral("zero3_bf16_w2/global_step3/") + name);
        QTemporaryDir tmp;
        const QString alone = tmp.filePath(name);
        QVERIFY(QFile::copy(inSet, alone));
        const Run check = ckptscope({"check", "--json", alone.toStdString()});
        QCOMPARE(check.rc, 1);
        QCOMPARE(findingCodes(check), QStringList{QStringLiteral("zero3-placeholder-module")});
        QVERIFY2(check.out.find("none is beside it") != std::string::npos, check.out.c_str());
        const Run fileOnly = ckptscope({"check", "--file-only", inSet.toStdString()});
        QVERIFY2(fileOnly.out.find("some are beside it") != std::string::npos, fileOnly.out.c_str());

        const QDir corpus(QStringLiteral("/work/shared/corpus"));
        const QStringList dirs =
            corpus.entryList({QStringLiteral("bigyanghimire__deepspeed-experiments*")}, QDir::Dirs);
        if (dirs.isEmpty()) {
            QSKIP("the shared corpus is not on this machine (the real rank file, saved on cuda:0)");
        }
        const std::string real = corpus.filePath(dirs.first()).toStdString() + "/global_step99/" + name.toStdString();
        const Run realCheck = ckptscope({"check", "--file-only", "--json", real});
        QVERIFY(findingCodes(realCheck).contains(QStringLiteral("zero3-placeholder-module")));
        QVERIFY(findingCodes(realCheck).contains(QStringLiteral("device-pinned")));
        for (const auto& f : jsonOf(realCheck).value(QStringLiteral("findings")).toArray()) {
            QVERIFY2(f.toObject().value(QStringLiteral("fix")).isNull(),
                     qPrintable(f.toObject().value(QStringLiteral("code")).toString()));
        }
    }
};

QTEST_GUILESS_MAIN(TestZero)
#include "tst_zero.moc"
