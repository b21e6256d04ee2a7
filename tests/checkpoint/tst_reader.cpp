// The reader against real PyTorch: every fixture written by tests/fixtures/gen_fixtures.py comes
// with an oracle (what torch.load(map_location='cpu') produced); ckptscope's tensor index and every
// tensor's bytes must match it. Bad inputs must fail with the expected error class, one line.
#include "checkpoint/checkpoint.h"
#include "checkpoint/state_dict.h"
#include "checkpoint/tensor_bytes.h"
#include "time_bound.h"

#include <QCryptographicHash>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

#include <map>

using namespace ckpt;

namespace {

QString fixtureDir()
{
    return QStringLiteral(CKPTSCOPE_FIXTURE_DIR);
}

QJsonDocument readJson(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    return QJsonDocument::fromJson(f.readAll());
}

QString errorCodeName(ErrorCode c)
{
    switch (c) {
    case ErrorCode::Io:
        return QStringLiteral("Io");
    case ErrorCode::NotCheckpoint:
        return QStringLiteral("NotCheckpoint");
    case ErrorCode::Truncated:
        return QStringLiteral("Truncated");
    case ErrorCode::Corrupt:
        return QStringLiteral("Corrupt");
    case ErrorCode::Unsupported:
        return QStringLiteral("Unsupported");
    case ErrorCode::Limit:
        return QStringLiteral("Limit");
    default:
        return QStringLiteral("Other");
    }
}

QJsonArray shapeArray(const std::vector<std::int64_t>& v)
{
    QJsonArray a;
    for (auto d : v) {
        a.append(static_cast<qint64>(d));
    }
    return a;
}

// A pickled nn.Module as torch.save writes its __dict__: `_parameters`, `_buffers` and
// `_modules` OrderedDicts (pairs k0, v0, ...), plus `_non_persistent_buffers_set` when given.
pickle::ValueId moduleValue(pickle::Arena& a, std::vector<pickle::ValueId> params, std::vector<pickle::ValueId> buffers,
                            std::vector<pickle::ValueId> modules, std::vector<pickle::ValueId> nonPersistent = {})
{
    std::vector<pickle::ValueId> state{a.str("_parameters"), a.dict(std::move(params), true),
                                       a.str("_buffers"),    a.dict(std::move(buffers), true),
                                       a.str("_modules"),    a.dict(std::move(modules), true)};
    if (!nonPersistent.empty()) {
        pickle::Value set;
        set.kind = pickle::Kind::Set;
        set.items = std::move(nonPersistent);
        state.push_back(a.str("_non_persistent_buffers_set"));
        state.push_back(a.add(std::move(set)));
    }
    pickle::ObjectInfo o;
    o.callable = {"models", "Net"};
    o.state = a.dict(std::move(state), false);
    return a.object(std::move(o));
}

QString tensorSha(const Checkpoint& c, const TensorEntry& t, std::size_t chunkBytes = std::size_t{8} << 20U)
{
    QCryptographicHash h(QCryptographicHash::Sha256);
    auto r = forEachTensorChunk(
        c, t,
        [&](Bytes b) {
            h.addData(QByteArrayView(reinterpret_cast<const char*>(b.data()), static_cast<qsizetype>(b.size())));
            return true;
        },
        chunkBytes);
    if (!r) {
        return {};
    }
    return QString::fromLatin1(h.result().toHex());
}

}  // namespace

class TestReader : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void fixturesMatchTorch_data();
    void fixturesMatchTorch();
    void badInputs_data();
    void badInputs();
    void bundledSample();
    void largeStateDictIsFast();
    void keyPaths();
    void moduleStateDictOrder();
    void moduleStateDictDepth();
    void moduleStateDictCycle();
};

void TestReader::fixturesMatchTorch_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("oracle");
    const QDir dir(fixtureDir());
    const auto oracles = dir.entryList({QStringLiteral("*.oracle.json")}, QDir::Files, QDir::Name);
    QVERIFY2(oracles.size() >= 20, "the fixture generator wrote too few fixtures");
    for (const auto& o : oracles) {
        const QString base = o.chopped(QStringLiteral(".oracle.json").size());
        QString file;
        for (const auto& candidate : dir.entryList({base + QStringLiteral(".*")}, QDir::Files)) {
            if (!candidate.endsWith(QStringLiteral(".oracle.json"))) {
                file = dir.filePath(candidate);
            }
        }
        QTest::newRow(qPrintable(base)) << file << dir.filePath(o);
    }
}

void TestReader::fixturesMatchTorch()
{
    QFETCH(QString, file);
    QFETCH(QString, oracle);
    const QJsonObject expect = readJson(oracle).object();
    QVERIFY(!expect.isEmpty());
    auto ck = openCheckpoint(file.toStdString());
    QVERIFY2(ck.ok(), ck.ok() ? "" : ck.error().describe().c_str());
    const Checkpoint& c = **ck;
    QCOMPARE(QString::fromLatin1(formatName(c.format).data()), expect.value(QStringLiteral("format")).toString());

    std::map<QString, const TensorEntry*> byPath;
    for (const auto& t : c.tensors) {
        byPath[QString::fromStdString(t.path)] = &t;
    }
    const QJsonArray tensors = expect.value(QStringLiteral("tensors")).toArray();
    for (const auto& v : tensors) {
        const QJsonObject et = v.toObject();
        const QString path = et.value(QStringLiteral("path")).toString();
        const auto it = byPath.find(path);
        QVERIFY2(it != byPath.end(), qPrintable(QStringLiteral("missing tensor ") + path));
        const TensorEntry& t = *it->second;
        QCOMPARE(QString::fromLatin1(dtypeName(t.dtype).data()), et.value(QStringLiteral("dtype")).toString());
        QCOMPARE(shapeArray(t.shape), et.value(QStringLiteral("shape")).toArray());
        if (t.form == pickle::TensorForm::Strided) {
            QCOMPARE(shapeArray(t.stride), et.value(QStringLiteral("stride")).toArray());
            QCOMPARE(static_cast<qint64>(t.storageOffset), et.value(QStringLiteral("storage_offset")).toInteger());
        }
        QCOMPARE(QString::fromStdString(t.location), et.value(QStringLiteral("location")).toString());
        QCOMPARE(static_cast<qint64>(t.nbytes), et.value(QStringLiteral("nbytes")).toInteger());
        QCOMPARE(t.requiresGrad, et.value(QStringLiteral("requires_grad")).toBool());
        QCOMPARE(t.isParameter, et.value(QStringLiteral("is_parameter")).toBool());
        const QString sha = et.value(QStringLiteral("sha256")).toString();
        if (!sha.isEmpty() && t.form == pickle::TensorForm::Strided) {
            QCOMPARE(tensorSha(c, t), sha);
            // A chunk smaller than most runs and larger than some: both the buffered and the
            // pass-through path, with chunk boundaries inside runs.
            QCOMPARE(tensorSha(c, t, 12), sha);
        }
    }
    QCOMPARE(static_cast<qsizetype>(c.tensors.size()), tensors.size());

    std::map<QString, QString> objects;
    for (const auto& o : c.objects) {
        objects[QString::fromStdString(o.path)] = QString::fromStdString(o.type);
    }
    for (const auto& v : expect.value(QStringLiteral("objects")).toArray()) {
        const QJsonObject eo = v.toObject();
        const QString path = eo.value(QStringLiteral("path")).toString();
        QVERIFY2(objects.count(path) == 1, qPrintable(QStringLiteral("missing object ") + path));
        QCOMPARE(objects[path], eo.value(QStringLiteral("type")).toString());
    }
}

void TestReader::badInputs_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("code");
    QTest::addColumn<QString>("fragment");
    QTest::addColumn<QStringList>("codesOk");
    QTest::addColumn<bool>("maySucceed");
    const QString dir = fixtureDir() + QStringLiteral("/bad");
    const QJsonArray rows = readJson(dir + QStringLiteral("/manifest.json")).array();
    QVERIFY2(rows.size() >= 15, "too few bad inputs");
    for (const auto& v : rows) {
        const QJsonObject r = v.toObject();
        const QString f = r.value(QStringLiteral("file")).toString();
        QStringList ok;
        for (const auto& c : r.value(QStringLiteral("codes_ok")).toArray()) {
            ok << c.toString();
        }
        QTest::newRow(qPrintable(f)) << dir + QLatin1Char('/') + f << r.value(QStringLiteral("expect_code")).toString()
                                     << r.value(QStringLiteral("message_contains")).toString() << ok
                                     << r.value(QStringLiteral("may_succeed")).toBool();
    }
}

void TestReader::badInputs()
{
    QFETCH(QString, file);
    QFETCH(QString, code);
    QFETCH(QString, fragment);
    QFETCH(QStringList, codesOk);
    QFETCH(bool, maySucceed);
    QElapsedTimer timer;
    timer.start();
    auto ck = openCheckpoint(file.toStdString());
    if (ck.ok() && maySucceed) {
        return;  // torch itself may accept it (an unclosed MARK at STOP); reading it must simply not crash
    }
    QVERIFY2(!ck.ok(), "a bad input was accepted");
    const Error& e = ck.error();
    const QString line = QString::fromStdString(e.describe());
    QVERIFY2(!line.contains(QLatin1Char('\n')), "the error is not one line");
    QVERIFY2(line.contains(file), "the error does not name the file");
    QVERIFY2(line.contains(fragment, Qt::CaseInsensitive), qPrintable(line + QStringLiteral(" lacks ") + fragment));
    if (codesOk.isEmpty()) {
        codesOk << code;
    }
    QVERIFY2(codesOk.contains(errorCodeName(e.code)), qPrintable(errorCodeName(e.code) + QStringLiteral(": ") + line));
    QVERIFY2(timer.elapsed() < ckpt::test::timeBoundMs(5000), "bad input took too long");
}

void TestReader::bundledSample()
{
    auto ck = openCheckpoint(CKPTSCOPE_SOURCE_DIR "/resources/sample/ddp_checkpoint.pt");
    QVERIFY2(ck.ok(), ck.ok() ? "" : ck.error().describe().c_str());
    const Checkpoint& c = **ck;
    QVERIFY(!c.tensors.empty());
    bool prefixed = false;
    bool cuda = false;
    for (const auto& t : c.tensors) {
        prefixed = prefixed || t.path.find("/module.") != std::string::npos;
        cuda = cuda || t.location == "cuda:0";
    }
    QVERIFY(prefixed);
    QVERIFY(cuda);
    bool ns = false;
    for (const auto& o : c.objects) {
        ns = ns || o.type == "argparse.Namespace";
    }
    QVERIFY(ns);
}

void TestReader::largeStateDictIsFast()
{
    QElapsedTimer timer;
    timer.start();
    auto ck = openCheckpoint((fixtureDir() + QStringLiteral("/big40k.pt")).toStdString());
    QVERIFY2(ck.ok(), ck.ok() ? "" : ck.error().describe().c_str());
    qInfo("big40k.pt opened in %lld ms", static_cast<long long>(timer.elapsed()));
    QCOMPARE((*ck)->tensors.size(), std::size_t{40000});
    QVERIFY((*ck)->nodes[kRootNode].stateDictLike);
}

void TestReader::keyPaths()
{
    auto ck = openCheckpoint((fixtureDir() + QStringLiteral("/whole_model_dp.pt")).toStdString());
    QVERIFY2(ck.ok(), ck.ok() ? "" : ck.error().describe().c_str());
    const Checkpoint& c = **ck;
    bool found = false;
    for (const auto& t : c.tensors) {
        found = found || t.path.starts_with("_modules/module/_modules/");
    }
    QVERIFY(found);
    QVERIFY(c.nodes[kRootNode].kind == NodeKind::Module);
    const auto n = c.find("_modules/module");
    QVERIFY(n.valid());
    QCOMPARE(QString::fromStdString(c.pathOf(n)), QStringLiteral("_modules/module"));
}

// state_dict() order: parameters (None skipped), persistent buffers, then each child module.
void TestReader::moduleStateDictOrder()
{
    pickle::Arena a;
    const auto tensor = [&] { return a.tensor({}); };
    const auto child = moduleValue(a, {a.str("x"), tensor()}, {}, {});
    const auto root = moduleValue(
        a, {a.str("w"), tensor(), a.str("b"), a.none()}, {a.str("mean"), tensor(), a.str("scratch"), tensor()},
        {a.str("fc"), child, a.str("gone"), a.none(), a.str("act"), a.integer(3)}, {a.str("scratch")});
    QVERIFY(isModuleObject(a, root));
    QVERIFY(!isModuleObject(a, a.integer(1)));
    const auto sd = moduleStateDict(a, root, "model");
    QVERIFY2(sd, sd ? "" : sd.error().message.c_str());
    std::vector<std::string> keys;
    for (const auto& e : sd->entries) {
        keys.push_back(e.key);
    }
    QCOMPARE(keys, (std::vector<std::string>{"w", "mean", "fc.x"}));
    QCOMPARE(sd->skipped.size(), std::size_t{1});
    QCOMPARE(QString::fromStdString(sd->skipped[0].path), QStringLiteral("model/_modules/act"));
    QVERIFY(sd->skipped[0].why == StateDictSkip::Why::NotModule);
}

// One rule for every caller: kMaxModuleDepth levels below the module asked about are read, one
// more is a Limit error (torch itself would stop at Python's recursion limit).
void TestReader::moduleStateDictDepth()
{
    const auto chain = [](pickle::Arena& a, std::uint32_t levels) {
        pickle::ValueId m = moduleValue(a, {a.str("w"), a.tensor({})}, {}, {});
        for (std::uint32_t i = 0; i < levels; ++i) {
            m = moduleValue(a, {}, {}, {a.str("inner"), m});
        }
        return m;
    };
    pickle::Arena a;
    const auto deepest = moduleStateDict(a, chain(a, kMaxModuleDepth), "");
    QVERIFY2(deepest, deepest ? "" : deepest.error().message.c_str());
    QCOMPARE(deepest->entries.size(), std::size_t{1});
    QCOMPARE(deepest->entries[0].key.size(), kMaxModuleDepth * std::string("inner.").size() + 1);
    const auto tooDeep = moduleStateDict(a, chain(a, kMaxModuleDepth + 1), "");
    QVERIFY(!tooDeep);
    QCOMPARE(tooDeep.error().code, ErrorCode::Limit);
    QVERIFY2(tooDeep.error().message.find("more than 1000 levels") != std::string::npos,
             tooDeep.error().message.c_str());
}

void TestReader::moduleStateDictCycle()
{
    pickle::Arena a;
    const auto m = moduleValue(a, {}, {}, {});
    const auto modules = pickle::dictGet(a, a[pickle::objectOf(a, m).state].items, "_modules");
    a[modules].items = {a.str("self"), m};
    const auto sd = moduleStateDict(a, m, "net");
    QVERIFY(!sd);
    QCOMPARE(sd.error().code, ErrorCode::Unsupported);
    QCOMPARE(QString::fromStdString(sd.error().message),
             QStringLiteral("module 'net/_modules/self' contains itself; it has no state dict"));
}

QTEST_GUILESS_MAIN(TestReader)
#include "tst_reader.moc"
