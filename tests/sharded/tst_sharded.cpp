// Multi-file checkpoints through `ckptscope` in-process: Hugging Face sharded sets opened from the
// folder, the index or any shard; the set-level findings; consolidation checked by real PyTorch
// 1.13 against the merged state dict gen_sharded.py saved; the formats only detected, by name.
#include "checkpoint/checkpoint.h"
#include "cli_json.h"
#include "process_run.h"
#include "sharded/listing.h"
#include "util/bytes.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <QProcess>
#include <QTemporaryDir>
#include <QtEndian>
#include <QtTest>

#include <algorithm>

namespace {

// A set of gen_sharded.py's, or gen_dcp.py's (dcp_*) or gen_fsdp.py's (fsdp_*).
QString fixture(const QString& name)
{
    if (name.startsWith(QStringLiteral("dcp_"))) {
        return QStringLiteral(CKPTSCOPE_DCP_FIXTURE_DIR "/") + name;
    }
    if (name.startsWith(QStringLiteral("fsdp_"))) {
        return QStringLiteral(CKPTSCOPE_FSDP_FIXTURE_DIR "/") + name;
    }
    return QStringLiteral(CKPTSCOPE_SHARDED_FIXTURE_DIR "/") + name;
}

using Run = ckpt::test::CliRun;
using ckpt::test::ckptscope;
using ckpt::test::findingCodes;
using ckpt::test::jsonOf;

QJsonObject readJson(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    return QJsonDocument::fromJson(f.readAll()).object();
}

void touch(const QString& path)
{
    QDir().mkpath(QFileInfo(path).absolutePath());
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("x");
}

}  // namespace

class TestSharded : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // `check SET` runs every single-file rule on the set opened as one checkpoint (no consolidated
    // copy is written): finding for finding what `check` of the file `convert SET -o` writes says,
    // with --values and --against too, plus the set's own findings.
    // convert of a set with edits reads the set in place (set_view.h, box_view.h): no consolidated
    // copy is staged first. Under a 4 KiB file-size limit (RLIMIT_FSIZE, ulimit -f) a
    // staged copy of these sets (tens of KiB) could not be written; the plan is made all the same.
    void convertEditsReadTheSetInPlace_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QStringList>("edits");
        QTest::newRow("HF .bin, strip module.")
            << "hf_ddp_cuda" << QStringList{QStringLiteral("--strip-prefix"), QStringLiteral("module.")};
        QTest::newRow("HF safetensors, drop")
            << "hf_st" << QStringList{QStringLiteral("--drop"), QStringLiteral("head.weight")};
        QTest::newRow("ZeRO-2, to safetensors")
            << "zero2_complete" << QStringList{QStringLiteral("--format"), QStringLiteral("safetensors")};
        QTest::newRow("DCP, add a prefix")
            << "dcp_basic" << QStringList{QStringLiteral("--add-prefix"), QStringLiteral("m.")};
        QTest::newRow("FSDP rank files, to safetensors")
            << "fsdp_st" << QStringList{QStringLiteral("--format"), QStringLiteral("safetensors")};
    }
    void convertEditsReadTheSetInPlace()
    {
        QFETCH(QString, set);
        QFETCH(QStringList, edits);
        QTemporaryDir tmp;
        std::vector<std::string> argv{"/bin/sh",
                                      "-c",
                                      "ulimit -f 4 && exec \"$0\" \"$@\"",
                                      CKPTSCOPE_BINARY_DIR "/app/ckptscope",
                                      "convert",
                                      "--dry-run",
                                      "--json",
                                      fixture(set).toStdString(),
                                      "-o",
                                      tmp.filePath(QStringLiteral("out.pt")).toStdString()};
        for (const auto& e : edits) {
            argv.push_back(e.toStdString());
        }
        const auto r = ckpt::test::runProcess(argv);
        QVERIFY2(r.rc == 0, r.err.constData());
        const QJsonObject plan = QJsonDocument::fromJson(r.out).object();
        QVERIFY2(plan.value(QStringLiteral("steps")).isArray(), r.out.constData());
        QVERIFY(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot).isEmpty());
        QVERIFY(
            QDir(fixture(set)).entryList(QDir::Files | QDir::Hidden).filter(QStringLiteral(".ckptscope")).isEmpty());
    }

    // A set that cannot be one checkpoint (a quantized tensor, which no consolidation writes) keeps
    // its own findings in `check`, with one line on stderr saying why the file rules did not run;
    // asked for --values, which needs them, it is refused.
    void checkOfASetThatIsNoCheckpoint()
    {
        const std::string set = fixture(QStringLiteral("hf_quantized")).toStdString();
        const Run r = ckptscope({"check", "--json", set});
        QVERIFY2(r.rc == 0, (r.out + r.err).c_str());
        QVERIFY(jsonOf(r).value(QStringLiteral("findings")).isArray());
        QVERIFY2(r.err.find("the single-file rules did not run on the set") != std::string::npos, r.err.c_str());
        QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), 1);
        const Run values = ckptscope({"check", "--values", set});
        QCOMPARE(values.rc, 2);
        QVERIFY2(values.err.find("layers.0.qweight") != std::string::npos, values.err.c_str());
        // diff compares it shard by shard, as each tensor lives whole in one shard.
        const Run same = ckptscope({"diff", "--strict", set, set});
        QVERIFY2(same.rc == 0, (same.out + same.err).c_str());
    }

    void checkOfASetIsCheckOfItsConsolidation_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QStringList>("expected");  // codes the set's check must hold
        QTest::newRow("DDP from cuda:1, .bin shards")
            << "hf_ddp_cuda" << QStringList{}
            << QStringList{QStringLiteral("module-prefix"), QStringLiteral("device-pinned")};
        QTest::newRow("its NaN, --values") << "hf_ddp_cuda" << QStringList{QStringLiteral("--values")}
                                           << QStringList{QStringLiteral("nonfinite-values")};
        QTest::newRow("safetensors, --values") << "hf_st" << QStringList{QStringLiteral("--values")} << QStringList{};
        QTest::newRow("ZeRO-2, --values")
            << "zero2_complete" << QStringList{QStringLiteral("--values")} << QStringList{};
        QTest::newRow("--against the file itself") << "hf_ddp_cuda" << QStringList{QStringLiteral("--against")}
                                                   << QStringList{QStringLiteral("strict-load-ok")};
        QTest::newRow("ZeRO, --against") << "zero2_w3" << QStringList{QStringLiteral("--against")}
                                         << QStringList{QStringLiteral("strict-load-ok")};
        // Chunk boxes and local shards, assembled as they are read.
        QTest::newRow("DCP, --values") << "dcp_basic" << QStringList{QStringLiteral("--values")} << QStringList{};
        QTest::newRow("DCP, one file per item, --against") << "dcp_per_item" << QStringList{QStringLiteral("--against")}
                                                           << QStringList{QStringLiteral("strict-load-ok")};
        QTest::newRow("FSDP ShardedTensors, --values")
            << "fsdp_st" << QStringList{QStringLiteral("--values")} << QStringList{};
        QTest::newRow("FSDP DTensors, --against") << "fsdp_dtensor" << QStringList{QStringLiteral("--against")}
                                                  << QStringList{QStringLiteral("strict-load-ok")};
    }
    void checkOfASetIsCheckOfItsConsolidation()
    {
        QFETCH(QString, set);
        QFETCH(QStringList, args);
        QFETCH(QStringList, expected);
        QTemporaryDir tmp;
        const std::string whole = tmp.filePath(QStringLiteral("whole.pt")).toStdString();
        const Run convert = ckptscope({"convert", fixture(set).toStdString(), "-o", whole});
        QVERIFY2(convert.rc == 0, convert.err.c_str());
        auto withArgs = [&](const std::string& input) {
            std::vector<std::string> argv{"check", "--json", input};
            for (const auto& a : args) {
                argv.push_back(a.toStdString());
                if (a == QStringLiteral("--against")) {
                    argv.push_back(whole);
                }
            }
            return ckptscope(argv);
        };
        const Run ofSet = withArgs(fixture(set).toStdString());
        const Run ofFile = withArgs(whole);
        // The same exit code, unless the set's own findings warn (FSDP rank files that torch.load
        // cannot read alone): then 1.
        const auto listing = ckpt::sharded::listSet(ckpt::sharded::detectSet(fixture(set).toStdString()));
        QVERIFY(static_cast<bool>(listing));
        const bool ownWarning = std::any_of(listing->findings.begin(), listing->findings.end(),
                                            [](const auto& f) { return f.severity != ckpt::diagnose::Severity::Info; });
        QVERIFY2(ofSet.rc == (ownWarning ? std::max(ofFile.rc, 1) : ofFile.rc),
                 (ofSet.out + ofSet.err + ofFile.out).c_str());
        // Each finding of the file, with the same paths, is one of the set's.
        auto byCode = [](const Run& r) {
            QMap<QString, QJsonArray> out;
            for (const auto& f : jsonOf(r).value(QStringLiteral("findings")).toArray()) {
                out.insert(f.toObject().value(QStringLiteral("code")).toString(),
                           f.toObject().value(QStringLiteral("paths")).toArray());
            }
            return out;
        };
        const auto setFindings = byCode(ofSet);
        const auto fileFindings = byCode(ofFile);
        for (auto it = fileFindings.begin(); it != fileFindings.end(); ++it) {
            QVERIFY2(setFindings.contains(it.key()),
                     qPrintable(it.key() + QStringLiteral(" missing from the set's check")));
            QCOMPARE(setFindings.value(it.key()), it.value());
        }
        // And the set says nothing else but its own findings (documented under "Sharded sets").
        QStringList own;
        for (const auto& f : listing->findings) {
            own << QString::fromStdString(f.code);
        }
        for (auto it = setFindings.begin(); it != setFindings.end(); ++it) {
            QVERIFY2(fileFindings.contains(it.key()) || own.contains(it.key()),
                     qPrintable(it.key() + QStringLiteral(" is neither the file's nor the set's")));
        }
        for (const auto& code : expected) {
            QVERIFY2(setFindings.contains(code),
                     qPrintable(code + QStringLiteral(": ") + QString::fromStdString(ofSet.out)));
        }
        // Nothing was written beside the set or into the temporary directory.
        QCOMPARE(QDir(tmp.path()).entryList(QDir::Files | QDir::Hidden), QStringList{QStringLiteral("whole.pt")});
    }

    void inspectShowsTheConsolidatedSet_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QString>("entry");
        QTest::newRow("bin folder") << "hf_bin"
                                    << "hf_bin";
        QTest::newRow("bin index") << "hf_bin"
                                   << "hf_bin/pytorch_model.bin.index.json";
        QTest::newRow("bin shard") << "hf_bin"
                                   << "hf_bin/pytorch_model-00002-of-00003.bin";
        QTest::newRow("safetensors folder") << "hf_st"
                                            << "hf_st";
        QTest::newRow("safetensors shard") << "hf_st"
                                           << "hf_st/model-00003-of-00003.safetensors";
    }
    void inspectShowsTheConsolidatedSet()
    {
        QFETCH(QString, set);
        QFETCH(QString, entry);
        const QJsonObject expected = readJson(fixture(set + QStringLiteral(".expected.json")));
        QVERIFY(!expected.isEmpty());
        const Run r = ckptscope({"inspect", "--json", fixture(entry).toStdString()});
        QCOMPARE(r.rc, 0);
        const QJsonArray tensors = jsonOf(r).value(QStringLiteral("tensors")).toArray();
        QCOMPARE(tensors.size(), expected.size());
        for (const auto& v : tensors) {
            const QJsonObject t = v.toObject();
            const QJsonObject want = expected.value(t.value(QStringLiteral("path")).toString()).toObject();
            QVERIFY2(!want.isEmpty(), qPrintable(t.value(QStringLiteral("path")).toString()));
            QCOMPARE(t.value(QStringLiteral("dtype")).toString(), want.value(QStringLiteral("dtype")).toString());
            QCOMPARE(t.value(QStringLiteral("shape")).toArray(), want.value(QStringLiteral("shape")).toArray());
            QCOMPARE(t.value(QStringLiteral("stored_in")).toArray(), QJsonArray{want.value(QStringLiteral("file"))});
            QCOMPARE(t.value(QStringLiteral("location")).toString(), QStringLiteral("cpu"));
        }
        const Run text = ckptscope({"inspect", fixture(entry).toStdString()});
        QCOMPARE(text.rc, 0);
        QVERIFY(text.out.find("Hugging Face sharded checkpoint") != std::string::npos);
    }

    void checkNamesWhatIsBroken_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QStringList>("codes");
        QTest::addColumn<int>("rc");
        QTest::newRow("complete") << "hf_bin" << QStringList{} << 0;
        QTest::newRow("missing shard") << "hf_missing_shard" << QStringList{QStringLiteral("shard-missing")} << 1;
        QTest::newRow("unlisted tensor") << "hf_unlisted" << QStringList{QStringLiteral("index-unlisted-tensor")} << 1;
        QTest::newRow("truncated shard") << "hf_truncated_shard" << QStringList{QStringLiteral("shard-unreadable")}
                                         << 1;
        QTest::newRow("missing tensor") << "hf_missing_tensor" << QStringList{QStringLiteral("index-missing-tensor")}
                                        << 1;
        // shared-storage: the consolidated model holds the restored tie as one storage, as `check` of
        // the converted file says too.
        QTest::newRow("tied head dropped")
            << "hf_tied_dropped" << QStringList{QStringLiteral("tied-weight-missing"), QStringLiteral("shared-storage")}
            << 1;
        QTest::newRow("untied head dropped")
            << "hf_untied_dropped" << QStringList{QStringLiteral("tied-weight-missing")} << 1;
        QTest::newRow("tie recorded by the hub") << "hf_tied_hub" << QStringList{QStringLiteral("shared-storage")} << 0;
    }
    void checkNamesWhatIsBroken()
    {
        QFETCH(QString, set);
        QFETCH(QStringList, codes);
        QFETCH(int, rc);
        const Run r = ckptscope({"check", "--json", fixture(set).toStdString()});
        QCOMPARE(r.rc, rc);
        QCOMPARE(findingCodes(r), codes);
    }

    // The consolidated file is loaded by real torch 1.13 and compared with the merged state dict.
    void consolidatedFileLoadsInTorch()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        QStringList pairs;
        for (const QString& set : {QStringLiteral("hf_bin"), QStringLiteral("hf_st"), QStringLiteral("hf_bin_tied")}) {
            const QString out = tmp.filePath(set + QStringLiteral(".pt"));
            const Run r = ckptscope({"convert", fixture(set).toStdString(), "-o", out.toStdString(), "--single-card"});
            QVERIFY2(r.rc == 0, r.err.c_str());
            pairs << out << fixture(set + QStringLiteral(".expected.pt"));
        }
        const QString script =
            QStringLiteral("import sys, torch\n"
                           "a = sys.argv[1:]\n"
                           "for out, exp in zip(a[::2], a[1::2]):\n"
                           "    got, want = torch.load(out), torch.load(exp)\n"
                           "    assert sorted(got) == sorted(want), (out, sorted(got), sorted(want))\n"
                           "    for k in want:\n"
                           "        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), (out, k)\n"
                           "tied = torch.load(a[-2])\n"
                           "assert tied['head.weight'].data_ptr() == tied['embed.weight'].data_ptr(), 'tie lost'\n"
                           "print('ok')\n");
        QProcess py;
        py.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), script} + pairs);
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
        QCOMPARE(py.readAllStandardOutput().trimmed(), QByteArray("ok"));
    }

    // A head transformers dropped as tied (config.json: tie_word_embeddings true) is listed as a
    // second name of its input embedding, as a tie the index metadata records is; untied, it is not.
    void tiedHeadIsListedAsItsInput_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<bool>("listed");
        QTest::newRow("config ties it") << "hf_tied_dropped" << true;
        QTest::newRow("index metadata ties it") << "hf_tied_hub" << true;
        QTest::newRow("config unties it") << "hf_untied_dropped" << false;
    }
    void tiedHeadIsListedAsItsInput()
    {
        QFETCH(QString, set);
        QFETCH(bool, listed);
        const Run r = ckptscope({"inspect", "--json", fixture(set).toStdString()});
        QCOMPARE(r.rc, 0);
        QJsonObject head;
        QJsonObject embed;
        for (const auto& v : jsonOf(r).value(QStringLiteral("tensors")).toArray()) {
            const QJsonObject t = v.toObject();
            if (t.value(QStringLiteral("path")).toString() == QStringLiteral("lm_head.weight")) {
                head = t;
            } else if (t.value(QStringLiteral("path")).toString() == QStringLiteral("model.embed_tokens.weight")) {
                embed = t;
            }
        }
        QVERIFY(!embed.isEmpty());
        QCOMPARE(!head.isEmpty(), listed);
        if (listed) {
            for (const char* field : {"dtype", "shape", "location", "nbytes", "stored_in"}) {
                QCOMPARE(head.value(QLatin1String(field)), embed.value(QLatin1String(field)));
            }
        }
        const Run check = ckptscope({"check", fixture(set).toStdString()});
        QCOMPARE(check.out.find("`ckptscope convert` restores the tie") != std::string::npos,
                 set == QStringLiteral("hf_tied_dropped"));
    }

    // A restored or recorded tie is a second name of stored bytes: listed as "tied to" its input
    // and counted once. The stored total is what the shard files hold, each read alone.
    void tiedHeadIsCountedOnce_data()
    {
        QTest::addColumn<QString>("set");
        QTest::newRow("config ties it") << "hf_tied_dropped";
        QTest::newRow("index metadata ties it") << "hf_tied_hub";
    }
    void tiedHeadIsCountedOnce()
    {
        QFETCH(QString, set);
        std::uint64_t stored = 0;
        const QDir dir(fixture(set));
        for (const auto& f : dir.entryList({QStringLiteral("*-of-*")}, QDir::Files)) {
            auto c = ckpt::openCheckpoint(dir.filePath(f).toStdString());
            QVERIFY(static_cast<bool>(c));
            for (const auto& t : (*c)->tensors) {
                stored += t.nbytes;
            }
        }
        QVERIFY(stored > 0);

        const auto listing = ckpt::sharded::listSet(ckpt::sharded::detectSet(fixture(set).toStdString()));
        QVERIFY(static_cast<bool>(listing));
        QCOMPARE(listing->totalBytes(), stored);
        const auto head = std::find_if(listing->rows.begin(), listing->rows.end(),
                                       [](const auto& r) { return r.key == "lm_head.weight"; });
        QVERIFY(head != listing->rows.end());
        QCOMPARE(head->tiedTo, std::string("model.embed_tokens.weight"));

        const Run text = ckptscope({"inspect", fixture(set).toStdString()});
        QCOMPARE(text.rc, 0);
        QVERIFY2(text.out.find(", " + ckpt::humanBytes(stored) + " stored\n") != std::string::npos, text.out.c_str());
        QVERIFY2(text.out.find("(1 tied to another)") != std::string::npos, text.out.c_str());
        QVERIFY2(text.out.find("tied to model.embed_tokens.weight\n") != std::string::npos, text.out.c_str());

        const Run json = ckptscope({"inspect", "--json", fixture(set).toStdString()});
        QCOMPARE(json.rc, 0);
        std::uint64_t untied = 0;
        for (const auto& v : jsonOf(json).value(QStringLiteral("tensors")).toArray()) {
            const QJsonObject t = v.toObject();
            const QString tiedTo = t.value(QStringLiteral("tied_to")).toString();
            QCOMPARE(tiedTo, t.value(QStringLiteral("path")).toString() == QStringLiteral("lm_head.weight")
                                 ? QStringLiteral("model.embed_tokens.weight")
                                 : QString());
            untied += tiedTo.isEmpty() ? static_cast<std::uint64_t>(t.value(QStringLiteral("nbytes")).toDouble()) : 0;
        }
        QCOMPARE(untied, stored);
        // The totals count the tied head once, as the files store it.
        const QJsonObject totals = jsonOf(json).value(QStringLiteral("totals")).toObject();
        QCOMPARE(static_cast<std::uint64_t>(totals.value(QStringLiteral("storage_bytes")).toDouble()), stored);
    }

    // The consolidation writes the restored head as torch.save(model.state_dict()) writes a tie:
    // the input embedding's storage and view under both names, the head last (the other keys in
    // weight_map order, here the module's), so real torch 1.13 loads it into the tied model with
    // strict=True. Untied, the head stays absent.
    void tiedHeadIsRestoredByConvert()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        QStringList args;
        for (const QString& set : {QStringLiteral("hf_tied_dropped"), QStringLiteral("hf_untied_dropped")}) {
            const QString out = tmp.filePath(set + QStringLiteral(".pt"));
            const Run r = ckptscope({"convert", fixture(set).toStdString(), "-o", out.toStdString()});
            QVERIFY2(r.rc == 0, r.err.c_str());
            args << out << fixture(set + QStringLiteral(".expected.pt"));
        }
        const QString script = QStringLiteral(
            "import sys, torch\n"
            "from torch import nn\n"
            "tied, tied_src, untied, untied_src = sys.argv[1:]\n"
            "class Norm(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__(); self.weight = nn.Parameter(torch.empty(8))\n"
            "class Layer(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__(); self.mlp = nn.Linear(8, 8, bias=False)\n"
            "class Body(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__(); self.embed_tokens = nn.Embedding(40, 8)\n"
            "        self.layers = nn.ModuleList([Layer()]); self.norm = Norm()\n"
            "class CausalLM(nn.Module):\n"
            "    def __init__(self, tie):\n"
            "        super().__init__(); self.model = Body(); self.lm_head = nn.Linear(8, 40, bias=False)\n"
            "        if tie:\n"
            "            self.lm_head.weight = self.model.embed_tokens.weight\n"
            "got, src = torch.load(tied), torch.load(tied_src)\n"
            "m = CausalLM(True)\n"
            "assert list(got) == list(m.state_dict()), list(got)\n"
            "a, b = got['lm_head.weight'], got['model.embed_tokens.weight']\n"
            "assert a.data_ptr() == b.data_ptr() and a.storage().data_ptr() == b.storage().data_ptr(), 'not tied'\n"
            "assert a.storage_offset() == b.storage_offset() and a.stride() == b.stride(), 'another view'\n"
            "for k in src:\n"
            "    assert torch.equal(got[k], src[k]), k\n"
            "assert torch.equal(a, src['model.embed_tokens.weight'])\n"
            "m.load_state_dict(got, strict=True)\n"
            "assert m.lm_head.weight is m.model.embed_tokens.weight and torch.equal(m.lm_head.weight, a)\n"
            "got, src = torch.load(untied), torch.load(untied_src)\n"
            "assert 'lm_head.weight' not in got and sorted(got) == sorted(src), sorted(got)\n"
            "try:\n"
            "    CausalLM(False).load_state_dict(got, strict=True)\n"
            "    raise SystemExit('an untied head was made up')\n"
            "except RuntimeError as e:\n"
            "    assert 'Missing key(s) in state_dict: \"lm_head.weight\"' in str(e), e\n"
            "print('ok')\n");
        QProcess py;
        py.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), script} + args);
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
        QCOMPARE(py.readAllStandardOutput().trimmed(), QByteArray("ok"));
    }

    // safetensors cannot share a storage: the restored tie goes where each output records ties.
    // One file: one name stored, the other in __metadata__ (removed -> kept). A split: the index
    // metadata, which ckptscope reads back as the same tie (no finding, both names consolidated).
    void tiedHeadThroughSafetensorsOutputs()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const std::string set = fixture(QStringLiteral("hf_tied_dropped")).toStdString();
        const QString file = tmp.filePath(QStringLiteral("model.safetensors"));
        Run r = ckptscope({"convert", set, "-o", file.toStdString()});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QString dir = tmp.filePath(QStringLiteral("split"));
        r = ckptscope({"convert", set, "-o", dir.toStdString(), "--shard-size", "1KB", "--format", "safetensors"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QJsonObject meta = readJson(QDir(dir).filePath(QStringLiteral("model.safetensors.index.json")))
                                     .value(QStringLiteral("metadata"))
                                     .toObject();
        QCOMPARE(meta.size(), 2);  // total_size and the one tie
        const Run check = ckptscope({"check", "--json", dir.toStdString()});
        QCOMPARE(check.rc, 0);
        QCOMPARE(findingCodes(check), QStringList{QStringLiteral("shared-storage")});  // the restored tie
        const QString back = tmp.filePath(QStringLiteral("back.pt"));
        r = ckptscope({"convert", dir.toStdString(), "-o", back.toStdString()});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QString script = QStringLiteral(
            "import sys, json, struct, torch\n"
            "path, back, src = sys.argv[1:]\n"
            "src = torch.load(src); names = set(src) | {'lm_head.weight'}\n"
            "value = lambda k: src.get(k, src['model.embed_tokens.weight'])\n"
            "raw = open(path, 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]\n"
            "h = json.loads(raw[8:8 + n]); meta = h.pop('__metadata__')\n"
            "aliases = {k: v for k, v in meta.items() if k != 'format'}\n"
            "assert set(h) | set(aliases) == names and not set(h) & set(aliases), (sorted(h), aliases)\n"
            "for k, v in h.items():\n"
            "    t = torch.frombuffer(bytearray(raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]),\n"
            "                         dtype=torch.float32).view(v['shape'])\n"
            "    assert torch.equal(t, value(k)), k\n"
            "for k, v in aliases.items():\n"
            "    assert v in h and torch.equal(value(k), value(v)), (k, v)\n"
            "got = torch.load(back)\n"
            "assert set(got) == names, sorted(got)\n"
            "assert got['lm_head.weight'].data_ptr() == got['model.embed_tokens.weight'].data_ptr(), 'tie lost'\n"
            "for k in names:\n"
            "    assert torch.equal(got[k], value(k)), k\n"
            "print('ok')\n");
        QProcess py;
        py.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), script, file, back,
                                                               fixture(QStringLiteral("hf_tied_dropped.expected.pt"))});
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
        QCOMPARE(py.readAllStandardOutput().trimmed(), QByteArray("ok"));
    }

    // A tied head in a torch file: both safetensors outputs store the input embedding, as
    // transformers' save_pretrained does (from_pretrained re-ties the head to it), and record the
    // head as its alias; a tie that is no known pair keeps the sorted-first name.
    void tiedHeadKeepsTheInputName()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString src = tmp.filePath(QStringLiteral("tied.pt"));
        QProcess py;
        py.start(QStringLiteral(CKPTSCOPE_PYTHON),
                 QStringList{QStringLiteral("-c"),
                             QStringLiteral("import sys, torch\n"
                                            "g = torch.Generator().manual_seed(3)\n"
                                            "e = torch.randn(40, 8, generator=g); a = torch.randn(4, 4, generator=g)\n"
                                            "torch.save({'lm_head.weight': e, 'model.embed_tokens.weight': e,\n"
                                            "            'model.norm.weight': torch.randn(8, generator=g),\n"
                                            "            'b.weight': a, 'a.weight': a}, sys.argv[1])\n"),
                             src});
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());

        const QString file = tmp.filePath(QStringLiteral("model.safetensors"));
        Run r = ckptscope({"convert", src.toStdString(), "-o", file.toStdString(), "--format", "safetensors"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        QFile f(file);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray raw = f.readAll();
        QVERIFY(raw.size() > 8);
        const auto n = qFromLittleEndian<quint64>(raw.constData());
        QJsonObject header = QJsonDocument::fromJson(raw.mid(8, static_cast<qsizetype>(n))).object();
        const QJsonObject meta = header.take(QStringLiteral("__metadata__")).toObject();
        QStringList stored = header.keys();
        QCOMPARE(stored, (QStringList{QStringLiteral("a.weight"), QStringLiteral("model.embed_tokens.weight"),
                                      QStringLiteral("model.norm.weight")}));
        QCOMPARE(meta.value(QStringLiteral("lm_head.weight")).toString(), QStringLiteral("model.embed_tokens.weight"));
        QCOMPARE(meta.value(QStringLiteral("b.weight")).toString(), QStringLiteral("a.weight"));

        const QString dir = tmp.filePath(QStringLiteral("split"));
        r = ckptscope(
            {"convert", src.toStdString(), "-o", dir.toStdString(), "--shard-size", "1KB", "--format", "safetensors"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        QVERIFY(r.out.find("'lm_head.weight' is tied to 'model.embed_tokens.weight'") != std::string::npos);
        const QJsonObject index = readJson(QDir(dir).filePath(QStringLiteral("model.safetensors.index.json")));
        stored = index.value(QStringLiteral("weight_map")).toObject().keys();
        QCOMPARE(stored, (QStringList{QStringLiteral("a.weight"), QStringLiteral("model.embed_tokens.weight"),
                                      QStringLiteral("model.norm.weight")}));
        const QJsonObject indexMeta = index.value(QStringLiteral("metadata")).toObject();
        QCOMPARE(indexMeta.value(QStringLiteral("lm_head.weight")).toString(),
                 QStringLiteral("model.embed_tokens.weight"));
        QCOMPARE(indexMeta.value(QStringLiteral("b.weight")).toString(), QStringLiteral("a.weight"));
        // Read back, the recorded head is the same tensor as its input again.
        const Run inspect = ckptscope({"inspect", "--json", dir.toStdString()});
        QCOMPARE(inspect.rc, 0);
        QStringList keys;
        for (const auto& v : jsonOf(inspect).value(QStringLiteral("tensors")).toArray()) {
            keys << v.toObject().value(QStringLiteral("path")).toString();
        }
        keys.sort();
        QCOMPARE(keys,
                 (QStringList{QStringLiteral("a.weight"), QStringLiteral("b.weight"), QStringLiteral("lm_head.weight"),
                              QStringLiteral("model.embed_tokens.weight"), QStringLiteral("model.norm.weight")}));
    }

    void incompleteSetIsNotConsolidated()
    {
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("x.pt"));
        const Run r =
            ckptscope({"convert", fixture(QStringLiteral("hf_missing_shard")).toStdString(), "-o", out.toStdString()});
        QCOMPARE(r.rc, 2);
        QVERIFY(r.err.find("shard-missing") != std::string::npos);
        QVERIFY(!QFile::exists(out));
        // With edits the set is staged first: an incomplete one is still refused, and no staged
        // file stays behind.
        const Run edits = ckptscope({"convert", fixture(QStringLiteral("hf_missing_shard")).toStdString(), "-o",
                                     out.toStdString(), "--strip-prefix", "layers."});
        QCOMPARE(edits.rc, 2);
        QVERIFY(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot).isEmpty());
    }

    // Formats recognised by their file names (the layouts of SHARDED.md), each named in the
    // one-line error; DCP is read (tst_dcp), so its empty files here are named as unreadable.
    void otherFormatsAreNamed_data()
    {
        QTest::addColumn<QStringList>("files");
        QTest::addColumn<QString>("open");
        QTest::addColumn<QString>("says");
        QTest::newRow("dcp") << QStringList{QStringLiteral(".metadata"), QStringLiteral("__0_0.distcp"),
                                            QStringLiteral("__1_0.distcp")}
                             << "."
                             << "torch.distributed.checkpoint (DCP) directory";
        QTest::newRow("dcp from a data file")
            << QStringList{QStringLiteral(".metadata"), QStringLiteral("__0_0.distcp")} << "__0_0.distcp"
            << "torch.distributed.checkpoint (DCP) directory";
        QTest::newRow("megatron torch_dist")
            << QStringList{QStringLiteral(".metadata"), QStringLiteral("__0_0.distcp"), QStringLiteral("common.pt"),
                           QStringLiteral("metadata.json")}
            << "."
            << "Megatron-LM torch_dist";
        QTest::newRow("megatron legacy") << QStringList{QStringLiteral("latest_checkpointed_iteration.txt"),
                                                        QStringLiteral("iter_0000010/mp_rank_00/model_optim_rng.pt"),
                                                        QStringLiteral("iter_0000010/mp_rank_01/model_optim_rng.pt")}
                                         << "."
                                         << "Megatron-LM legacy checkpoint";
        QTest::newRow("trainer") << QStringList{QStringLiteral("trainer_state.json"),
                                                QStringLiteral("model.safetensors"), QStringLiteral("optimizer.pt")}
                                 << "."
                                 << "Trainer checkpoint folder; its model model.safetensors: ";  // model_folder.h
    }
    void otherFormatsAreNamed()
    {
        QFETCH(QStringList, files);
        QFETCH(QString, open);
        QFETCH(QString, says);
        QTemporaryDir tmp;
        for (const auto& f : files) {
            touch(tmp.filePath(f));
        }
        if (QFileInfo(tmp.filePath(QStringLiteral("latest"))).exists()) {
            QFile f(tmp.filePath(QStringLiteral("latest")));
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("global_step5");
        }
        for (const char* cmd : {"inspect", "check", "convert"}) {
            std::vector<std::string> args{cmd, tmp.filePath(open).toStdString()};
            if (std::string(cmd) == "convert") {
                args.insert(args.end(), {"-o", tmp.filePath(QStringLiteral("out.pt")).toStdString()});
            }
            const Run r = ckptscope(args);
            QCOMPARE(r.rc, 2);
            QVERIFY2(r.err.find(says.toStdString()) != std::string::npos, r.err.c_str());
            QVERIFY(r.err.find('\n') == r.err.size() - 1);  // one line
        }
    }

    // ZeRO folders with DeepSpeed's file names and model-state keys (gen_sharded.py): the world
    // size in the rank-0 model states against the rank files present, and ZeRO-3's empty module.
    void zeroCheck_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QStringList>("codes");
        QTest::addColumn<int>("rc");
        QTest::newRow("stage 2, every rank")  // its param groups one storage each, as convert writes them
            << "zero2_complete" << QStringList{QStringLiteral("shared-storage")} << 0;
        QTest::newRow("stage 3, rank 1 optim missing")
            << "zero3_rank_missing"
            << QStringList{QStringLiteral("zero-rank-missing"), QStringLiteral("zero3-placeholder-module")} << 1;
    }
    void zeroCheck()
    {
        QFETCH(QString, set);
        QFETCH(QStringList, codes);
        QFETCH(int, rc);
        const Run r = ckptscope({"check", "--json", fixture(set).toStdString()});
        QVERIFY2(r.rc == rc, r.err.c_str());
        QCOMPARE(findingCodes(r), codes);
        if (rc != 0) {  // the missing rank file is named
            QVERIFY(r.out.find("zero_pp_rank_1_mp_rank_00_optim_states.pt") != std::string::npos);
        }
    }

    // ZeRO stage 1/2 -> fp32 parameters, loaded by torch 1.13 and compared with the master weights
    // gen_sharded.py partitioned (2 and 3 ranks: parameters straddle rank boundaries).
    void zero12ConsolidatesToFp32()
    {
        QTemporaryDir tmp;
        QStringList pairs;
        for (const QString& set : {QStringLiteral("zero2_complete"), QStringLiteral("zero2_w3")}) {
            const QString out = tmp.filePath(set + QStringLiteral(".pt"));
            const Run r = ckptscope({"convert", fixture(set).toStdString(), "-o", out.toStdString()});
            QVERIFY2(r.rc == 0, r.err.c_str());
            pairs << out << fixture(set + QStringLiteral(".expected.pt"));
        }
        const QString script =
            QStringLiteral("import sys, torch\n"
                           "a = sys.argv[1:]\n"
                           "for out, exp in zip(a[::2], a[1::2]):\n"
                           "    got, want = torch.load(out), torch.load(exp)\n"
                           "    assert list(got) == list(want), (out, list(got), list(want))\n"
                           "    for k in want:\n"
                           "        assert got[k].dtype == torch.float32 and torch.equal(got[k], want[k]), (out, k)\n"
                           "print('ok')\n");
        QProcess py;
        py.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), script} + pairs);
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
        QCOMPARE(py.readAllStandardOutput().trimmed(), QByteArray("ok"));
    }

    // --shard-size against a port of huggingface_hub's split (gen_sharded.py): the same shard
    // names, keys per shard, total_size and tied-name metadata; every shard read back by torch
    // 1.13 (.bin) or parsed byte for byte (safetensors) equals the source tensors.
    void splitMatchesTheHub_data()
    {
        QTest::addColumn<QString>("format");
        QTest::newRow("bin") << "bin";
        QTest::newRow("safetensors") << "safetensors";
    }
    void splitMatchesTheHub()
    {
        QFETCH(QString, format);
        QTemporaryDir tmp;
        const QString dir = tmp.filePath(QStringLiteral("set"));
        std::vector<std::string> args{"convert",      fixture(QStringLiteral("split_src.pt")).toStdString(),
                                      "-o",           dir.toStdString(),
                                      "--shard-size", "1000"};
        if (format == QStringLiteral("safetensors")) {
            args.insert(args.end(), {"--format", "safetensors"});
        }
        const Run r = ckptscope(args);
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QJsonObject want = readJson(fixture(QStringLiteral("split_expected_%1.json").arg(format)));
        QVERIFY(!want.isEmpty());
        const QString indexName = format == QStringLiteral("bin") ? QStringLiteral("pytorch_model.bin.index.json")
                                                                  : QStringLiteral("model.safetensors.index.json");
        QCOMPARE(readJson(QDir(dir).filePath(indexName)), want.value(QStringLiteral("index")).toObject());
        QStringList files = want.value(QStringLiteral("files")).toObject().keys();
        files << indexName;
        files.sort();
        QCOMPARE(QDir(dir).entryList(QDir::Files | QDir::Hidden, QDir::Name), files);
        QVERIFY(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot) ==
                QStringList{QStringLiteral("set")});  // no temporary left beside it
        const QString script = QStringLiteral(
            "import sys, json, struct, torch\n"
            "src = torch.load(sys.argv[1]); want = json.load(open(sys.argv[2]))['files']; d = sys.argv[3]\n"
            "DT = {'F32': torch.float32, 'F16': torch.float16}\n"
            "for f, keys in want.items():\n"
            "    if f.endswith('.bin'):\n"
            "        got = torch.load(d + '/' + f)\n"
            "    else:\n"
            "        raw = open(d + '/' + f, 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]\n"
            "        h = json.loads(raw[8:8 + n]); assert h.pop('__metadata__') == {'format': 'pt'}, f\n"
            "        got = {k: torch.frombuffer(bytearray(raw[8 + n + v['data_offsets'][0]:8 + n + "
            "v['data_offsets'][1]]), dtype=DT[v['dtype']]).view(v['shape']) for k, v in h.items()}\n"
            "    assert sorted(got) == sorted(keys), (f, sorted(got), keys)\n"
            "    for k in keys:\n"
            "        assert got[k].dtype == src[k].dtype and torch.equal(got[k], src[k]), (f, k)\n"
            "    if 'tied.weight' in got:\n"
            "        assert got['tied.weight'].data_ptr() == got['a.weight'].data_ptr(), 'tie lost'\n"
            "print('ok')\n");
        QProcess py;
        py.start(QStringLiteral(CKPTSCOPE_PYTHON),
                 QStringList{QStringLiteral("-c"), script, fixture(QStringLiteral("split_src.pt")),
                             fixture(QStringLiteral("split_expected_%1.json").arg(format)), dir});
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
        QCOMPARE(py.readAllStandardOutput().trimmed(), QByteArray("ok"));
    }

    // Split to safetensors, then consolidate: every tensor's bytes come back, and the tied name
    // recorded in the index metadata is a view of the kept tensor again.
    void splitThenConsolidateIsIdentity()
    {
        QTemporaryDir tmp;
        const QString dir = tmp.filePath(QStringLiteral("st"));
        const QString back = tmp.filePath(QStringLiteral("back.pt"));
        const QString src = fixture(QStringLiteral("hf_bin_tied.expected.pt"));
        Run r = ckptscope(
            {"convert", src.toStdString(), "-o", dir.toStdString(), "--shard-size", "3KB", "--format", "safetensors"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        QVERIFY(r.out.find("'head.weight' is tied to 'embed.weight'") != std::string::npos);
        r = ckptscope({"convert", dir.toStdString(), "-o", back.toStdString()});
        QVERIFY2(r.rc == 0, r.err.c_str());
        // A set as the input of a re-shard with an edit: staged, edited, split again.
        const QString re = tmp.filePath(QStringLiteral("re"));
        r = ckptscope({"convert", dir.toStdString(), "-o", re.toStdString(), "--shard-size", "2000", "--strip-prefix",
                       "layers."});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QJsonObject reIndex = readJson(QDir(re).filePath(QStringLiteral("pytorch_model.bin.index.json")));
        QVERIFY(reIndex.value(QStringLiteral("weight_map")).toObject().contains(QStringLiteral("0.attn.weight")));
        QCOMPARE(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot).size(), 3);
        const QString script = QStringLiteral("import sys, torch\n"
                                              "got, want = torch.load(sys.argv[1]), torch.load(sys.argv[2])\n"
                                              "assert sorted(got) == sorted(want), (sorted(got), sorted(want))\n"
                                              "for k in want:\n"
                                              "    assert got[k].dtype == want[k].dtype and torch.equal(got[k], "
                                              "want[k]), k\n"
                                              "assert got['head.weight'].data_ptr() == got['embed.weight'].data_ptr()\n"
                                              "print('ok')\n");
        QProcess py;
        py.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), script, back, src});
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
        QCOMPARE(py.readAllStandardOutput().trimmed(), QByteArray("ok"));
    }

    // A set converted with edits and to safetensors goes through the single-file path.
    void setTakesEditsAndSafetensors()
    {
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("model.safetensors"));
        const Run r = ckptscope({"convert", fixture(QStringLiteral("hf_bin")).toStdString(), "-o", out.toStdString(),
                                 "--strip-prefix", "layers.", "--drop", "head.weight"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const Run shown = ckptscope({"inspect", "--json", out.toStdString()});
        QCOMPARE(shown.rc, 0);
        QVERIFY(shown.out.find("\"0.attn.weight\"") != std::string::npos);
        QVERIFY(shown.out.find("head.weight") == std::string::npos);
        QCOMPARE(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot),
                 QStringList{QStringLiteral("model.safetensors")});
    }

    // With no edit, `-o NAME.safetensors` still means safetensors, as for a single file.
    void setToSafetensorsByItsName()
    {
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("model.safetensors"));
        const Run r = ckptscope({"convert", fixture(QStringLiteral("hf_bin")).toStdString(), "-o", out.toStdString()});
        QVERIFY2(r.rc == 0, r.err.c_str());
        QFile f(out);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray head = f.read(9);
        QCOMPARE(head.size(), 9);
        QCOMPARE(head.at(8), '{');  // an 8-byte header length, then the JSON header: not a zip's "PK"
        const Run shown = ckptscope({"inspect", "--json", out.toStdString()});
        QCOMPARE(shown.rc, 0);
        QCOMPARE(jsonOf(shown).value(QStringLiteral("format")).toString(), QStringLiteral("safetensors"));
        QCOMPARE(jsonOf(shown).value(QStringLiteral("tensors")).toArray().size(), 8);  // every tensor of the set
    }

    // Refusals: one line, exit 2, nothing written (no folder, no temporary).
    void splitRefusals_data()
    {
        QTest::addColumn<QString>("input");
        QTest::addColumn<QString>("size");
        QTest::addColumn<QString>("existing");  // "file", "set" or ""
        QTest::addColumn<QString>("says");
        QTest::newRow("bad size") << "split_src.pt"
                                  << "5XB"
                                  << ""
                                  << "is not a size";
        QTest::newRow("zero size") << "split_src.pt"
                                   << "0"
                                   << ""
                                   << "is not a size";
        QTest::newRow("target is a file") << "split_src.pt"
                                          << "1KB"
                                          << "file"
                                          << "exists and is not a folder";
        QTest::newRow("folder holds a set") << "split_src.pt"
                                            << "1KB"
                                            << "set"
                                            << "already holds pytorch_model.bin";
        QTest::newRow("not a state dict") << "zero2_complete/global_step3/mp_rank_00_model_states.pt"
                                          << "1KB"
                                          << ""
                                          << "is not a tensor";
    }
    void splitRefusals()
    {
        QFETCH(QString, input);
        QFETCH(QString, size);
        QFETCH(QString, existing);
        QFETCH(QString, says);
        QTemporaryDir tmp;
        const QString target = tmp.filePath(QStringLiteral("out"));
        if (existing == QStringLiteral("file")) {
            touch(target);
        } else if (existing == QStringLiteral("set")) {
            touch(target + QStringLiteral("/pytorch_model.bin"));
        }
        const QStringList before = QDir(tmp.path()).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot);
        // --file-only: each input is the one file named (a ZeRO rank file would open its set).
        const Run r = ckptscope({"convert", fixture(input).toStdString(), "-o", target.toStdString(), "--shard-size",
                                 size.toStdString(), "--file-only"});
        QCOMPARE(r.rc, 2);
        QVERIFY2(r.err.find(says.toStdString()) != std::string::npos, r.err.c_str());
        QVERIFY(r.err.find('\n') == r.err.size() - 1);
        QCOMPARE(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot), before);
        if (existing == QStringLiteral("set")) {
            QCOMPARE(QDir(target).entryList(QDir::Files | QDir::Hidden),
                     QStringList{QStringLiteral("pytorch_model.bin")});
        }
    }
};

QTEST_GUILESS_MAIN(TestSharded)
#include "tst_sharded.moc"
