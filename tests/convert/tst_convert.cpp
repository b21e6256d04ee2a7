// `ckptscope convert` end to end, in-process: every fixture through both presets, each output
// loaded by real PyTorch (weights_only stand-in, plain torch.load without map_location, strict
// load into the fixture's model), tensors compared byte for byte with the source; round trips.
#include "cli/cmd_convert.h"
#include "cli_run.h"

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <tuple>
#include <unistd.h>

namespace {

QString fixture(const QString& name)
{
    return QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/") + name;
}

using Run = ckpt::test::CliRun;

Run convert(const std::vector<std::string>& args)
{
    return ckpt::test::capture(ckpt::cli::cmdConvert, args);
}

QByteArray sha(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    return QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256);
}

// Runs check_convert.py once over all jobs (importing torch costs seconds per process).
QJsonArray checkWithTorch(const QJsonArray& jobs, const QString& dir)
{
    const QString jobFile = dir + QStringLiteral("/jobs.json");
    QFile f(jobFile);
    if (!f.open(QIODevice::WriteOnly)) {
        return {};
    }
    f.write(QJsonDocument(jobs).toJson());
    f.close();
    QProcess p;
    p.start(QStringLiteral(CKPTSCOPE_PYTHON),
            {QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/convert/check_convert.py"), jobFile});
    if (!p.waitForFinished(540000)) {
        qWarning("check_convert.py did not finish");
        return {};
    }
    if (p.exitCode() != 0) {
        qWarning("check_convert.py failed: %s", p.readAllStandardError().constData());
        return {};
    }
    return QJsonDocument::fromJson(p.readAllStandardOutput()).object().value(QStringLiteral("results")).toArray();
}

struct Kind {
    const char* file;
    const char* model;   // fixture_models class the state dict loads into, "" for none
    const char* select;  // where the state dict sits in the output, "" for the root
};

// Every fixture kind of the reader issue that torch can load (the unsafe pickles are checked apart).
const Kind kKinds[] = {
    {"plain_sd.pt", "ConvNet", ""},
    {"ddp_sd.pt", "ConvNet", ""},
    {"ddp_sd_cuda0.pt", "ConvNet", ""},
    {"cuda3.pt", "ConvNet", ""},
    {"multi_gpu.pt", "PipelineNet", ""},
    {"mps.pt", "", ""},
    {"legacy_sd.pt", "ConvNet", ""},
    {"legacy_whole_model.pt", "ConvNet", ""},
    {"whole_model.pt", "ConvNet", ""},
    {"whole_model_dp.pt", "ConvNet", ""},
    {"whole_model_buffers.pt", "BufferNet", ""},
    {"views.pt", "", ""},
    {"tied_clean.pt", "TiedNet", ""},
    {"dtypes.pt", "", ""},
    {"quantized.pt", "", ""},
    {"exotic.pt", "", ""},
    {"empty_scalar.pt", "", ""},
    {"compile_sd.pt", "ConvNet", ""},
    {"opacus_sd.pt", "ConvNet", ""},
    {"nested_prefix.pt", "ConvNet", ""},
    {"fsdp_sd.pt", "", ""},
    {"mixed_prefix.pt", "ConvNet", ""},
    {"lightning.pt", "LitModule", "state_dict"},
    {"inner_module_name.pt", "MlpHolder", ""},
    {"nonfinite.pt", "", ""},
    {"numpy_namespace.pt", "", ""},
    {"sets_bytes_complex.pt", "", ""},
    {"train_ckpt.pt", "ConvNet", "model"},
    {"proto4.pt", "", ""},
    {"proto5.pt", "", ""},
    {"archive_name.pt", "ConvNet", ""},
    {"deflated.pt", "ConvNet", ""},
    {"model.safetensors", "", ""},
};

}  // namespace

class TestConvert : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY2(QFile::exists(fixture(QStringLiteral("manifest.json"))),
                 "fixtures missing: run ctest (torch_fixtures)");
        QVERIFY(dir_.isValid());
    }

    void presetsLoadInRealTorch()
    {
        QJsonArray jobs;
        QStringList labels;
        auto job = [&](const QString& label, const QString& src, const QString& out, const Kind& k, bool dp,
                       bool exact) {
            QJsonObject j{{QStringLiteral("src"), src}, {QStringLiteral("out"), out}};
            if (*k.model != 0 && !exact) {
                j.insert(QStringLiteral("model"), QString::fromLatin1(k.model));
                j.insert(QStringLiteral("select"), QString::fromLatin1(k.select));
                j.insert(QStringLiteral("dp"), dp);
            }
            j.insert(QStringLiteral("exact"), exact);
            j.insert(QStringLiteral("metadata"), exact);
            jobs.append(j);
            labels.append(label);
        };
        for (const Kind& k : kKinds) {
            const QString name = QString::fromLatin1(k.file);
            const QString src = fixture(name);
            QVERIFY2(QFile::exists(src), qPrintable(src));
            const QString single = dir_.filePath(name + QStringLiteral(".single.pt"));
            const QString multi = dir_.filePath(name + QStringLiteral(".multi.pt"));
            const QString back = dir_.filePath(name + QStringLiteral(".multi.single.pt"));
            const QString again = dir_.filePath(name + QStringLiteral(".multi.single.multi.pt"));
            for (const auto& [from, to, preset] :
                 {std::tuple{src, single, "--single-card"}, std::tuple{src, multi, "--multi-card"},
                  std::tuple{multi, back, "--single-card"}, std::tuple{back, again, "--multi-card"}}) {
                const Run r = convert({from.toStdString(), "-o", to.toStdString(), preset});
                QVERIFY2(r.rc == 0, qPrintable(name + QStringLiteral(": ") + QString::fromStdString(r.err)));
                QVERIFY(r.out.find("wrote ") != std::string::npos);
            }
            job(name + QStringLiteral(" --single-card"), src, single, k, false, false);
            job(name + QStringLiteral(" --multi-card"), src, multi, k, true, false);
            job(name + QStringLiteral(" single -> multi -> single is identity"), single, back, k, false, true);
            job(name + QStringLiteral(" multi -> single -> multi is identity"), multi, again, k, false, true);
        }
        const QJsonArray results = checkWithTorch(jobs, dir_.path());
        QCOMPARE(results.size(), jobs.size());
        QStringList failures;
        for (qsizetype i = 0; i < results.size(); ++i) {
            const QJsonObject r = results[i].toObject();
            if (!r.value(QStringLiteral("ok")).toBool()) {
                QStringList problems;
                for (const auto& p : r.value(QStringLiteral("problems")).toArray()) {
                    problems.append(p.toString());
                }
                failures.append(labels[i] + QStringLiteral(": ") + problems.join(QStringLiteral("; ")));
            }
        }
        QVERIFY2(failures.isEmpty(), qPrintable(failures.join(QLatin1Char('\n'))));
    }

    void cleanFileChangesNothingButWhatWasAsked()
    {
        const QString src = fixture(QStringLiteral("plain_sd.pt"));
        const QString copy = dir_.filePath(QStringLiteral("plain_copy.pt"));
        const QString mapped = dir_.filePath(QStringLiteral("plain_mapped.pt"));
        Run r = convert({src.toStdString(), "-o", copy.toStdString()});
        QCOMPARE(r.rc, 0);
        QVERIFY2(r.out.find("nothing to change") != std::string::npos, r.out.c_str());
        r = convert({src.toStdString(), "-o", mapped.toStdString(), "--map-location", "cuda:1"});
        QCOMPARE(r.rc, 0);
        QVERIFY(r.out.find("remap") != std::string::npos);
        QJsonArray jobs{QJsonObject{{QStringLiteral("src"), src},
                                    {QStringLiteral("out"), copy},
                                    {QStringLiteral("exact"), true},
                                    {QStringLiteral("metadata"), true},
                                    {QStringLiteral("model"), QStringLiteral("ConvNet")}}};
        const QJsonArray res = checkWithTorch(jobs, dir_.path());
        QCOMPARE(res.size(), 1);
        QVERIFY2(res[0].toObject().value(QStringLiteral("ok")).toBool(),
                 QJsonDocument(res[0].toObject()).toJson().constData());
        // The mapped copy: every storage now says cuda:1, and nothing else moved.
        const Run plan = convert({mapped.toStdString(), "--dry-run", "--json"});
        QCOMPARE(plan.rc, 0);
        const QJsonObject j = QJsonDocument::fromJson(QByteArray::fromStdString(plan.out)).object();
        for (const auto& s : j.value(QStringLiteral("storages")).toArray()) {
            QCOMPARE(s.toObject().value(QStringLiteral("location")).toString(), QStringLiteral("cuda:1"));
        }
        QVERIFY(j.value(QStringLiteral("changes_nothing")).toBool());
    }

    // --sync only changes when convert returns (after fsync), never the bytes; neither way leaves
    // its temporary file behind.
    void syncWritesTheSameBytes()
    {
        for (const char* name : {"ddp_sd_cuda0.pt", "whole_model_dp.pt", "deflated.pt"}) {
            const QString src = fixture(QString::fromLatin1(name));
            QDir(dir_.path()).mkpath(QStringLiteral("lazy"));
            QDir(dir_.path()).mkpath(QStringLiteral("durable"));
            const QString lazy = dir_.filePath(QStringLiteral("lazy/out.pt"));
            const QString durable = dir_.filePath(QStringLiteral("durable/out.pt"));
            QCOMPARE(convert({src.toStdString(), "-o", lazy.toStdString(), "--single-card"}).rc, 0);
            QCOMPARE(convert({src.toStdString(), "-o", durable.toStdString(), "--single-card", "--sync"}).rc, 0);
            QFile a(lazy);
            QFile b(durable);
            QVERIFY(a.open(QIODevice::ReadOnly) && b.open(QIODevice::ReadOnly));
            QVERIFY2(a.readAll() == b.readAll(), name);
            for (const char* sub : {"lazy", "durable"}) {
                QCOMPARE(QDir(dir_.filePath(QString::fromLatin1(sub)))
                             .entryList(QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot),
                         QStringList{QStringLiteral("out.pt")});
            }
        }
    }

    void compactKeepsEveryValue()
    {
        const QString src = fixture(QStringLiteral("views.pt"));
        const QString out = dir_.filePath(QStringLiteral("views.compact.pt"));
        const Run r = convert({src.toStdString(), "-o", out.toStdString(), "--compact"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        QVERIFY(r.out.find("compact ") != std::string::npos);
        QVERIFY(QFileInfo(out).size() < QFileInfo(src).size() / 4);  // the 1 MiB storage behind `small` is gone
        // Same paths, values, strides, sharing flags: only storage sizes and offsets changed.
        QJsonArray jobs{
            QJsonObject{{QStringLiteral("src"), src}, {QStringLiteral("out"), out}, {QStringLiteral("exact"), true}}};
        const QJsonArray res = checkWithTorch(jobs, dir_.path());
        QCOMPARE(res.size(), 1);
        QVERIFY2(res[0].toObject().value(QStringLiteral("ok")).toBool(),
                 QJsonDocument(res[0].toObject()).toJson().constData());
    }

    void unsafePayloadNeverWritten()
    {
        for (const char* f : {"unsafe_os_system.pt", "unsafe_eval.pt"}) {
            const QString src = fixture(QString::fromLatin1(f));
            const QString out = dir_.filePath(QStringLiteral("cleaned-%1.pt").arg(qstrcmp(f, "unsafe_eval.pt") == 0));
            const Run r = convert({src.toStdString(), "-o", out.toStdString()});
            QCOMPARE(r.rc, 0);
            QVERIFY(r.out.find("drop") != std::string::npos);
            QFile file(out);
            QVERIFY(file.open(QIODevice::ReadOnly));
            const QByteArray bytes = file.readAll();
            QVERIFY(!bytes.contains("should-never-run"));
            QVERIFY(!bytes.contains("posix"));
            QVERIFY(!bytes.contains("eval"));
            QJsonArray jobs{QJsonObject{{QStringLiteral("src"), QJsonValue()}, {QStringLiteral("out"), out}}};
            const QJsonArray res = checkWithTorch(jobs, dir_.path());
            QCOMPARE(res.size(), 1);
            QVERIFY2(res[0].toObject().value(QStringLiteral("ok")).toBool(),
                     QJsonDocument(res[0].toObject()).toJson().constData());
        }
    }

    // A rule that touches many keys is one line, with a count and two examples; --verbose and
    // --dry-run list every step; the closing line says what was written and what was dropped.
    void planSummarisesRulesAndClosesWithTheDrops()
    {
        const std::string src = fixture(QStringLiteral("ddp_sd.pt")).toStdString();
        const std::string out = dir_.filePath(QStringLiteral("summary.pt")).toStdString();
        Run r = convert({src, "-o", out, "--single-card"});
        QCOMPARE(r.rc, 0);
        QVERIFY2(r.out.find("  rename  strip 'module.' from 9 keys: module.conv.weight -> conv.weight, "
                            "module.conv.bias -> conv.bias, ...\n") != std::string::npos,
                 r.out.c_str());
        QVERIFY2(r.out.find("rename  module.fc.weight") == std::string::npos, r.out.c_str());
        QVERIFY(r.out.find("  (10 steps in all: --verbose lists each)\n") != std::string::npos);
        QVERIFY2(r.out.ends_with(" KiB, 9 tensors); 0 values dropped\n") &&
                     r.out.rfind("\nwrote ") != std::string::npos,
                 r.out.c_str());

        for (const char* every : {"--verbose", "--dry-run"}) {
            r = convert({src, "-o", out, "--single-card", every});
            QCOMPARE(r.rc, 0);
            QVERIFY2(r.out.find("  rename  module.bn.running_var -> bn.running_var\n") != std::string::npos &&
                         r.out.find("  rename  module.fc.bias -> fc.bias\n") != std::string::npos &&
                         r.out.find("strip 'module.'") == std::string::npos &&
                         r.out.find("steps in all") == std::string::npos,
                     r.out.c_str());
        }
        QVERIFY2(r.out.ends_with("dry run: nothing written; 0 values would be dropped\n"), r.out.c_str());

        // Drops: counted and named in the closing line (in plan order), two at most.
        r = convert({fixture(QStringLiteral("train_ckpt.pt")).toStdString(), "-o", out, "--drop", "optimizer", "--drop",
                     "epoch", "--drop", "args"});
        QCOMPARE(r.rc, 0);
        QVERIFY2(r.out.find("; 3 values dropped (args, optimizer, ...)\n") != std::string::npos, r.out.c_str());
        // Steps of small rules are listed one by one, in the plan's order.
        QVERIFY2(r.out.find("  drop    args: argparse.Namespace dropped\n  drop    optimizer: ") != std::string::npos,
                 r.out.c_str());
        r = convert({fixture(QStringLiteral("train_ckpt.pt")).toStdString(), "-o", out, "--drop", "optimizer"});
        QVERIFY2(r.out.ends_with("; 1 value dropped (optimizer)\n"), r.out.c_str());

        // 40,000 keys: one line for the rule, not 40,000.
        r = convert({fixture(QStringLiteral("big40k.pt")).toStdString(), "-o", out, "--add-prefix", "model."});
        QCOMPARE(r.rc, 0);
        QVERIFY2(r.out.find("  rename  add 'model.' to 40000 keys: layers.0.weight -> model.layers.0.weight, "
                            "layers.1.weight -> model.layers.1.weight, ...\n") != std::string::npos,
                 r.out.substr(0, 2000).c_str());
        QVERIFY2(std::count(r.out.begin(), r.out.end(), '\n') < 10, r.out.substr(0, 2000).c_str());
        // --json lists every rename whatever the summary.
        r = convert({fixture(QStringLiteral("big40k.pt")).toStdString(), "-o", out, "--add-prefix", "model.", "--json",
                     "--dry-run"});
        const auto steps =
            QJsonDocument::fromJson(QByteArray::fromStdString(r.out)).object().value(QStringLiteral("steps"));
        QCOMPARE(steps.toArray().size(), 40000);
    }

    void dryRunWritesNothing()
    {
        const QString src = fixture(QStringLiteral("ddp_sd_cuda0.pt"));
        const QString out = dir_.filePath(QStringLiteral("never.pt"));
        Run r = convert({src.toStdString(), "-o", out.toStdString(), "--single-card", "--dry-run"});
        QCOMPARE(r.rc, 0);
        QVERIFY(!QFile::exists(out));
        QVERIFY(r.out.find("rename  module.conv.weight -> conv.weight") != std::string::npos);
        QVERIFY(r.out.find("remap   cuda:0 -> cpu") != std::string::npos);
        QVERIFY(r.out.find("dry run: nothing written") != std::string::npos);
        r = convert({src.toStdString(), "-o", out.toStdString(), "--single-card", "--dry-run", "--json"});
        QCOMPARE(r.rc, 0);
        QVERIFY(!QFile::exists(out));
        const QJsonObject j = QJsonDocument::fromJson(QByteArray::fromStdString(r.out)).object();
        QCOMPARE(j.value(QStringLiteral("schema")).toInt(), 2);
        QVERIFY(j.value(QStringLiteral("dry_run")).toBool());
        QCOMPARE(j.value(QStringLiteral("steps")).toArray().size(), 11);
        const QStringList left =
            QDir(dir_.path())
                .entryList({QStringLiteral("never*"), QStringLiteral(".never*")}, QDir::Files | QDir::Hidden);
        QVERIFY2(left.isEmpty(), qPrintable(left.join(QLatin1Char(' '))));
    }

    void outputEqualToInputRefused()
    {
        const QString copy = dir_.filePath(QStringLiteral("input.pt"));
        QVERIFY(QFile::copy(fixture(QStringLiteral("ddp_sd.pt")), copy));
        const QByteArray before = sha(copy);
        Run r = convert({copy.toStdString(), "-o", copy.toStdString(), "--single-card"});
        QCOMPARE(r.rc, 2);
        QVERIFY2(r.err.find("is the input file") != std::string::npos, r.err.c_str());
        // Another name for the same file (a hard link, a path through ..) is the same file.
        const QString link = dir_.filePath(QStringLiteral("link.pt"));
        QVERIFY(QFile::link(copy, link) || true);
        QVERIFY(::link(copy.toLocal8Bit().constData(),
                       dir_.filePath(QStringLiteral("hard.pt")).toLocal8Bit().constData()) == 0);
        for (const QString& other :
             {dir_.filePath(QStringLiteral("hard.pt")), link,
              dir_.path() + QStringLiteral("/./../") + QDir(dir_.path()).dirName() + QStringLiteral("/input.pt")}) {
            r = convert({copy.toStdString(), "-o", other.toStdString(), "--single-card"});
            QCOMPARE(r.rc, 2);
        }
        QCOMPARE(sha(copy), before);
    }

    void usageErrors_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("fragment");
        const QString src = fixture(QStringLiteral("train_ckpt.pt"));
        const QString out = QStringLiteral("/tmp/ckptscope-never-written.pt");
        QTest::newRow("no output") << QStringList{src} << QStringLiteral("-o OUT is required");
        QTest::newRow("both presets") << QStringList{src, QStringLiteral("-o"), out, QStringLiteral("--single-card"),
                                                     QStringLiteral("--multi-card")}
                                      << QStringLiteral("excludes");
        QTest::newRow("bad location") << QStringList{src, QStringLiteral("-o"), out, QStringLiteral("--map-location"),
                                                     QStringLiteral("GPU:0")}
                                      << QStringLiteral("'GPU:0' is not a device");
        QTest::newRow("bad location pair")
            << QStringList{src, QStringLiteral("-o"), out, QStringLiteral("--map-location"), QStringLiteral("cuda:0=")}
            << QStringLiteral("is not a device");
        QTest::newRow("missing drop") << QStringList{src, QStringLiteral("-o"), out, QStringLiteral("--drop"),
                                                     QStringLiteral("nothing/here")}
                                      << QStringLiteral("'nothing/here': no value at that key path");
        QTest::newRow("bad fix") << QStringList{src, QStringLiteral("-o"), out, QStringLiteral("--fix"),
                                                QStringLiteral("{")}
                                 << QStringLiteral("not valid JSON");
        QTest::newRow("bad format") << QStringList{src, QStringLiteral("-o"), out, QStringLiteral("--format"),
                                                   QStringLiteral("onnx")}
                                    << QStringLiteral("--format");
        QTest::newRow("missing input") << QStringList{QStringLiteral("/nonexistent/x.pt"), QStringLiteral("-o"), out}
                                       << QStringLiteral("/nonexistent/x.pt");
        QTest::newRow("weights-only whole model")
            << QStringList{fixture(QStringLiteral("whole_model.pt")), QStringLiteral("-o"), out,
                           QStringLiteral("--weights-only")}
            << QStringLiteral("add --unwrap");
    }
    void usageErrors()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, fragment);
        QFile::remove(QStringLiteral("/tmp/ckptscope-never-written.pt"));
        std::vector<std::string> a;
        for (const auto& s : args) {
            a.push_back(s.toStdString());
        }
        const Run r = convert(a);
        QCOMPARE(r.rc, 2);
        QVERIFY2(r.err.find(fragment.toStdString()) != std::string::npos, r.err.c_str());
        QVERIFY(r.err.find('\n') == r.err.size() - 1);  // one line
        QVERIFY(!QFile::exists(QStringLiteral("/tmp/ckptscope-never-written.pt")));
    }

    void fixJsonAndExplicitFlagsCombine()
    {
        const QString src = fixture(QStringLiteral("train_ckpt.pt"));
        const Run r = convert({src.toStdString(), "--dry-run", "--json", "--fix", R"({"strip_prefix":"module."})",
                               "--fix", R"({"map_location":"cpu"})", "--select", "model", "--compact"});
        QCOMPARE(r.rc, 0);
        const QJsonObject j = QJsonDocument::fromJson(QByteArray::fromStdString(r.out)).object();
        const QJsonObject o = j.value(QStringLiteral("options")).toObject();
        QCOMPARE(o.value(QStringLiteral("strip_prefix")).toString(), QStringLiteral("module."));
        QCOMPARE(o.value(QStringLiteral("map_location")).toString(), QStringLiteral("cpu"));
        QCOMPARE(o.value(QStringLiteral("select")).toString(), QStringLiteral("model"));
        QVERIFY(o.value(QStringLiteral("compact")).toBool());
        QCOMPARE(j.value(QStringLiteral("steps")).toArray().first().toObject().value(QStringLiteral("kind")).toString(),
                 QStringLiteral("select"));
    }

    void safetensorsOutput()
    {
        const QString src = fixture(QStringLiteral("ddp_sd.pt"));
        const QString out = dir_.filePath(QStringLiteral("model.safetensors"));
        const Run r = convert({src.toStdString(), "-o", out.toStdString(), "--single-card"});
        QVERIFY2(r.rc == 0, r.err.c_str());
        QFile f(out);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray head = f.read(8);
        QCOMPARE(head.size(), 8);
        quint64 n = 0;
        for (int i = 7; i >= 0; --i) {
            n = (n << 8) | static_cast<quint8>(head[i]);
        }
        const QJsonObject header = QJsonDocument::fromJson(f.read(static_cast<qint64>(n))).object();
        QVERIFY(header.contains(QStringLiteral("conv.weight")));
        QVERIFY(!header.contains(QStringLiteral("module.conv.weight")));
        QCOMPARE(
            header.value(QStringLiteral("bn.num_batches_tracked")).toObject().value(QStringLiteral("dtype")).toString(),
            QStringLiteral("I64"));
    }

private:
    QTemporaryDir dir_;
};

QTEST_GUILESS_MAIN(TestConvert)
#include "tst_convert.moc"
