// The rules over fixtures written by real PyTorch: each fires on the file that has its trap and
// stays silent on the near misses; quoted torch messages and strict-load reports are compared with
// what PyTorch 1.13 itself prints on this machine.
#include "diagnose/against.h"
#include "diagnose/diagnose.h"
#include "diagnose/report.h"
#include "oracle.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

#include <set>

using namespace ckpt;
using namespace ckpt::diagnose;
using diagtest::fixture;

namespace {

CheckpointPtr openFixture(const char* name)
{
    auto c = openCheckpoint(fixture(name));
    if (!c) {
        qWarning("%s", c.error().describe().c_str());
        return nullptr;
    }
    return *c;
}

std::vector<Finding> findingsOf(const char* name, CheckOptions opts = {})
{
    auto c = openFixture(name);
    if (!c) {
        return {};
    }
    auto f = check(*c, opts);
    if (!f) {
        qWarning("%s", f.error().describe().c_str());
        return {};
    }
    return *f;
}

const Finding* find(const std::vector<Finding>& fs, const std::string& code)
{
    for (const auto& f : fs) {
        if (f.code == code) {
            return &f;
        }
    }
    return nullptr;
}

std::string allDetails(const std::vector<Finding>& fs)
{
    std::string s;
    for (const auto& f : fs) {
        s += f.detail + "\n";
    }
    return s;
}

QStringList codesOf(const std::vector<Finding>& fs)
{
    QStringList out;
    for (const auto& f : fs) {
        out << QString::fromStdString(f.code);
    }
    return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s)
{
    return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

class TestDiagnose : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void rules_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QStringList>("must");
        QTest::addColumn<QStringList>("mustNot");
        const auto L = [](std::initializer_list<const char*> l) {
            QStringList s;
            for (auto c : l) {
                s << QString::fromLatin1(c);
            }
            return s;
        };
        const QStringList prefixes =
            L({"module-prefix", "nested-prefix", "compile-prefix", "opacus-prefix", "fsdp-prefix", "mixed-prefix"});
        QTest::newRow("plain") << QStringLiteral("plain_sd.pt") << QStringList{}
                               << prefixes + L({"device-pinned", "not-weights-only", "storage-bloat", "shared-storage",
                                                "whole-model", "legacy-format", "unsafe-callable", "mixed-devices"});
        QTest::newRow("ddp") << QStringLiteral("ddp_sd.pt") << L({"module-prefix"})
                             << L({"nested-prefix", "mixed-prefix", "device-pinned", "not-weights-only"});
        QTest::newRow("ddp cuda0") << QStringLiteral("ddp_sd_cuda0.pt") << L({"module-prefix", "device-pinned"})
                                   << L({"mixed-devices"});
        QTest::newRow("train") << QStringLiteral("train_ckpt.pt")
                               << L({"module-prefix", "device-pinned", "not-weights-only"})
                               << L({"mixed-devices", "unsafe-callable", "whole-model"});
        QTest::newRow("multi gpu") << QStringLiteral("multi_gpu.pt") << L({"device-pinned", "mixed-devices"})
                                   << prefixes;
        QTest::newRow("cuda3") << QStringLiteral("cuda3.pt") << L({"device-pinned"}) << L({"mixed-devices"});
        QTest::newRow("mps") << QStringLiteral("mps.pt") << L({"device-pinned"}) << L({"mixed-devices"});
        QTest::newRow("legacy") << QStringLiteral("legacy_sd.pt") << L({"legacy-format"})
                                << L({"whole-model", "not-weights-only"});
        QTest::newRow("legacy whole") << QStringLiteral("legacy_whole_model.pt")
                                      << L({"legacy-format", "whole-model", "not-weights-only"}) << QStringList{};
        QTest::newRow("whole") << QStringLiteral("whole_model.pt") << L({"whole-model", "not-weights-only"})
                               << L({"module-prefix", "legacy-format"});
        QTest::newRow("whole dp") << QStringLiteral("whole_model_dp.pt") << L({"whole-model", "module-prefix"})
                                  << QStringList{};
        QTest::newRow("views") << QStringLiteral("views.pt") << L({"storage-bloat", "shared-storage"}) << prefixes;
        QTest::newRow("tied clean") << QStringLiteral("tied_clean.pt") << L({"shared-storage"})
                                    << L({"storage-bloat"}) + prefixes;
        QTest::newRow("dtypes") << QStringLiteral("dtypes.pt") << QStringList{}
                                << L({"storage-bloat", "not-weights-only", "nonfinite-values"});
        QTest::newRow("proto4") << QStringLiteral("proto4.pt") << L({"not-weights-only"}) << L({"unsafe-callable"});
        QTest::newRow("proto5") << QStringLiteral("proto5.pt") << L({"not-weights-only"}) << L({"unsafe-callable"});
        QTest::newRow("compile") << QStringLiteral("compile_sd.pt") << L({"compile-prefix"})
                                 << L({"module-prefix", "mixed-prefix"});
        QTest::newRow("opacus") << QStringLiteral("opacus_sd.pt") << L({"opacus-prefix"})
                                << L({"module-prefix", "mixed-prefix"});
        QTest::newRow("nested") << QStringLiteral("nested_prefix.pt") << L({"nested-prefix"})
                                << L({"module-prefix", "mixed-prefix"});
        QTest::newRow("fsdp") << QStringLiteral("fsdp_sd.pt") << L({"fsdp-prefix"}) << L({"module-prefix"});
        QTest::newRow("mixed") << QStringLiteral("mixed_prefix.pt") << L({"mixed-prefix"})
                               << L({"module-prefix", "nested-prefix"});
        QTest::newRow("lightning (near miss)") << QStringLiteral("lightning.pt") << QStringList{} << prefixes;
        QTest::newRow("mlp_module (near miss)") << QStringLiteral("inner_module_name.pt") << QStringList{} << prefixes;
        QTest::newRow("numpy namespace") << QStringLiteral("numpy_namespace.pt") << L({"not-weights-only"})
                                         << L({"unsafe-callable"});
        QTest::newRow("os.system") << QStringLiteral("unsafe_os_system.pt")
                                   << L({"unsafe-callable", "not-weights-only"}) << QStringList{};
        QTest::newRow("eval") << QStringLiteral("unsafe_eval.pt") << L({"unsafe-callable"}) << QStringList{};
        QTest::newRow("safetensors") << QStringLiteral("model.safetensors") << QStringList{}
                                     << L({"not-weights-only", "legacy-format", "device-pinned"});
        QTest::newRow("deflated") << QStringLiteral("deflated.pt") << L({"module-prefix"}) << L({"device-pinned"});
        QTest::newRow("nonfinite without --values")
            << QStringLiteral("nonfinite.pt") << QStringList{} << L({"nonfinite-values"});
        QTest::newRow("big40k") << QStringLiteral("big40k.pt") << QStringList{} << prefixes + L({"storage-bloat"});
    }

    void rules()
    {
        QFETCH(QString, file);
        QFETCH(QStringList, must);
        QFETCH(QStringList, mustNot);
        const auto fs = findingsOf(file.toStdString().c_str());
        const auto codes = codesOf(fs);
        for (const auto& c : must) {
            QVERIFY2(codes.contains(c), qPrintable(c + QStringLiteral(" missing; got ") + codes.join(u',')));
        }
        for (const auto& c : mustNot) {
            QVERIFY2(!codes.contains(c),
                     qPrintable(c + QStringLiteral(" fired: ") + QString::fromStdString(allDetails(fs))));
        }
        // Every finding is complete: a title on one line and a detail that says something.
        for (const auto& f : fs) {
            QVERIFY(!f.title.empty() && f.title.find('\n') == std::string::npos);
            QVERIFY(f.detail.size() > 40);
            QVERIFY(!f.paths.empty() || f.code == "legacy-format" || f.code == "torchscript-archive" ||
                    f.code == "not-weights-only");
        }
        // Sorted by severity, errors first.
        for (std::size_t i = 1; i < fs.size(); ++i) {
            QVERIFY(fs[i - 1].severity >= fs[i].severity);
        }
    }

    // not-weights-only fires exactly where the oracle's PyTorch 2.6 rules refuse the file.
    void weightsOnlyAgreesWithOracle()
    {
        const QDir dir(QStringLiteral(CKPTSCOPE_FIXTURE_DIR));
        int compared = 0;
        for (const auto& name : dir.entryList({QStringLiteral("*.oracle.json")})) {
            const auto base = name.chopped(int(sizeof(".oracle.json") - 1));
            const auto pt = base + QStringLiteral(".pt");
            if (!dir.exists(pt)) {
                continue;  // model.safetensors has no pickle
            }
            QFile f(dir.filePath(name));
            QVERIFY(f.open(QIODevice::ReadOnly));
            const auto o = QJsonDocument::fromJson(f.readAll()).object();
            if (!o.contains(QStringLiteral("weights_only_ok_26"))) {
                continue;
            }
            const bool ok = o.value(QStringLiteral("weights_only_ok_26")).toBool();
            const auto fs = findingsOf(pt.toStdString().c_str());
            QVERIFY2((find(fs, "not-weights-only") == nullptr) == ok, qPrintable(pt));
            ++compared;
        }
        QVERIFY(compared >= 25);
    }

    void notWeightsOnlyNamesGlobals()
    {
        const auto fs = findingsOf("train_ckpt.pt");
        const auto* f = find(fs, "not-weights-only");
        QVERIFY(f);
        for (const char* g : {"argparse.Namespace", "numpy.core.multiarray._reconstruct",
                              "numpy.core.multiarray.scalar", "numpy.dtype", "numpy.ndarray"}) {
            QVERIFY2(f->detail.find(g) != std::string::npos, g);
        }
        QVERIFY(f->fix && f->fix->weightsOnly);
        QVERIFY(f->detail.find("Unsupported global: GLOBAL argparse.Namespace") != std::string::npos ||
                f->detail.find("Unsupported global: GLOBAL numpy") != std::string::npos);

        const auto p4 = findingsOf("proto4.pt");
        const auto* g = find(p4, "not-weights-only");
        QVERIFY(g);
        QVERIFY2(g->detail.find("Unsupported operand 149") != std::string::npos, g->detail.c_str());
        QVERIFY(g->detail.find("FRAME") != std::string::npos);
        // The oracle says the same.
        const auto oracle = diagtest::python(
            QStringLiteral("import sys, torch_oracle; sys.argv = ['torch_oracle.py', 'weights-only', sys.argv[1]]; "
                           "torch_oracle.main()"),
            {QString::fromStdString(fixture("proto4.pt"))});
        QVERIFY2(oracle.contains(QStringLiteral("Unsupported operand 149")) ||
                     oracle.startsWith(QStringLiteral("PYTHON FAILED")),
                 qPrintable(oracle));
    }

    void unsafeCallable()
    {
        for (const char* file : {"unsafe_os_system.pt", "unsafe_eval.pt"}) {
            const auto fs = findingsOf(file);
            const auto* f = find(fs, "unsafe-callable");
            QVERIFY(f);
            QCOMPARE(f->severity, Severity::Error);
            QCOMPARE(fs.front().severity, Severity::Error);
            QVERIFY(f->detail.find("torch.load") != std::string::npos);
            QVERIFY(f->detail.find("would run it") != std::string::npos);
        }
        const auto fs = findingsOf("unsafe_os_system.pt");
        QVERIFY(find(fs, "unsafe-callable")->title.find("posix.system") != std::string::npos);
        QVERIFY(findingsOf("unsafe_eval.pt").front().title.find("builtins.eval") != std::string::npos);
    }

    void prefixFixes_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("code");
        QTest::addColumn<QStringList>("strip");
        QTest::addColumn<QString>("dict");
        QTest::newRow("ddp") << QStringLiteral("ddp_sd.pt") << QStringLiteral("module-prefix")
                             << QStringList{QStringLiteral("module.")} << QString();
        QTest::newRow("train") << QStringLiteral("train_ckpt.pt") << QStringLiteral("module-prefix")
                               << QStringList{QStringLiteral("module.")} << QStringLiteral("model");
        QTest::newRow("nested") << QStringLiteral("nested_prefix.pt") << QStringLiteral("nested-prefix")
                                << QStringList{QStringLiteral("module."), QStringLiteral("module.")} << QString();
        QTest::newRow("compile") << QStringLiteral("compile_sd.pt") << QStringLiteral("compile-prefix")
                                 << QStringList{QStringLiteral("_orig_mod.")} << QString();
        QTest::newRow("opacus") << QStringLiteral("opacus_sd.pt") << QStringLiteral("opacus-prefix")
                                << QStringList{QStringLiteral("_module.")} << QString();
        QTest::newRow("fsdp") << QStringLiteral("fsdp_sd.pt") << QStringLiteral("fsdp-prefix")
                              << QStringList{QStringLiteral("_fsdp_wrapped_module.")} << QString();
        QTest::newRow("mixed") << QStringLiteral("mixed_prefix.pt") << QStringLiteral("mixed-prefix")
                               << QStringList{QStringLiteral("module.")} << QString();
    }

    void prefixFixes()
    {
        QFETCH(QString, file);
        QFETCH(QString, code);
        QFETCH(QStringList, strip);
        QFETCH(QString, dict);
        const auto fs = findingsOf(file.toStdString().c_str());
        const auto* f = find(fs, code.toStdString());
        QVERIFY(f);
        QVERIFY(f->fix);
        QStringList got;
        for (const auto& s : f->fix->stripPrefixes) {
            got << QString::fromStdString(s);
        }
        QCOMPARE(got, strip);
        QCOMPARE(QString::fromStdString(f->paths.front()), dict);
        QVERIFY(fixCommandLine(*f->fix, "x.pt").find("--strip-prefix " + strip.front().toStdString()) !=
                std::string::npos);
    }

    void mixedPrefixNamesTheOddKeys()
    {
        const auto fs = findingsOf("mixed_prefix.pt");
        const auto* f = find(fs, "mixed-prefix");
        QVERIFY(f);
        for (const char* k : {"module.conv.weight", "module.conv.bias", "module.bn.weight", "module.bn.bias"}) {
            QVERIFY2(contains(f->paths, k), k);
        }
        QVERIFY(!contains(f->paths, "fc.weight"));
        QVERIFY(f->detail.find("4 keys with `module.`") != std::string::npos);
    }

    // The messages device-pinned quotes are the ones PyTorch 1.13 raises for the same file.
    void deviceMessagesMatchTorch_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("oneGpu");  // pretend CUDA with one device (torch's own validate_cuda_device)
        QTest::newRow("cuda0, no CUDA") << QStringLiteral("ddp_sd_cuda0.pt") << false;
        QTest::newRow("cuda3, no CUDA") << QStringLiteral("cuda3.pt") << false;
        QTest::newRow("cuda3, one GPU") << QStringLiteral("cuda3.pt") << true;
        QTest::newRow("cuda0..3, one GPU") << QStringLiteral("multi_gpu.pt") << true;
        QTest::newRow("train, no CUDA") << QStringLiteral("train_ckpt.pt") << false;
    }

    void deviceMessagesMatchTorch()
    {
        QFETCH(QString, file);
        QFETCH(bool, oneGpu);
        const QString script = QStringLiteral("import sys, torch, torch.serialization as s\n"
                                              "kw = {}\n"
                                              "if sys.argv[2] == '1':\n"
                                              "    torch.cuda.is_available = lambda: True\n"
                                              "    torch.cuda.device_count = lambda: 1\n"
                                              "    def probe(storage, loc):\n"
                                              "        if loc.startswith('cuda'): s.validate_cuda_device(loc)\n"
                                              "        return storage\n"
                                              "    kw['map_location'] = probe\n"
                                              "try:\n"
                                              "    torch.load(sys.argv[1], **kw)\n"
                                              "    print('loaded')\n"
                                              "except RuntimeError as e:\n"
                                              "    print('RuntimeError: ' + str(e))\n");
        const auto torchSays = diagtest::python(script, {QString::fromStdString(fixture(file.toStdString().c_str())),
                                                         oneGpu ? QStringLiteral("1") : QStringLiteral("0")});
        QVERIFY2(torchSays.startsWith(QStringLiteral("RuntimeError: Attempting to deserialize")),
                 qPrintable(torchSays));
        const auto fs = findingsOf(file.toStdString().c_str());
        const auto* f = find(fs, "device-pinned");
        QVERIFY(f);
        QVERIFY2(f->detail.find("\"" + torchSays.toStdString() + "\"") != std::string::npos,
                 qPrintable(QStringLiteral("torch: ") + torchSays + QStringLiteral("\nours: ") +
                            QString::fromStdString(f->detail)));
        QVERIFY(f->fix && f->fix->mapLocation.all == std::string("cpu"));
    }

    void ddpProjection()
    {
        auto c = openFixture("ddp_sd_cuda0.pt");
        QVERIFY(c);
        std::uint64_t onCuda0 = 0;
        for (const auto& s : c->storages) {
            onCuda0 += s.location == "cuda:0" ? s.nbytes : 0;
        }
        QVERIFY(onCuda0 > 0);
        const auto fs = *check(*c);
        const auto* f = find(fs, "device-pinned");
        QVERIFY(f);
        for (int n : {2, 4, 8}) {
            const auto text = humanBytes(onCuda0 * static_cast<unsigned>(n)) + " with " + std::to_string(n) + " ranks";
            QVERIFY2(f->detail.find(text) != std::string::npos, text.c_str());
        }
    }

    void storageBloatAndSharing()
    {
        const auto views = findingsOf("views.pt");
        const auto* bloat = find(views, "storage-bloat");
        QVERIFY(bloat);
        QVERIFY(contains(bloat->paths, "small"));
        QVERIFY(!contains(bloat->paths, "tied_a"));
        QVERIFY2(
            bloat->detail.find("`small` (float32 [2, 64]) views 512 bytes of a 1.0 MiB (1,048,576 bytes) storage") !=
                std::string::npos,
            bloat->detail.c_str());
        QVERIFY(bloat->fix && bloat->fix->compact);
        QCOMPARE(bloat->severity, Severity::Warning);
        const auto* shared = find(views, "shared-storage");
        QVERIFY(shared && contains(shared->paths, "tied_a") && contains(shared->paths, "tied_b"));
        QCOMPARE(shared->severity, Severity::Info);

        const auto tied = findingsOf("tied_clean.pt");
        const auto* t = find(tied, "shared-storage");
        QVERIFY(t && contains(t->paths, "embed.weight") && contains(t->paths, "head.weight"));
        QVERIFY(t->detail.find("tied") != std::string::npos);
    }

    void wholeModelFix()
    {
        const auto whole = findingsOf("whole_model.pt");
        const auto* f = find(whole, "whole-model");
        QVERIFY(f && f->fix && f->fix->unwrapModules);
        QVERIFY(f->detail.find("fixture_models.ConvNet") != std::string::npos);
        QVERIFY(f->detail.find("No module named 'fixture_models'") != std::string::npos);
        const auto dp = findingsOf("whole_model_dp.pt");
        const auto* g = find(dp, "whole-model");
        QVERIFY(g && g->fix && g->fix->unwrapModules);
        QCOMPARE(g->fix->stripPrefixes, std::vector<std::string>{"module."});
    }

    void jsonShape()
    {
        const auto fs = findingsOf("train_ckpt.pt");
        const auto doc = QJsonDocument::fromJson(QByteArray::fromStdString(renderJson(fs, "train_ckpt.pt")));
        const auto o = doc.object();
        QCOMPARE(o.value(QStringLiteral("schema")).toInt(), 2);
        const auto arr = o.value(QStringLiteral("findings")).toArray();
        QCOMPARE(arr.size(), qsizetype(fs.size()));
        for (const auto& v : arr) {
            const auto f = v.toObject();
            for (const char* k : {"code", "severity", "title", "detail", "paths", "fix"}) {
                QVERIFY2(f.contains(QString::fromLatin1(k)), k);
            }
            QVERIFY(f.value(QStringLiteral("fix")).isObject() || f.value(QStringLiteral("fix")).isNull());
        }
        const auto* mp = find(fs, "module-prefix");
        QVERIFY(mp);
        const auto one = QJsonDocument::fromJson(QByteArray::fromStdString(findingToJson(*mp))).object();
        const auto fix = one.value(QStringLiteral("fix")).toObject();
        const auto strip = fix.value(QStringLiteral("strip_prefix"));
        QVERIFY(strip == QJsonValue(QStringLiteral("module.")) ||
                strip.toArray() == QJsonArray{QStringLiteral("module.")});
        // The fix round-trips through transform::Options.
        auto back = transform::Options::fromJson(QJsonDocument(fix).toJson().toStdString());
        QVERIFY(back);
        QCOMPARE(back->stripPrefixes, mp->fix->stripPrefixes);
    }

    // --against: the exact text of load_state_dict(strict=True) on real nn.Modules.
    void againstMatchesTorch_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("variant");
        QTest::addColumn<QString>("select");
        QTest::addColumn<QString>("strip");
        QTest::addColumn<QString>("add");
        QTest::newRow("module. into bare") << QStringLiteral("ddp_sd.pt") << QStringLiteral("ConvNet") << QString()
                                           << QString() << QStringLiteral("module.") << QString();
        QTest::newRow("bare into DataParallel")
            << QStringLiteral("plain_sd.pt") << QStringLiteral("ConvNet") << QStringLiteral("dp") << QString()
            << QString() << QStringLiteral("module.");
        QTest::newRow("size mismatch") << QStringLiteral("plain_sd.pt") << QStringLiteral("ConvNet")
                                       << QStringLiteral("fc3") << QString() << QString() << QString();
        QTest::newRow("mixed into bare") << QStringLiteral("mixed_prefix.pt") << QStringLiteral("ConvNet") << QString()
                                         << QString() << QStringLiteral("module.") << QString();
        QTest::newRow("compile into bare") << QStringLiteral("compile_sd.pt") << QStringLiteral("ConvNet") << QString()
                                           << QString() << QStringLiteral("_orig_mod.") << QString();
        QTest::newRow("nested into bare") << QStringLiteral("nested_prefix.pt") << QStringLiteral("ConvNet")
                                          << QString() << QString() << QStringLiteral("module.module.") << QString();
        QTest::newRow("lightning into inner")
            << QStringLiteral("lightning.pt") << QStringLiteral("LitInner") << QString() << QStringLiteral("state_dict")
            << QStringLiteral("model.") << QString();
        QTest::newRow("matching") << QStringLiteral("plain_sd.pt") << QStringLiteral("ConvNet") << QString()
                                  << QString() << QString() << QString();
        QTest::newRow("fsdp outer wrapper") << QStringLiteral("fsdp_sd.pt") << QStringLiteral("FsdpNet") << QString()
                                            << QString() << QStringLiteral("_fsdp_wrapped_module.") << QString();
        QTest::newRow("different model") << QStringLiteral("inner_module_name.pt") << QStringLiteral("ConvNet")
                                         << QString() << QString() << QString() << QString();
        QTest::newRow("train into DataParallel")
            << QStringLiteral("train_ckpt.pt") << QStringLiteral("ConvNet") << QStringLiteral("dp")
            << QStringLiteral("model") << QString() << QString();
    }

    void againstMatchesTorch()
    {
        QFETCH(QString, file);
        QFETCH(QString, model);
        QFETCH(QString, variant);
        QFETCH(QString, select);
        QFETCH(QString, strip);
        QFETCH(QString, add);
        QTemporaryDir tmp;
        const auto refPath = tmp.filePath(QStringLiteral("model_keys.txt"));
        const QString script =
            QStringLiteral("import sys, torch, fixture_models as fm\n"
                           "from torch import nn\n"
                           "ckpt, name, variant, ref, select = sys.argv[1:6]\n"
                           "m = fm.make(name)\n"
                           "if variant == 'fc3': m.fc = nn.Linear(4, 3)\n"
                           "if variant == 'dp': m = nn.DataParallel(m)\n"
                           "with open(ref, 'w') as f:\n"
                           "    for k, v in m.state_dict().items(): f.write(f'{k} {list(v.shape)}\\n')\n"
                           "sd = torch.load(ckpt, map_location='cpu')\n"
                           "for part in filter(None, select.split('/')): sd = sd[part]\n"
                           "try:\n"
                           "    m.load_state_dict(sd, strict=True)\n"
                           "    print('ok')\n"
                           "except RuntimeError as e:\n"
                           "    print(e)\n");
        const auto torchSays =
            diagtest::python(script, {QString::fromStdString(fixture(file.toStdString().c_str())), model,
                                      variant.isEmpty() ? QStringLiteral("-") : variant, refPath, select});
        QVERIFY2(!torchSays.startsWith(QStringLiteral("PYTHON FAILED")), qPrintable(torchSays));

        auto c = openFixture(file.toStdString().c_str());
        QVERIFY(c);
        auto ref = loadReference(refPath.toStdString());
        QVERIFY2(ref, ref ? "" : ref.error().describe().c_str());
        QCOMPARE(ref->kind, ReferenceKind::Text);
        std::vector<Finding> fs;
        QVERIFY(compareAgainst(*c, *ref, std::nullopt, fs));  // default selection finds state_dict / model
        const auto details = allDetails(fs);
        if (torchSays == QStringLiteral("ok")) {
            QCOMPARE(codesOf(fs), QStringList{QStringLiteral("strict-load-ok")});
            return;
        }
        // Each line torch prints after its header appears verbatim in our findings.
        auto lines = torchSays.split(u'\n');
        QVERIFY(lines.front().startsWith(QStringLiteral("Error(s) in loading state_dict for")));
        lines.removeFirst();
        QStringList expectCodes;
        for (auto line : lines) {
            line = line.trimmed();
            QVERIFY2(details.find(line.toStdString()) != std::string::npos,
                     qPrintable(QStringLiteral("torch: ") + line + QStringLiteral("\nours: ") +
                                QString::fromStdString(details)));
            expectCodes << (line.startsWith(QStringLiteral("Missing"))      ? QStringLiteral("missing-keys")
                            : line.startsWith(QStringLiteral("Unexpected")) ? QStringLiteral("unexpected-keys")
                                                                            : QStringLiteral("size-mismatch"));
        }
        expectCodes.removeDuplicates();
        auto got = codesOf(fs);
        got.sort();
        expectCodes.sort();
        QCOMPARE(got, expectCodes);
        // The prefix fix, when one exists, is on the key findings.
        const Finding* keyFinding = find(fs, "missing-keys") ? find(fs, "missing-keys") : find(fs, "unexpected-keys");
        if (strip.isEmpty() && add.isEmpty()) {
            QVERIFY(!keyFinding || !keyFinding->fix);
            return;
        }
        QVERIFY(keyFinding && keyFinding->fix);
        const auto& fix = *keyFinding->fix;
        QCOMPARE(fix.addPrefix.value_or(""), add.toStdString());
        QCOMPARE(fix.stripPrefixes.empty() ? std::string() : fix.stripPrefixes.front(), strip.toStdString());
        QCOMPARE(fix.select.value_or(""), select.toStdString());
    }

    // A checkpoint, an inspect-style JSON and a text file describe the same model the same way.
    void againstReferenceForms()
    {
        auto c = openFixture("ddp_sd.pt");
        QVERIFY(c);
        const auto asCheckpoint = loadReference(fixture("plain_sd.pt"));
        QVERIFY(asCheckpoint);
        QCOMPARE(asCheckpoint->kind, ReferenceKind::Checkpoint);
        const auto asJson = loadReference(fixture("plain_sd.oracle.json"));
        QVERIFY2(asJson, asJson ? "" : asJson.error().describe().c_str());
        QCOMPARE(asJson->kind, ReferenceKind::InspectJson);
        QTemporaryDir tmp;
        const auto txt = tmp.filePath(QStringLiteral("keys.txt"));
        {
            QFile f(txt);
            QVERIFY(f.open(QIODevice::WriteOnly));
            for (const auto& k : asCheckpoint->keys.keys) {
                std::string shape;
                for (auto d : k.shape) {
                    shape += (shape.empty() ? "" : ",") + std::to_string(d);
                }
                f.write(QByteArray::fromStdString(k.key + " " + (shape.empty() ? "[]" : shape) + "\n"));
            }
        }
        const auto asText = loadReference(txt.toStdString());
        QVERIFY(asText);
        QCOMPARE(asText->keys.keys.size(), asCheckpoint->keys.keys.size());
        std::string first;
        for (const auto* ref : {&*asCheckpoint, &*asJson, &*asText}) {
            std::vector<Finding> fs;
            QVERIFY(compareAgainst(*c, *ref, std::nullopt, fs));
            const auto* m = find(fs, "missing-keys");
            QVERIFY(m && m->fix);
            const auto missingLine = m->detail.substr(m->detail.find("Missing key(s)"));
            const auto cut = missingLine.substr(0, missingLine.find(". ") + 1);
            if (first.empty()) {
                first = cut;
            }
            QCOMPARE(cut, first);
        }
        // The whole-model checkpoint gives model.state_dict()'s keys (non-persistent buffers left out).
        const auto whole = loadReference(fixture("whole_model_buffers.pt"));
        QVERIFY(whole);
        QCOMPARE(whole->keys.modelName, std::string("BufferNet"));
        bool hasScale = false;
        for (const auto& k : whole->keys.keys) {
            QVERIFY(k.key != "mask");
            hasScale = hasScale || k.key == "scale";
        }
        QVERIFY(hasScale);
    }

    void againstErrors()
    {
        auto c = openFixture("lightning.pt");
        QVERIFY(c);
        auto ref = loadReference(fixture("plain_sd.pt"));
        QVERIFY(ref);
        std::vector<Finding> fs;
        auto bad = compareAgainst(*c, *ref, std::string("no/such/dict"), fs);
        QVERIFY(!bad);
        QCOMPARE(bad.error().code, ErrorCode::Usage);
        QVERIFY(!loadReference("/nonexistent/ref.txt"));
        QTemporaryDir tmp;
        const auto txt = tmp.filePath(QStringLiteral("bad.txt"));
        QFile f(txt);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("fc.weight four by three\n");
        f.close();
        auto r = loadReference(txt.toStdString());
        QVERIFY(!r);
        QVERIFY(r.error().message.find("line 1") != std::string::npos);
    }
};

QTEST_GUILESS_MAIN(TestDiagnose)
#include "tst_diagnose.moc"
