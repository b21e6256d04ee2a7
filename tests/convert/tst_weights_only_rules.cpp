// PyTorch 2.6's weights_only rules as check reports them and convert applies them, on real
// torch.save files (tests/fixtures/gen_weights_only_fixtures.py): the two agree in both
// directions, what has a plain form is kept (numpy arrays, class keys, sets, modules inside
// Lightning's hyper_parameters), and every output loads under 2.6's rules with the same values
// (checked by PyTorch 1.13 with torch_oracle's 2.6 unpickler). Also gzip-wrapped checkpoints.
#include "checkpoint/checkpoint.h"
#include "cli/cmd_check.h"
#include "cli/cmd_convert.h"
#include "cli/cmd_inspect.h"
#include "cli_run.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

namespace {

using Run = ckpt::test::CliRun;
using ckpt::test::capture;

QJsonDocument json(const std::string& text)
{
    return QJsonDocument::fromJson(QByteArray::fromStdString(text));
}

bool hasFinding(const QJsonDocument& check, const QString& code)
{
    const QJsonArray findings =
        check.isArray() ? check.array() : check.object().value(QStringLiteral("findings")).toArray();
    for (const auto& f : findings) {
        if (f.toObject().value(QStringLiteral("code")).toString() == code) {
            return true;
        }
    }
    return false;
}

// Plan steps that exist only because weights_only refuses the value.
int weightsOnlySteps(const QJsonDocument& plan)
{
    int n = 0;
    for (const auto& s : plan.object().value(QStringLiteral("steps")).toArray()) {
        const auto o = s.toObject();
        const QString kind = o.value(QStringLiteral("kind")).toString();
        const QString why = o.value(QStringLiteral("detail")).toString() + o.value(QStringLiteral("after")).toString();
        if ((kind == QStringLiteral("drop") || kind == QStringLiteral("convert")) &&
            (why.contains(QStringLiteral("weights_only")) ||
             o.value(QStringLiteral("before")).toString().contains(QStringLiteral("numpy")))) {
            ++n;
        }
    }
    return n;
}

// Runs Python with torch_oracle importable; returns stdout, or fails the test.
QByteArray python(const QString& code, const QStringList& args)
{
    QProcess p;
    QStringList all{QStringLiteral("-c"), code};
    all += args;
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("PYTHONPATH"), QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/fixtures"));
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(CKPTSCOPE_PYTHON), all);
    if (!p.waitForFinished(300000) || p.exitCode() != 0) {
        qWarning("python failed: %s", p.readAllStandardError().constData());
        return {};
    }
    return p.readAllStandardOutput();
}

}  // namespace

class TestWeightsOnlyRules : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;

    std::string file(const char* name) const { return (dir_.path() + QLatin1Char('/')).toStdString() + name; }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(dir_.isValid());
        QProcess p;
        p.start(QStringLiteral(CKPTSCOPE_PYTHON),
                {QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/fixtures/gen_weights_only_fixtures.py"), dir_.path()});
        QVERIFY(p.waitForFinished(300000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    }

    void gzipIsReadThrough()
    {
        auto plain = ckpt::openCheckpoint(file("plain_sd.pt"));
        auto gz = ckpt::openCheckpoint(file("plain_sd.pt.gz"));
        QVERIFY(plain);
        QVERIFY2(gz, gz ? "" : gz.error().describe().c_str());
        QCOMPARE((*gz)->compression, std::string("gzip"));
        QCOMPARE((*gz)->tensors.size(), (*plain)->tensors.size());
        for (std::uint32_t i = 0; i < (*gz)->tensors.size(); ++i) {
            const auto& a = (*gz)->tensors[ckpt::TensorIndex{i}];
            const auto& b = (*plain)->tensors[ckpt::TensorIndex{i}];
            QCOMPARE(a.path, b.path);
            QCOMPARE(a.shape, b.shape);
            std::vector<std::byte> s1;
            std::vector<std::byte> s2;
            auto d1 = (*gz)->storageData(a.storage, s1);
            auto d2 = (*plain)->storageData(b.storage, s2);
            QVERIFY(d1 && d2);
            QVERIFY(std::equal(d1->begin(), d1->end(), d2->begin(), d2->end()));
        }
        const Run check = capture(ckpt::cli::cmdCheck, {"--json", file("plain_sd.pt.gz")});
        QVERIFY(hasFinding(json(check.out), QStringLiteral("compressed-file")));
        // convert writes it uncompressed, and torch reads the result as the original.
        const std::string out = file("from_gz.pt");
        const Run conv = capture(ckpt::cli::cmdConvert, {file("plain_sd.pt.gz"), "-o", out});
        QVERIFY2(conv.rc == 0, conv.err.c_str());
        const QByteArray same =
            python(QStringLiteral("import sys, torch; a = torch.load(sys.argv[1]); b = torch.load(sys.argv[2]);"
                                  "print(list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a))"),
                   {QString::fromStdString(file("plain_sd.pt")), QString::fromStdString(out)});
        QCOMPARE(same.trimmed(), QByteArray("True"));
    }

    // One line naming the wrapper and the damage, exit 2; no advice to gunzip what gunzip cannot.
    void damagedGzipIsRefused()
    {
        QFile f(QString::fromStdString(file("plain_sd.pt.gz")));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray gz = f.readAll();
        const std::pair<QByteArray, const char*> cases[] = {
            {gz.left(gz.size() / 2), "truncated"},
            {gz + QByteArray("XYZ"), "trailing bytes"},
        };
        for (const auto& [bytes, words] : cases) {
            QFile bad(dir_.path() + QStringLiteral("/bad.pt.gz"));
            QVERIFY(bad.open(QIODevice::WriteOnly | QIODevice::Truncate));
            bad.write(bytes);
            bad.close();
            const Run r = capture(ckpt::cli::cmdInspect, {bad.fileName().toStdString()});
            QCOMPARE(r.rc, 2);
            QVERIFY2(r.err.find("gzip-compressed") != std::string::npos && r.err.find(words) != std::string::npos,
                     r.err.c_str());
            QVERIFY(r.err.find("gunzip it first") == std::string::npos);
            QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), 1);
        }
    }

    void otherCompressionIsNamed()
    {
        const Run r = capture(ckpt::cli::cmdInspect, {file("plain_sd.pt.zst")});
        QCOMPARE(r.rc, 2);
        QVERIFY2(r.err.find("zstd-compressed") != std::string::npos, r.err.c_str());
        QVERIFY(r.err.find("zstd -d it first") != std::string::npos);
    }

    void checkAndConvertAgree_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<bool>("refused");
        QTest::newRow("plain") << QStringLiteral("plain_sd.pt") << false;
        QTest::newRow("class key") << QStringLiteral("class_key.pt") << true;
        QTest::newRow("numpy") << QStringLiteral("numpy_arrays.pt") << true;
        QTest::newRow("sets") << QStringLiteral("sets.pt") << true;
        QTest::newRow("hparams module") << QStringLiteral("hparams_module.pt") << true;
    }

    // Both directions: a finding exactly when the weights-only plan changes a value, and the
    // 2.6-rules loader agrees with the finding on the input.
    void checkAndConvertAgree()
    {
        QFETCH(QString, name);
        QFETCH(bool, refused);
        const std::string path = file(name.toUtf8().constData());
        const Run check = capture(ckpt::cli::cmdCheck, {"--json", path});
        QVERIFY2(check.rc == 0 || check.rc == 1, check.err.c_str());
        const bool finding = hasFinding(json(check.out), QStringLiteral("not-weights-only"));
        QCOMPARE(finding, refused);
        const Run plan = capture(ckpt::cli::cmdConvert, {"--weights-only", "--unwrap", "--dry-run", "--json", path});
        QVERIFY2(plan.rc == 0, plan.err.c_str());
        QCOMPARE(weightsOnlySteps(json(plan.out)) > 0 || name == QStringLiteral("hparams_module.pt"), refused);
        const QByteArray loads = python(QStringLiteral("import sys, torch_oracle as o\n"
                                                       "try:\n o.weights_only_load(sys.argv[1]); print('ok')\n"
                                                       "except Exception as e: print('refused')"),
                                        {QString::fromStdString(path)});
        QCOMPARE(loads.trimmed(), refused ? QByteArray("refused") : QByteArray("ok"));
    }

    // --single-card output of every fixture loads under 2.6's rules with all storages on cpu.
    void singleCardLoadsUnder26()
    {
        for (const char* name : {"class_key.pt", "numpy_arrays.pt", "sets.pt", "hparams_module.pt"}) {
            const std::string out = file(name) + ".single.pt";
            const Run r = capture(ckpt::cli::cmdConvert, {"--single-card", file(name), "-o", out});
            QVERIFY2(r.rc == 0, (std::string(name) + ": " + r.err).c_str());
            QVERIFY2(r.out.find("dropped") != std::string::npos, r.out.c_str());
            const QByteArray loads = python(QStringLiteral("import sys, torch_oracle as o\n"
                                                           "o.weights_only_load(sys.argv[1]); print('ok')"),
                                            {QString::fromStdString(out)});
            QVERIFY2(loads.trimmed() == QByteArray("ok"), name);
        }
    }

    void valuesKeptExactly()
    {
        const std::string npOut = file("numpy_arrays.pt") + ".single.pt";
        const std::string keyOut = file("class_key.pt") + ".single.pt";
        const std::string hpOut = file("hparams_module.pt") + ".single.pt";
        const std::string setOut = file("sets.pt") + ".single.pt";
        QVERIFY(QFile::exists(QString::fromStdString(npOut)));
        const QByteArray verdict =
            python(QStringLiteral(
                       "import sys, numpy as np, torch, torch_oracle as o\n"
                       "src = torch.load(sys.argv[1])\n"
                       "out = o.weights_only_load(sys.argv[2])\n"
                       "bad = []\n"
                       "for k in ('f32', 'i4_big', 'f8_fortran', 'u2', 'bool', 'zero_d'):\n"
                       "    t = out[k]\n"
                       "    if not isinstance(t, torch.Tensor) or list(t.shape) != list(src[k].shape) or "
                       "not np.array_equal(t.numpy(), src[k]): bad.append(k)\n"
                       "if out['strings'] != ['cat', 'dog', 'ému']: bad.append('strings')\n"
                       "if out['strings_2d'] != [['a', 'bc'], ['def', '']]: bad.append('strings_2d')\n"
                       "if out['bytes'] != [b'ab', b'c']: bad.append('bytes')\n"
                       "if 'objects' in out or out['mean'] != 0.5: bad.append('objects/mean')\n"
                       "k = o.weights_only_load(sys.argv[3])['callbacks']\n"
                       "cb = k.get('pytorch_lightning.callbacks.early_stopping.EarlyStopping')\n"
                       "if cb is None or float(cb['best_score']) != 0.25: bad.append('class key')\n"
                       "hp = o.weights_only_load(sys.argv[4])\n"
                       "enc = hp['hyper_parameters']['encoder']\n"
                       "if sorted(enc) != ['lin.bias', 'lin.weight', 'scale'] or not torch.equal(enc['lin.weight'], "
                       "hp['state_dict']['model.lin.weight']): bad.append('hparams')\n"
                       "s = o.weights_only_load(sys.argv[5])\n"
                       "if s['tags'] != {'a', 'b'} or sorted(s['frozen']) != [1, 2]: bad.append('sets')\n"
                       "print(bad)"),
                   {QString::fromStdString(file("numpy_arrays.pt")), QString::fromStdString(npOut),
                    QString::fromStdString(keyOut), QString::fromStdString(hpOut), QString::fromStdString(setOut)});
        QCOMPARE(verdict.trimmed(), QByteArray("[]"));
    }

    // Without --unwrap the advice names the flag; with it the module is no obstacle.
    void moduleAdviceWorks()
    {
        const Run without = capture(ckpt::cli::cmdConvert, {"--weights-only", "--dry-run", file("hparams_module.pt")});
        QCOMPARE(without.rc, 2);
        QVERIFY2(without.err.find("add --unwrap") != std::string::npos, without.err.c_str());
        const Run with =
            capture(ckpt::cli::cmdConvert, {"--weights-only", "--unwrap", "--dry-run", file("hparams_module.pt")});
        QVERIFY2(with.rc == 0, with.err.c_str());
    }
};

QTEST_GUILESS_MAIN(TestWeightsOnlyRules)
#include "tst_weights_only_rules.moc"
