// Checkpoints in the forms torch < 1.0 and Python 2 wrote, and a whole optimizer keyed by its
// Parameters, against torch.load of the same bytes (tests/fixtures/gen_legacy.py writes both):
// class names, every tensor at torch's path with its values, numpy arrays in Python 2 strs, and
// text that is not UTF-8 reported and escaped.
#include "checkpoint/checkpoint.h"
#include "checkpoint/tensor_bytes.h"

#include <QCryptographicHash>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <map>

using namespace ckpt;

namespace {

QJsonObject readJson(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    return QJsonDocument::fromJson(f.readAll()).object();
}

QString sha256(std::string_view bytes)
{
    return QString::fromLatin1(
        QCryptographicHash::hash(QByteArrayView(bytes.data(), static_cast<qsizetype>(bytes.size())),
                                 QCryptographicHash::Sha256)
            .toHex());
}

QString tensorSha(const Checkpoint& c, const TensorEntry& t)
{
    std::string all;
    auto r = forEachTensorChunk(c, t, [&](Bytes b) {
        all.append(reinterpret_cast<const char*>(b.data()), b.size());  // NOLINT
        return true;
    });
    return r ? sha256(all) : QString();
}

QJsonArray shapeArray(const std::vector<std::int64_t>& v)
{
    QJsonArray a;
    for (auto d : v) {
        a.append(static_cast<qint64>(d));
    }
    return a;
}

}  // namespace

class TestLegacy : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void matchesTorch_data();
    void matchesTorch();
    void python2Numpy();
    void tensorKeys();
    void undecodableText();

private:
    [[nodiscard]] QString file(const char* name) const { return dir_.filePath(QLatin1String(name)); }
    QTemporaryDir dir_;
};

void TestLegacy::initTestCase()
{
    QVERIFY(dir_.isValid());
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral(CKPTSCOPE_PYTHON),
            {QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/fixtures/gen_legacy.py"), dir_.path()});
    QVERIFY(p.waitForFinished(300000));
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, p.readAll().constData());
}

void TestLegacy::matchesTorch_data()
{
    QTest::addColumn<QString>("name");
    QTest::newRow("python 2, torch 0.3 whole model") << QStringLiteral("py2_model.pt");
    QTest::newRow("torch 0.4 whole model") << QStringLiteral("t04_model.pt");
    QTest::newRow("optimizer pickled whole") << QStringLiteral("optimizer_whole.pt");
}

// Every tensor torch.load gives, at the same path, with the same dtype, shape, flags and values;
// no other; and every object with torch's class.
void TestLegacy::matchesTorch()
{
    QFETCH(QString, name);
    const QString path = dir_.filePath(name);
    auto c = openCheckpoint(path.toStdString());
    QVERIFY2(c.ok(), c.ok() ? "" : c.error().describe().c_str());
    const QJsonObject oracle = readJson(path + QStringLiteral(".oracle.json"));
    const QJsonArray tensors = oracle.value(QStringLiteral("tensors")).toArray();
    QVERIFY(!tensors.isEmpty());
    std::map<QString, const TensorEntry*> ours;
    for (const auto& t : (*c)->tensors) {
        ours.emplace(QString::fromStdString(t.path), &t);
    }
    QCOMPARE(ours.size(), static_cast<std::size_t>(tensors.size()));
    for (const auto& v : tensors) {
        const QJsonObject et = v.toObject();
        const QString p = et.value(QStringLiteral("path")).toString();
        const auto it = ours.find(p);
        QVERIFY2(it != ours.end(), qPrintable(QStringLiteral("missing tensor ") + p));
        const TensorEntry& t = *it->second;
        QCOMPARE(QString::fromLatin1(dtypeName(t.dtype).data()), et.value(QStringLiteral("dtype")).toString());
        QCOMPARE(shapeArray(t.shape), et.value(QStringLiteral("shape")).toArray());
        QVERIFY2(t.isParameter == et.value(QStringLiteral("is_parameter")).toBool(), qPrintable(p));
        QVERIFY2(t.requiresGrad == et.value(QStringLiteral("requires_grad")).toBool(), qPrintable(p));
        QCOMPARE(tensorSha(**c, t), et.value(QStringLiteral("sha256")).toString());
    }
    std::map<QString, QString> types;
    for (const auto& o : (*c)->objects) {
        types.emplace(QString::fromStdString(o.path), QString::fromStdString(o.type));
    }
    for (const auto& v : oracle.value(QStringLiteral("objects")).toArray()) {
        const QString p = v.toObject().value(QStringLiteral("path")).toString();
        QVERIFY2(types.contains(p), qPrintable(QStringLiteral("missing object ") + p));
        QCOMPARE(types[p], v.toObject().value(QStringLiteral("type")).toString());
    }
}

// numpy pickled its bytes as a Python 2 str: decoded to the array numpy loads.
void TestLegacy::python2Numpy()
{
    auto c = openCheckpoint(file("py2_model.pt").toStdString());
    QVERIFY2(c.ok(), c.ok() ? "" : c.error().describe().c_str());
    const QJsonArray arrays = readJson(file("py2_model.pt.oracle.json")).value(QStringLiteral("numpy")).toArray();
    QCOMPARE(arrays.size(), 1);
    const QJsonObject e = arrays[0].toObject();
    const NodeIndex n = (*c)->find(e.value(QStringLiteral("path")).toString().toStdString());
    QVERIFY(n.valid());
    pickle::NumpyInfo np;
    QVERIFY(pickle::decodeNumpy((*c)->arena, (*c)->node(n).value, np));
    QCOMPARE(QString::fromStdString(np.dtype), e.value(QStringLiteral("dtype")).toString());
    QCOMPARE(shapeArray(np.shape), e.value(QStringLiteral("shape")).toArray());
    QCOMPARE(sha256(np.data), e.value(QStringLiteral("sha256")).toString());
    QCOMPARE((*c)->objects[(*c)->node(n).object].type, std::string("numpy.ndarray"));
}

// A Parameter reached first as a key of the optimizer's state is a tensor there and again in
// param_groups, both viewing the model's storage.
void TestLegacy::tensorKeys()
{
    auto c = openCheckpoint(file("optimizer_whole.pt").toStdString());
    QVERIFY2(c.ok(), c.ok() ? "" : c.error().describe().c_str());
    const Checkpoint& ck = **c;
    const NodeIndex key = ck.find("optimizer/state/0.key");
    const NodeIndex param = ck.find("optimizer/param_groups/0/params/0");
    const NodeIndex weight = ck.find("model/_modules/0/_parameters/weight");
    QVERIFY(key.valid() && param.valid() && weight.valid());
    QCOMPARE(ck.node(key).kind, NodeKind::Tensor);
    QCOMPARE(ck.node(param).kind, NodeKind::Tensor);
    QCOMPARE(ck.tensors[ck.node(key).tensor].storage, ck.tensors[ck.node(weight).tensor].storage);
    QCOMPARE(ck.tensors[ck.node(param).tensor].storage, ck.tensors[ck.node(weight).tensor].storage);
    QVERIFY(ck.find("optimizer/state/0.value/momentum_buffer").valid());
}

// torch.load fails on a key that is not UTF-8: reported, escaped, and `inspect --json` stays JSON.
void TestLegacy::undecodableText()
{
    const QJsonObject oracle = readJson(file("bad_utf8.pt.oracle.json"));
    QVERIFY(oracle.value(QStringLiteral("error")).toString().startsWith(QStringLiteral("UnicodeDecodeError")));
    auto c = openCheckpoint(file("bad_utf8.pt").toStdString());
    QVERIFY2(c.ok(), c.ok() ? "" : c.error().describe().c_str());
    QCOMPARE((*c)->undecodable.count, std::size_t{1});
    QCOMPARE((*c)->undecodable.python2, std::size_t{0});
    QCOMPARE((*c)->undecodable.paths, std::vector<std::string>{"w\\x86ight"});
    QVERIFY(!(*c)->warnings.empty());
    QVERIFY((*c)->warnings.back().find("UnicodeDecodeError") != std::string::npos);

    auto py2 = openCheckpoint(file("py2_model.pt").toStdString());
    QVERIFY2(py2.ok(), py2.ok() ? "" : py2.error().describe().c_str());
    QCOMPARE((*py2)->undecodable.python2, (*py2)->undecodable.count);
    QVERIFY((*py2)->undecodable.paths.front() == "names/caf\\xe9");
    QVERIFY((*py2)->warnings.back().find("encoding='latin1'") != std::string::npos);

    QProcess p;
    p.start(QStringLiteral(CKPTSCOPE_BINARY_DIR "/app/ckptscope"),
            {QStringLiteral("inspect"), QStringLiteral("--json"), file("bad_utf8.pt")});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 0);
    QJsonParseError err{};
    const QJsonObject doc = QJsonDocument::fromJson(p.readAllStandardOutput(), &err).object();
    QCOMPARE(err.error, QJsonParseError::NoError);
    QCOMPARE(doc.value(QStringLiteral("tensors")).toArray()[0].toObject().value(QStringLiteral("path")).toString(),
             QStringLiteral("w\\x86ight"));
    QCOMPARE(doc.value(QStringLiteral("undecodable_strings")).toObject().value(QStringLiteral("count")).toInt(), 1);

    // `check` reports it as the error torch.load will raise, with the way out for Python 2 strs only.
    const auto finding = [](const QString& path) {
        QProcess check;
        check.start(QStringLiteral(CKPTSCOPE_BINARY_DIR "/app/ckptscope"),
                    {QStringLiteral("check"), QStringLiteral("--json"), path});
        check.waitForFinished(60000);
        const auto findings =
            QJsonDocument::fromJson(check.readAllStandardOutput()).object().value(QStringLiteral("findings")).toArray();
        for (const auto& f : findings) {
            if (f.toObject().value(QStringLiteral("code")).toString() == QStringLiteral("undecodable-text")) {
                return std::make_pair(check.exitCode(), f.toObject());
            }
        }
        return std::make_pair(check.exitCode(), QJsonObject{});
    };
    const auto [rc, corrupt] = finding(file("bad_utf8.pt"));
    QCOMPARE(rc, 1);
    QCOMPARE(corrupt.value(QStringLiteral("severity")).toString(), QStringLiteral("error"));
    QCOMPARE(corrupt.value(QStringLiteral("paths")).toArray().first().toString(), QStringLiteral("w\\x86ight"));
    QVERIFY(!corrupt.value(QStringLiteral("detail")).toString().contains(QStringLiteral("encoding='latin1') reads")));
    const auto [rc2, latin1] = finding(file("py2_model.pt"));
    QCOMPARE(rc2, 1);
    QVERIFY(latin1.value(QStringLiteral("detail")).toString().contains(QStringLiteral("encoding='latin1') reads")));
}

QTEST_GUILESS_MAIN(TestLegacy)
#include "tst_legacy.moc"
