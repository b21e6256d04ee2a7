// Convert options: location specs (and the device-name parser under them), JSON round trips (the
// `fix` of a finding), merge and presets.
#include "transform/allowlist.h"
#include "transform/options.h"
#include "util/device_name.h"

#include <QtTest>

using ckpt::transform::LocationMap;
using ckpt::transform::Options;

class TestTransformOptions : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // util/device_name.h: the one parser behind location tags, torch.device, map_location and
    // test-load devices; "" in `text` means rejected.
    void parsesDeviceNames_data()
    {
        QTest::addColumn<QString>("input");
        QTest::addColumn<QString>("type");
        QTest::addColumn<qint64>("index");  // -1: none
        QTest::addColumn<QString>("text");
        QTest::newRow("cpu") << QStringLiteral("cpu") << QStringLiteral("cpu") << qint64{-1} << QStringLiteral("cpu");
        QTest::newRow("cuda") << QStringLiteral("cuda") << QStringLiteral("cuda") << qint64{-1}
                              << QStringLiteral("cuda");
        QTest::newRow("cuda:1") << QStringLiteral("cuda:1") << QStringLiteral("cuda") << qint64{1}
                                << QStringLiteral("cuda:1");
        QTest::newRow("leading zero") << QStringLiteral("cuda:07") << QStringLiteral("cuda") << qint64{7}
                                      << QStringLiteral("cuda:7");
        QTest::newRow("five digits") << QStringLiteral("cuda:12345") << QStringLiteral("cuda") << qint64{12345}
                                     << QStringLiteral("cuda:12345");
        QTest::newRow("int64 max") << QStringLiteral("xla:9223372036854775807") << QStringLiteral("xla")
                                   << qint64{9223372036854775807} << QStringLiteral("xla:9223372036854775807");
        QTest::newRow("privateuse1") << QStringLiteral("npu:0") << QStringLiteral("npu") << qint64{0}
                                     << QStringLiteral("npu:0");
        QTest::newRow("odd type kept") << QStringLiteral("CUDA:0") << QStringLiteral("CUDA") << qint64{0}
                                       << QStringLiteral("CUDA:0");
        for (const char* bad : {"", ":0", "cuda:", "cuda:-1", "cuda:-0", "cuda:+1", "cuda:x", "cuda:1:2", "cuda: 1",
                                "cuda:9223372036854775808"}) {
            QTest::newRow(bad) << QString::fromLatin1(bad) << QString() << qint64{-1} << QString();
        }
    }
    void parsesDeviceNames()
    {
        QFETCH(QString, input);
        QFETCH(QString, type);
        QFETCH(qint64, index);
        QFETCH(QString, text);
        const auto d = ckpt::parseDeviceName(input.toStdString());
        QCOMPARE(d.has_value(), !text.isEmpty());
        if (d) {
            QCOMPARE(QString::fromStdString(d->type), type);
            QCOMPARE(d->index.value_or(-1), index);
            QCOMPARE(QString::fromStdString(d->text()), text);
        }
    }
    void backendNames()
    {
        for (const char* good : {"cpu", "cuda", "mps", "privateuseone", "npu2", "my_backend"}) {
            QVERIFY2(ckpt::isBackendName(good), good);
        }
        for (const char* bad : {"", "CUDA", "2cuda", "gpu 1", "cu-da"}) {
            QVERIFY2(!ckpt::isBackendName(bad), bad);
        }
    }
    // torch.serialization.validate_cuda_device, word for word (docs/format.md §4.3).
    void torchCudaTexts()
    {
        QCOMPARE(QString::fromStdString(ckpt::cudaUnavailableText()),
                 QStringLiteral("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
                                "False. If you are running on a CPU-only machine, please use torch.load with "
                                "map_location=torch.device('cpu') to map your storages to the CPU."));
        QCOMPARE(QString::fromStdString(ckpt::cudaDeviceCountText(3, 1)),
                 QStringLiteral("Attempting to deserialize object on CUDA device 3 but torch.cuda.device_count() is "
                                "1. Please use torch.load with map_location to map your storages to an existing "
                                "device."));
    }

    void parsesLocationSpecs_data()
    {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("normalised");
        QTest::addColumn<QString>("cuda0");
        QTest::addColumn<QString>("cuda2");
        QTest::newRow("cpu") << QStringLiteral("cpu") << QStringLiteral("cpu") << QStringLiteral("cpu")
                             << QStringLiteral("cpu");
        QTest::newRow("one device") << QStringLiteral("cuda:1") << QStringLiteral("cuda:1") << QStringLiteral("cuda:1")
                                    << QStringLiteral("cuda:1");
        QTest::newRow("pairs") << QStringLiteral("cuda:0=cuda:1, cuda:2=cpu")
                               << QStringLiteral("cuda:0=cuda:1,cuda:2=cpu") << QStringLiteral("cuda:1")
                               << QStringLiteral("cpu");
        QTest::newRow("pair leaves others") << QStringLiteral("cuda:1=cuda:0") << QStringLiteral("cuda:1=cuda:0")
                                            << QStringLiteral("cuda:0") << QStringLiteral("cuda:2");
        QTest::newRow("privateuse1") << QStringLiteral("npu:0") << QStringLiteral("npu:0") << QStringLiteral("npu:0")
                                     << QStringLiteral("npu:0");
    }
    void parsesLocationSpecs()
    {
        QFETCH(QString, spec);
        QFETCH(QString, normalised);
        QFETCH(QString, cuda0);
        QFETCH(QString, cuda2);
        auto m = LocationMap::parse(spec.toStdString());
        QVERIFY2(m.ok(), m.ok() ? "" : m.error().message.c_str());
        QCOMPARE(QString::fromStdString(m->spec()), normalised);
        QCOMPARE(QString::fromStdString(m->apply("cuda:0")), cuda0);
        QCOMPARE(QString::fromStdString(m->apply("cuda:2")), cuda2);
        QVERIFY(!m->empty());
        auto again = LocationMap::parse(m->spec());
        QVERIFY(again.ok());
        QCOMPARE(again->spec(), m->spec());
    }

    void rejectsBadLocationSpecs_data()
    {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("fragment");
        QTest::newRow("empty") << QString() << QStringLiteral("empty");
        QTest::newRow("upper case") << QStringLiteral("CUDA:0") << QStringLiteral("'CUDA:0' is not a device");
        QTest::newRow("no index") << QStringLiteral("cuda:") << QStringLiteral("'cuda:' is not a device");
        QTest::newRow("bad index") << QStringLiteral("cuda:x") << QStringLiteral("not a device");
        QTest::newRow("mixed") << QStringLiteral("cpu,cuda:0=cpu") << QStringLiteral("not a pair");
        QTest::newRow("bad target") << QStringLiteral("cuda:0=gpu 1") << QStringLiteral("'gpu 1' is not a device");
        QTest::newRow("twice") << QStringLiteral("cuda:0=cpu,cuda:0=cuda:1") << QStringLiteral("mapped twice");
        QTest::newRow("trailing comma") << QStringLiteral("cuda:0=cpu,") << QStringLiteral("not a pair");
    }
    void rejectsBadLocationSpecs()
    {
        QFETCH(QString, spec);
        QFETCH(QString, fragment);
        auto m = LocationMap::parse(spec.toStdString());
        QVERIFY(!m.ok());
        QCOMPARE(m.error().code, ckpt::ErrorCode::Usage);
        QVERIFY2(m.error().message.find(fragment.toStdString()) != std::string::npos, m.error().message.c_str());
    }

    void jsonRoundTrip()
    {
        Options o;
        o.stripPrefixes = {"module.", "_orig_mod."};
        o.addPrefix = "net.";
        o.select = "model";
        o.drop = {"optimizer", "scheduler"};
        o.mapLocation = *LocationMap::parse("cuda:0=cpu");
        o.unwrapModules = true;
        o.weightsOnly = true;
        o.compact = true;
        o.singleModulePrefix = true;
        o.format = ckpt::transform::OutputFormat::Safetensors;
        const std::string json = o.toJson();
        QCOMPARE(QString::fromStdString(json),
                 QStringLiteral(R"({"strip_prefix":["module.","_orig_mod."],"add_prefix":"net.","select":"model",)"
                                R"("drop":["optimizer","scheduler"],"map_location":"cuda:0=cpu","unwrap":true,)"
                                R"("weights_only":true,"compact":true,"multi_card":true,"format":"safetensors"})"));
        auto back = Options::fromJson(json);
        QVERIFY(back.ok());
        QCOMPARE(back->toJson(), json);
        QCOMPARE(back->mapLocation.apply("cuda:0"), std::string("cpu"));
    }

    void jsonDefaultsAreEmptyAndSingleStringPrefixAccepted()
    {
        QCOMPARE(QString::fromStdString(Options{}.toJson()), QStringLiteral("{}"));
        auto o = Options::fromJson(R"({"strip_prefix": "module.", "map_location": "cpu"})");
        QVERIFY(o.ok());
        QCOMPARE(o->stripPrefixes, std::vector<std::string>{"module."});
        QCOMPARE(*o->mapLocation.all, std::string("cpu"));
        QCOMPARE(QString::fromStdString(o->toJson()),
                 QStringLiteral(R"({"strip_prefix":"module.","map_location":"cpu"})"));
    }

    void jsonRejectsBadInput_data()
    {
        QTest::addColumn<QString>("json");
        QTest::addColumn<QString>("fragment");
        QTest::newRow("not json") << QStringLiteral("{") << QStringLiteral("not valid JSON");
        QTest::newRow("array") << QStringLiteral("[]") << QStringLiteral("expected a JSON object");
        QTest::newRow("unknown") << QStringLiteral(R"({"strip":"module."})") << QStringLiteral("unknown key 'strip'");
        QTest::newRow("bool type") << QStringLiteral(R"({"unwrap":1})")
                                   << QStringLiteral("'unwrap' must be true or false");
        QTest::newRow("drop type") << QStringLiteral(R"({"drop":"optimizer"})")
                                   << QStringLiteral("'drop' must be a list");
        QTest::newRow("format") << QStringLiteral(R"({"format":"onnx"})") << QStringLiteral("'format' must be");
        QTest::newRow("location")
            << QStringLiteral(R"({"map_location":"gpu"})").replace(QStringLiteral("gpu"), QStringLiteral("GPU"))
            << QStringLiteral("not a device");
    }
    void jsonRejectsBadInput()
    {
        QFETCH(QString, json);
        QFETCH(QString, fragment);
        auto o = Options::fromJson(json.toStdString());
        QVERIFY(!o.ok());
        QCOMPARE(o.error().code, ckpt::ErrorCode::Usage);
        QVERIFY2(o.error().message.find(fragment.toStdString()) != std::string::npos, o.error().message.c_str());
    }

    void mergeCombinesFixes()
    {
        Options a = *Options::fromJson(R"({"strip_prefix":"module.","map_location":"cuda:0=cpu","drop":["x"]})");
        const Options b = *Options::fromJson(
            R"({"strip_prefix":["module.","_orig_mod."],"map_location":"cuda:1=cpu,cuda:0=cuda:1","drop":["x","y"],"weights_only":true})");
        a.merge(b);
        QCOMPARE(a.stripPrefixes, (std::vector<std::string>{"module.", "_orig_mod."}));
        QCOMPARE(a.drop, (std::vector<std::string>{"x", "y"}));
        QCOMPARE(a.mapLocation.spec(), std::string("cuda:0=cuda:1,cuda:1=cpu"));
        QVERIFY(a.weightsOnly);
        QVERIFY(!a.unwrapModules);
        a.merge(*Options::fromJson(R"({"map_location":"cpu"})"));
        QCOMPARE(a.mapLocation.spec(), std::string("cpu"));
        a.merge(*Options::fromJson(R"({"map_location":"cuda:3=cuda:0"})"));
        QCOMPARE(a.mapLocation.spec(), std::string("cpu"));  // an explicit "everything" wins over pairs
    }

    void presets()
    {
        const Options single = ckpt::transform::singleCardPreset();
        QVERIFY(single.unwrapModules && single.weightsOnly && !single.singleModulePrefix);
        QCOMPARE(single.mapLocation.apply("cuda:3"), std::string("cpu"));
        // Longest first, so `module.module.` is removed whole before `module.` is tried.
        for (std::size_t i = 1; i < single.stripPrefixes.size(); ++i) {
            QVERIFY(single.stripPrefixes[i - 1].size() >= single.stripPrefixes[i].size());
        }
        for (const char* p : {"module.", "module.module.", "_orig_mod.", "_module.", "_module.module."}) {
            QVERIFY(std::find(single.stripPrefixes.begin(), single.stripPrefixes.end(), p) !=
                    single.stripPrefixes.end());
        }
        const Options multi = ckpt::transform::multiCardPreset();
        QVERIFY(multi.singleModulePrefix);
        QCOMPARE(multi.stripPrefixes, single.stripPrefixes);
        auto back = Options::fromJson(multi.toJson());
        QVERIFY(back.ok());
        QCOMPARE(back->toJson(), multi.toJson());
    }

    void allowlistMatchesTorch26()
    {
        using ckpt::transform::weightsOnlyAllowed;
        for (const char* ok :
             {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch.FloatStorage",
              "torch.cuda.HalfTensor", "torch.bfloat16", "torch.float", "torch.uint3", "torch.per_channel_affine",
              "torch.device", "builtins.set", "_codecs.encode", "torch._tensor._rebuild_from_type_v2",
              "torch.storage.UntypedStorage", "torch.storage.TypedStorage"}) {
            QVERIFY2(weightsOnlyAllowed(ok), ok);
        }
        for (const char* no : {"argparse.Namespace", "numpy.core.multiarray.scalar", "builtins.frozenset",
                               "builtins.bytes", "__main__.Net", "torch.nn.modules.linear.Linear", "torch.uint8x",
                               "torch._utils._rebuild_sparse_csr_tensor", "torch.storage._load_from_bytes",
                               "torch.Tensorx", "torch.load", "torch.UntypedStorage"}) {
            QVERIFY2(!weightsOnlyAllowed(no), no);
        }
        using ckpt::transform::unsafeCallable;
        for (const char* bad : {"os.system", "posix.system", "subprocess.Popen", "builtins.eval", "builtins.getattr",
                                "nt.system", "runpy._run_code", "torch.load", "os.path.join"}) {
            QVERIFY2(unsafeCallable(bad), bad);
        }
        for (const char* fine : {"argparse.Namespace", "collections.OrderedDict", "numpy.dtype", "__main__.Net",
                                 "osmosis.Thing", "builtins.set"}) {
            QVERIFY2(!unsafeCallable(fine), fine);
        }
    }
};

QTEST_GUILESS_MAIN(TestTransformOptions)
#include "tst_transform_options.moc"
