// TorchScript archives through `ckptscope` in-process, held to real PyTorch 1.13: inspect's state
// dict and the converted file against torch.jit.load(f).state_dict() (check_state_dict.py), the
// quantized model's packed params named as drops, the finding, and diff against the state dict.
#include "checkpoint/script_classes.h"
#include "cli_run.h"

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
    return QStringLiteral(CKPTSCOPE_TS_FIXTURE_DIR "/") + name;
}

using Run = ckpt::test::CliRun;
using ckpt::test::ckptscope;

QJsonObject jsonOf(const std::string& text)
{
    return QJsonDocument::fromJson(QByteArray::fromStdString(text)).object();
}

// check_state_dict.py MODE ARCHIVE OTHER: "ok N" when ckptscope's side equals torch's.
QByteArray torchCheck(const QString& mode, const QString& archive, const QString& other)
{
    QProcess py;
    py.start(QStringLiteral(CKPTSCOPE_PYTHON), {QStringLiteral(CKPTSCOPE_TS_CHECK_SCRIPT), mode, archive, other});
    if (!py.waitForFinished(120000)) {
        return "timed out";
    }
    if (py.exitCode() != 0) {
        return py.readAllStandardError();
    }
    return py.readAllStandardOutput().trimmed();
}

}  // namespace

class TestTorchScript : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // The printer's layout: only `class X(Module):` at column 0 makes a module, only the two-space
    // class-body lists count (a method body's text never does), names in their written order.
    void classSourcesAreScanned()
    {
        QCOMPARE(QString::fromStdString(
                     ckpt::scriptModuleOfRecord("code/__torch__/torch/nn/modules/conv/___torch_mangle_0.py")),
                 QStringLiteral("__torch__.torch.nn.modules.conv.___torch_mangle_0"));
        QVERIFY(ckpt::scriptModuleOfRecord("code/__torch__.py.debug_pkl").empty());
        QVERIFY(ckpt::scriptModuleOfRecord("data/0").empty());
        ckpt::ScriptClasses classes;
        ckpt::parseScriptSource("__torch__.m",
                                "class Net(Module):\n"
                                "  __parameters__ = [\"w\", \"b\", ]\n"
                                "  __buffers__ = [\"running\", ]\n"
                                "  def forward(self: __torch__.m.Net) -> Tensor:\n"
                                "    __parameters__ = [\"not_one\"]\n"
                                "    return self.w\n"
                                "class Packed:\n"
                                "  __parameters__ = []\n",
                                classes);
        QCOMPARE(classes.size(), std::size_t{2});
        const auto& net = classes.at("__torch__.m.Net");
        QVERIFY(net.module);
        QCOMPARE(net.parameters, (std::vector<std::string>{"w", "b"}));
        QCOMPARE(net.buffers, (std::vector<std::string>{"running"}));
        QVERIFY(!classes.at("__torch__.m.Packed").module);
    }

    void archives_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("keys");
        QTest::newRow("scripted Linear") << "torchscript.pt" << 2;
        QTest::newRow("scripted CNN with BatchNorm") << "ts_cnn.pt" << 10;
        QTest::newRow("traced CNN") << "ts_traced.pt" << 10;
        QTest::newRow("lite interpreter") << "ts_lite.ptl" << 10;
        QTest::newRow("quantized, scripted") << "ts_quantized.pt" << 2;
    }

    // inspect's state dict: the keys of torch.jit.load(f).state_dict() in order, each naming a tensor
    // of the key tree whose dtype, shape and bytes (as ckptscope locates them) are torch's.
    void inspectStateDictIsTorchs_data() { archives_data(); }
    void inspectStateDictIsTorchs()
    {
        QFETCH(QString, file);
        QFETCH(int, keys);
        const Run r = ckptscope({"inspect", "--json", fixture(file).toStdString()});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QJsonObject info = jsonOf(r.out);
        QCOMPARE(
            info.value(QStringLiteral("torchscript")).toObject().value(QStringLiteral("state_dict")).toArray().size(),
            keys);
        QTemporaryDir tmp;
        QFile json(tmp.filePath(QStringLiteral("info.json")));
        QVERIFY(json.open(QIODevice::WriteOnly));
        json.write(QByteArray::fromStdString(r.out));
        json.close();
        QCOMPARE(torchCheck(QStringLiteral("inspect"), fixture(file), json.fileName()),
                 QByteArray("ok ") + QByteArray::number(keys));
    }

    // convert --single-card writes exactly that state dict, loadable with weights_only=True.
    void convertWritesTorchsStateDict_data() { archives_data(); }
    void convertWritesTorchsStateDict()
    {
        QFETCH(QString, file);
        QFETCH(int, keys);
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("out.pt"));
        const Run r = ckptscope({"convert", "--single-card", fixture(file).toStdString(), "-o", out.toStdString()});
        QVERIFY2(r.rc == 0, r.err.c_str());
        QCOMPARE(torchCheck(QStringLiteral("convert"), fixture(file), out),
                 QByteArray("ok ") + QByteArray::number(keys));
        const QString wo = tmp.filePath(QStringLiteral("wo.pt"));
        const Run w = ckptscope({"convert", "--weights-only", fixture(file).toStdString(), "-o", wo.toStdString()});
        QVERIFY2(w.rc == 0, w.err.c_str());
        QCOMPARE(torchCheck(QStringLiteral("convert"), fixture(file), wo),
                 QByteArray("ok ") + QByteArray::number(keys));
    }

    // The quantized model's conv (pickled through __getstate__) and the Linear's packed params hold
    // tensors torch.jit's state_dict() lacks: drop steps of the plan, counted, and shown by inspect.
    void quantizedDropsAreNamed()
    {
        const std::string file = fixture(QStringLiteral("ts_quantized.pt")).toStdString();
        const Run plan = ckptscope({"convert", "--single-card", "--dry-run", "--json", file});
        QVERIFY2(plan.rc == 0, plan.err.c_str());
        const QJsonObject p = jsonOf(plan.out);
        QStringList drops;
        for (const auto& s : p.value(QStringLiteral("steps")).toArray()) {
            if (s.toObject().value(QStringLiteral("kind")).toString() == QStringLiteral("drop")) {
                drops << s.toObject().value(QStringLiteral("path")).toString();
            }
        }
        QCOMPARE(drops, (QStringList{QStringLiteral("conv"), QStringLiteral("fc/_packed_params/_packed_params")}));
        QCOMPARE(p.value(QStringLiteral("dropped")).toInt(), 2);
        const QJsonObject info = jsonOf(ckptscope({"inspect", "--json", file}).out);
        bool qint8Weight = false;
        for (const auto& t : info.value(QStringLiteral("tensors")).toArray()) {
            qint8Weight =
                qint8Weight || (t.toObject()
                                    .value(QStringLiteral("path"))
                                    .toString()
                                    .startsWith(QStringLiteral("fc/_packed_params/_packed_params/")) &&
                                t.toObject().value(QStringLiteral("dtype")).toString() == QStringLiteral("qint8"));
        }
        QVERIFY(qint8Weight);
        QCOMPARE(
            info.value(QStringLiteral("torchscript")).toObject().value(QStringLiteral("left_out")).toArray().size(), 2);
    }

    // constants.pkl's tensors (code constants) are in the key tree under `constants.pkl`, their
    // bytes read from constants/<key>, and in no state dict.
    void constantsAreShown()
    {
        const std::string file = fixture(QStringLiteral("ts_constants.pt")).toStdString();
        const QJsonObject info = jsonOf(ckptscope({"inspect", "--json", file}).out);
        const QJsonArray tensors = info.value(QStringLiteral("tensors")).toArray();
        QCOMPARE(tensors.size(), 1);
        QCOMPARE(tensors[0].toObject().value(QStringLiteral("path")).toString(), QStringLiteral("constants.pkl/0"));
        QCOMPARE(tensors[0].toObject().value(QStringLiteral("shape")).toArray(), (QJsonArray{3}));
        QVERIFY(info.value(QStringLiteral("storages"))
                    .toArray()[0]
                    .toObject()
                    .value(QStringLiteral("record"))
                    .toString()
                    .endsWith(QStringLiteral("/constants/0")));
        QVERIFY(info.value(QStringLiteral("torchscript"))
                    .toObject()
                    .value(QStringLiteral("state_dict"))
                    .toArray()
                    .isEmpty());
        // The bytes are torch's: the constant compares equal to the tensor saved beside it.
        const Run d = ckptscope({"diff", "--select", "constants.pkl:", file, file + ".constants.pt"});
        QVERIFY2(d.rc == 0, (d.out + d.err).c_str());
    }

    void findingSaysWhatConvertDoes()
    {
        const Run r = ckptscope({"check", "--json", fixture(QStringLiteral("ts_cnn.pt")).toStdString()});
        QVERIFY2(r.rc == 0 || r.rc == 1, r.err.c_str());
        QVERIFY(r.out.find("torchscript-archive") != std::string::npos);
        // weights_only=True refuses the archive as a whole, not global by global.
        QVERIFY(r.out.find("not-weights-only") == std::string::npos);
        QVERIFY(r.out.find("weights_only=True") != std::string::npos);
        QVERIFY(r.out.find("torch.jit.load(f).state_dict()") != std::string::npos);
    }

    // A TorchScript archive and the state dict torch.jit.load gives compare equal; with a changed
    // value they do not.
    void diffAgainstItsStateDict()
    {
        const std::string ts = fixture(QStringLiteral("ts_cnn.pt")).toStdString();
        const Run same = ckptscope({"diff", "--strict", ts, ts + ".expected.pt"});
        QVERIFY2(same.rc == 0, (same.out + same.err).c_str());
        const Run other =
            ckptscope({"diff", "--strict", ts, fixture(QStringLiteral("ts_lite.ptl")).toStdString() + ".expected.pt"});
        QCOMPARE(other.rc, 0);  // the same trained weights, saved for the lite interpreter
        const Run differ = ckptscope({"diff", ts, fixture(QStringLiteral("torchscript.pt")).toStdString()});
        QCOMPARE(differ.rc, 1);
    }
};

QTEST_GUILESS_MAIN(TestTorchScript)
#include "tst_torchscript.moc"
