// tests/corpus.json says why each fixture exists and what it holds (`expect`). This test holds the
// reader and the rules to every one of those facts, so the corpus cannot drift from what ckptscope
// sees; a fact with no check here fails, so a new kind of fact cannot go unchecked either.
#include "checkpoint/checkpoint.h"
#include "diagnose/against.h"
#include "diagnose/diagnose.h"
#include "diagnose/values.h"
#include "util/dtype.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

using namespace ckpt;
using namespace ckpt::diagnose;

namespace {

std::string fixturePath(const QString& name)
{
    return std::string(CKPTSCOPE_FIXTURE_DIR) + "/" + name.toStdString();
}

QJsonArray readCorpus(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    return QJsonDocument::fromJson(f.readAll()).array();
}

std::string str(const QJsonValue& v)
{
    return v.toString().toStdString();
}

std::vector<std::string> strings(const QJsonValue& v)
{
    std::vector<std::string> out;
    for (const auto& x : v.toArray()) {
        out.push_back(str(x));
    }
    return out;
}

std::vector<std::int64_t> ints(const QJsonValue& v)
{
    std::vector<std::int64_t> out;
    for (const auto& x : v.toArray()) {
        out.push_back(x.toInteger());
    }
    return out;
}

const Finding* findingOf(const std::vector<Finding>& fs, const std::string& code)
{
    for (const auto& f : fs) {
        if (f.code == code) {
            return &f;
        }
    }
    return nullptr;
}

bool has(const std::vector<std::string>& v, const std::string& s)
{
    return std::find(v.begin(), v.end(), s) != v.end();
}

const TensorEntry* tensorAt(const Checkpoint& c, const std::string& path)
{
    for (const auto& t : c.tensors) {
        if (t.path == path) {
            return &t;
        }
    }
    return nullptr;
}

// What the fixture generator calls a tensor's form, from TensorForm.
std::string formText(pickle::TensorForm f)
{
    switch (f) {
    case pickle::TensorForm::Strided:
        return "strided";
    case pickle::TensorForm::Quantized:
        return "quantized";
    case pickle::TensorForm::Sparse:
        return "sparse";
    case pickle::TensorForm::Meta:
        return "meta";
    default:
        return "other";
    }
}

const std::set<std::string> kPrefixCodes{"module-prefix", "nested-prefix", "compile-prefix",
                                         "opacus-prefix", "fsdp-prefix",   "mixed-prefix"};

// The finding a state dict whose every key starts with `prefix` must get.
std::string prefixCode(const std::string& prefix)
{
    if (prefix == "module.") {
        return "module-prefix";
    }
    if (prefix == "module.module.") {
        return "nested-prefix";
    }
    if (prefix == "_orig_mod.") {
        return "compile-prefix";
    }
    if (prefix == "_module.") {
        return "opacus-prefix";
    }
    return "?";
}

// The model's state_dict() keys and shapes from PyTorch (tests/fixtures/fixture_models.py), as a
// `check --against` text reference.
bool writeModelKeys(const QString& model, const QString& file, QString& error)
{
    QProcess p;
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("PYTHONPATH"), QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/fixtures"));
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(CKPTSCOPE_PYTHON),
            {QStringLiteral("-c"),
             QStringLiteral("import sys, fixture_models\n"
                            "sd = fixture_models.make(sys.argv[1]).state_dict()\n"
                            "with open(sys.argv[2], 'w') as f:\n"
                            "    for k, v in sd.items(): f.write(k + ' ' + ','.join(map(str, v.shape)) + '\\n')\n"),
             model, file});
    if (!p.waitForFinished(300000) || p.exitCode() != 0) {
        error = QString::fromUtf8(p.readAllStandardError());
        return false;
    }
    return true;
}

}  // namespace

class TestCorpus : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // The checked-in corpus is what the generator now says (gen_fixtures.py --write-corpus).
    void corpusMatchesTheGenerator()
    {
        const auto source = readCorpus(QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/corpus.json"));
        const auto generated = readCorpus(QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/corpus.json"));
        QVERIFY(!source.isEmpty());
        QVERIFY2(source == generated, "tests/corpus.json is stale: run tests/fixtures/gen_fixtures.py "
                                      "--write-corpus tests/corpus.json");
    }

    void expectations_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QJsonObject>("expect");
        int n = 0;
        for (const auto& e : readCorpus(QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/corpus.json"))) {
            const auto o = e.toObject();
            const auto file = o.value(QStringLiteral("file")).toString();
            if (file.endsWith(QLatin1Char('/'))) {
                continue;  // a folder of bad inputs: bad/manifest.json and tst_reader check those
            }
            QTest::newRow(qPrintable(file)) << file << o.value(QStringLiteral("expect")).toObject();
            ++n;
        }
        QVERIFY(n >= 30);
    }

    void expectations()
    {
        QFETCH(QString, file);
        QFETCH(QJsonObject, expect);
        auto opened = openCheckpoint(fixturePath(file));
        QVERIFY2(opened, opened ? "" : opened.error().describe().c_str());
        const Checkpoint& c = **opened;
        // Every node's index into the tensor and object tables points back at it (the window's key
        // tree reads them: an object index into the arena's objects once crashed it).
        for (std::uint32_t raw = 0; raw < c.nodes.size(); ++raw) {
            const NodeIndex i{raw};
            const Node& n = c.nodes[i];
            if (n.kind == NodeKind::Tensor) {
                QVERIFY(c.tensors.contains(n.tensor));
                QVERIFY(c.tensors[n.tensor].node == i);
            } else if (n.kind == NodeKind::Module || n.kind == NodeKind::Object) {
                QVERIFY2(c.objects.contains(n.object), qPrintable(QString::fromStdString(c.pathOf(i))));
                QVERIFY(c.objects[n.object].node == i);
            } else {
                QVERIFY(!n.object.valid());
            }
        }
        auto checked = check(c, CheckOptions{.values = true});
        QVERIFY2(checked, checked ? "" : checked.error().describe().c_str());
        const std::vector<Finding>& findings = *checked;
        const std::string prefixAt = str(expect.value(QStringLiteral("prefix_at")));

        for (auto it = expect.begin(); it != expect.end(); ++it) {
            const std::string fact = it.key().toStdString();
            const QJsonValue v = it.value();
            const QJsonObject obj = v.toObject();  // iterated below: must outlive its iterators
            qInfo("%s: %s", qPrintable(file), fact.c_str());
            if (fact == "prefix_at") {
                continue;  // where `prefix` applies
            }
            if (fact == "prefix") {
                if (v.isNull()) {
                    for (const auto& f : findings) {
                        QVERIFY2(!kPrefixCodes.count(f.code), f.code.c_str());
                    }
                    continue;
                }
                const std::string prefix = str(v);
                const Finding* f = findingOf(findings, prefixCode(prefix));
                QVERIFY2(f, prefixCode(prefix).c_str());
                QVERIFY(!f->paths.empty());
                QCOMPARE(f->paths.front(), prefixAt);
                auto keys = stateDictKeys(c, prefixAt.empty() ? std::nullopt : std::optional(prefixAt));
                QVERIFY(keys && !keys->keys.empty());
                for (const auto& k : keys->keys) {
                    QVERIFY2(k.key.starts_with(prefix), k.key.c_str());
                }
            } else if (fact == "locations") {
                std::set<std::string> seen;
                for (const auto& s : c.storages) {
                    seen.insert(s.location);
                }
                const auto want = strings(v);
                QCOMPARE(seen, std::set<std::string>(want.begin(), want.end()));
            } else if (fact == "keys") {
                auto keys = stateDictKeys(c, std::nullopt);
                QVERIFY(keys);
                QCOMPARE(static_cast<qint64>(keys->keys.size()), v.toInteger());
            } else if (fact == "metadata_versions") {
                // The versions named (BatchNorm's 2 decides num_batches_tracked); other modules have 1.
                auto keys = stateDictKeys(c, std::nullopt);
                QVERIFY(keys);
                for (auto m = obj.begin(); m != obj.end(); ++m) {
                    const auto found = keys->metadataVersions.find(m.key().toStdString());
                    QVERIFY2(found != keys->metadataVersions.end(), qPrintable(m.key()));
                    QCOMPARE(found->second, m.value().toInteger());
                }
            } else if (fact == "strict_load_fails_into") {
                // load_state_dict(strict=True) into the bare model: missing and unexpected keys.
                QTemporaryDir dir;
                const QString ref = dir.filePath(QStringLiteral("model_keys.txt"));
                QString error;
                QVERIFY2(writeModelKeys(v.toString(), ref, error), qPrintable(error));
                auto reference = loadReference(ref.toStdString());
                QVERIFY(reference);
                std::vector<Finding> against;
                QVERIFY(compareAgainst(c, *reference, std::nullopt, against));
                QVERIFY(findingOf(against, "missing-keys"));
                QVERIFY(findingOf(against, "unexpected-keys"));
                QVERIFY(!findingOf(against, "strict-load-ok"));
            } else if (fact == "unsafe_globals_26") {
                const Finding* f = findingOf(findings, "not-weights-only");
                QVERIFY(f);
                for (const auto& g : strings(v)) {
                    QVERIFY2(f->detail.find(g + " at `") != std::string::npos, g.c_str());
                }
            } else if (fact == "format") {
                QCOMPARE(std::string(formatName(c.format)), str(v));
            } else if (fact == "root_type") {
                QVERIFY(!c.objects.empty());
                QCOMPARE(c.objects[ObjectIndex{0}].path, std::string());
                QCOMPARE(c.objects[ObjectIndex{0}].type, str(v));
                QVERIFY(findingOf(findings, "whole-model"));
            } else if (fact == "weight_path") {
                const auto node = c.find(str(v));
                QVERIFY(node.valid());
                QCOMPARE(c.node(node).kind, NodeKind::Tensor);
            } else if (fact == "non_persistent") {
                // The module's _non_persistent_buffers_set: a set of buffer names.
                const auto node = c.find("_non_persistent_buffers_set");
                QVERIFY(node.valid());
                std::set<std::string> names;
                for (const auto item : c.arena[c.node(node).value].items) {
                    names.insert(c.arena[item].text);
                }
                const auto want = strings(v);
                QCOMPARE(names, std::set<std::string>(want.begin(), want.end()));
            } else if (fact == "state_dict_keys_exclude") {
                auto keys = stateDictKeys(c, std::nullopt);
                QVERIFY(keys && !keys->keys.empty());
                for (const auto& k : keys->keys) {
                    QVERIFY2(!has(strings(v), k.key), k.key.c_str());
                }
            } else if (fact == "bloat_path") {
                const Finding* f = findingOf(findings, "storage-bloat");
                QVERIFY(f);
                QVERIFY(has(f->paths, str(v)));
                const TensorEntry* t = tensorAt(c, str(v));
                QVERIFY(t && t->storage.valid());
                QCOMPARE(static_cast<qint64>(t->nbytes),
                         expect.value(QStringLiteral("bloat_tensor_nbytes")).toInteger());
                QCOMPARE(static_cast<qint64>(c.storages[t->storage].nbytes),
                         expect.value(QStringLiteral("bloat_storage_nbytes")).toInteger());
            } else if (fact == "bloat_storage_nbytes" || fact == "bloat_tensor_nbytes") {
                QVERIFY(expect.contains(QStringLiteral("bloat_path")));  // checked with it
            } else if (fact == "bloat") {
                QCOMPARE(findingOf(findings, "storage-bloat") != nullptr, v.toBool());
            } else if (fact == "tied") {
                const auto paths = strings(v);
                const Finding* f = findingOf(findings, "shared-storage");
                QVERIFY(f);
                const TensorEntry* first = tensorAt(c, paths.front());
                QVERIFY(first);
                for (const auto& p : paths) {
                    QVERIFY2(has(f->paths, p), p.c_str());
                    const TensorEntry* t = tensorAt(c, p);
                    QVERIFY2(t, p.c_str());
                    QCOMPARE(t->storage, first->storage);
                    QCOMPARE(t->storageOffset, first->storageOffset);
                }
            } else if (fact == "strided") {
                const auto o = v.toObject();
                const TensorEntry* t = tensorAt(c, "strided");
                QVERIFY(t && t->storage.valid());
                QCOMPARE(t->storageOffset, o.value(QStringLiteral("offset")).toInteger());
                QCOMPARE(t->shape, ints(o.value(QStringLiteral("shape"))));
                QCOMPARE(t->stride, ints(o.value(QStringLiteral("stride"))));
                QCOMPARE(static_cast<qint64>(c.storages[t->storage].numel),
                         o.value(QStringLiteral("storage_numel")).toInteger());
                QVERIFY(!t->contiguous);
            } else if (fact == "dtypes") {
                // One tensor per dtype, keyed by its torch name.
                const auto names = strings(v);
                QCOMPARE(c.tensors.size(), names.size());
                for (const auto& name : names) {
                    const TensorEntry* t = tensorAt(c, name);
                    QVERIFY2(t, name.c_str());
                    QCOMPARE(std::string(dtypeName(t->dtype)), name);
                }
            } else if (fact == "forms") {
                for (auto f = obj.begin(); f != obj.end(); ++f) {
                    const TensorEntry* t = tensorAt(c, f.key().toStdString());
                    QVERIFY2(t, qPrintable(f.key()));
                    QCOMPARE(formText(t->form), str(f.value()));
                }
            } else if (fact == "empty") {
                for (const auto& p : strings(v)) {
                    const TensorEntry* t = tensorAt(c, p);
                    QVERIFY2(t, p.c_str());
                    QCOMPARE(t->numel, std::uint64_t{0});
                    QVERIFY(!t->shape.empty());
                }
            } else if (fact == "scalars") {
                for (const auto& p : strings(v)) {
                    const TensorEntry* t = tensorAt(c, p);
                    QVERIFY2(t, p.c_str());
                    QVERIFY(t->shape.empty());
                    QCOMPARE(t->numel, std::uint64_t{1});
                }
            } else if (fact == "pickle_protocol") {
                QCOMPARE(static_cast<qint64>(c.pickleProtocol), v.toInteger());
            } else if (fact == "prefixes") {
                const Finding* f = findingOf(findings, "fsdp-prefix");
                QVERIFY(f);
                auto keys = stateDictKeys(c, std::nullopt);
                QVERIFY(keys);
                for (const auto& prefix : strings(v)) {
                    QVERIFY2(std::any_of(keys->keys.begin(), keys->keys.end(),
                                         [&](const StateKey& k) { return k.key.find(prefix) != std::string::npos; }),
                             prefix.c_str());
                }
                QVERIFY(keys->keys.front().key.starts_with(strings(v).front()));
            } else if (fact == "prefixed_keys") {
                const Finding* f = findingOf(findings, "mixed-prefix");
                QVERIFY(f);
                std::set<std::string> got(f->paths.begin(), f->paths.end());
                got.erase("");  // the dict itself
                const auto want = strings(v);
                QCOMPARE(got, std::set<std::string>(want.begin(), want.end()));
            } else if (fact == "prefix_problem") {
                const bool any = std::any_of(findings.begin(), findings.end(),
                                             [](const Finding& f) { return kPrefixCodes.count(f.code) != 0; });
                QCOMPARE(any, v.toBool());
            } else if (fact == "state_dict_at") {
                auto keys = stateDictKeys(c, std::nullopt);
                QVERIFY(keys && !keys->keys.empty());
                QCOMPARE(keys->dictPath, str(v));
            } else if (fact == "counts") {
                const Finding* f = findingOf(findings, "nonfinite-values");
                QVERIFY(f);
                std::vector<std::byte> scratch;
                for (auto t = obj.begin(); t != obj.end(); ++t) {
                    const std::string path = t.key().toStdString();
                    const TensorEntry* entry = tensorAt(c, path);
                    QVERIFY2(entry, path.c_str());
                    auto counts = tensorNonFinite(c, c.nodes[entry->node].tensor, scratch);
                    QVERIFY(counts);
                    const auto want = t.value().toObject();
                    QCOMPARE(static_cast<qint64>(counts->nan), want.value(QStringLiteral("nan")).toInteger());
                    QCOMPARE(static_cast<qint64>(counts->inf - counts->negInf),
                             want.value(QStringLiteral("posinf")).toInteger());
                    QCOMPARE(static_cast<qint64>(counts->negInf), want.value(QStringLiteral("neginf")).toInteger());
                    QCOMPARE(has(f->paths, path), counts->total() != 0);
                }
            } else if (fact == "objects") {
                std::vector<std::string> paths;
                for (const auto& o : c.objects) {
                    paths.push_back(o.path);
                }
                for (const auto& p : strings(v)) {
                    QVERIFY2(has(paths, p), p.c_str());
                }
            } else if (fact == "globals_include") {
                std::vector<std::string> names;
                for (const auto& g : c.globals) {
                    names.push_back(g.qualified);
                }
                for (const auto& g : strings(v)) {
                    QVERIFY2(has(names, g), g.c_str());
                }
            } else if (fact == "metadata") {
                for (auto m = obj.begin(); m != obj.end(); ++m) {
                    const std::pair<std::string, std::string> kv{m.key().toStdString(), str(m.value())};
                    QVERIFY2(std::find(c.safetensorsMetadata.begin(), c.safetensorsMetadata.end(), kv) !=
                                 c.safetensorsMetadata.end(),
                             kv.first.c_str());
                }
            } else if (fact == "archive_folder") {
                QCOMPARE(c.archiveFolder, str(v));
            } else if (fact == "same_tensors_as") {
                auto other = openCheckpoint(fixturePath(v.toString()));
                QVERIFY(other);
                const Checkpoint& o = **other;
                QCOMPARE(c.tensors.size(), o.tensors.size());
                std::vector<std::byte> s1;
                std::vector<std::byte> s2;
                for (std::uint32_t n = 0; n < c.tensors.size(); ++n) {
                    const TensorEntry& a = c.tensors[TensorIndex{n}];
                    const TensorEntry& b = o.tensors[TensorIndex{n}];
                    QCOMPARE(a.path, b.path);
                    QCOMPARE(a.dtype, b.dtype);
                    QCOMPARE(a.shape, b.shape);
                    QCOMPARE(a.stride, b.stride);
                    QCOMPARE(a.storageOffset, b.storageOffset);
                    QVERIFY(a.storage.valid() && b.storage.valid());
                    auto da = c.storageData(a.storage, s1);
                    auto db = o.storageData(b.storage, s2);
                    QVERIFY(da && db);
                    QVERIFY2(std::equal(da->begin(), da->end(), db->begin(), db->end()), a.path.c_str());
                }
            } else if (fact == "compressed") {
                const bool any = std::any_of(c.storages.begin(), c.storages.end(),
                                             [](const StorageEntry& s) { return s.compressed; });
                QCOMPARE(any, v.toBool());
            } else if (fact == "unsafe") {
                QCOMPARE(findingOf(findings, "unsafe-callable") != nullptr, v.toBool());
            } else if (fact == "unsafe_global") {
                const Finding* f = findingOf(findings, "unsafe-callable");
                QVERIFY(f);
                QVERIFY2(f->detail.find("`" + str(v) + "`") != std::string::npos, f->detail.c_str());
            } else {
                QFAIL(
                    qPrintable(QStringLiteral("%1: no check for the fact `%2` (add one to tests/corpus/tst_corpus.cpp)")
                                   .arg(file, it.key())));
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestCorpus)
#include "tst_corpus.moc"
