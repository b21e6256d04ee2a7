// The writer against real PyTorch: identity plans (the input's own tree, storages renumbered) are
// written as torch zip and as safetensors, then loaded back by torch.load and compared value by
// value with the source (tests/write/check_written.py), checked by zipfile/unzip, and read by an
// independent safetensors reader written here. Failure paths: a full disk (a 1 MiB tmpfs), a file
// size limit, cancellation, OUT == IN, a missing directory; none may leave a file behind.
#include "checkpoint/checkpoint.h"
#include "transform/transform.h"
#include "write/write.h"

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace ckpt;

namespace {

std::string fixturePath(const QString& name)
{
    return (QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/") + name).toStdString();
}

QString q(const std::string& s)
{
    return QString::fromStdString(s);
}

// The input's own tree with storages keyed "0".."N-1" in table order: what the writer must copy
// faithfully, independent of the planner's edits.
transform::Plan identityPlan(const Checkpoint& c, transform::OutputFormat format)
{
    transform::Plan plan;
    plan.options.format = format;
    plan.arena = c.arena;
    plan.root = c.root;
    for (std::uint32_t i = 0; i < plan.arena.storages.size(); ++i) {
        auto& ref = plan.arena.storages[i];
        ref.key = std::to_string(i);
        plan.storages.push_back({StorageIndex{i}, 0, c.storages[StorageIndex{i}].nbytes, ref.key, ref.location});
    }
    return plan;
}

struct Opened {
    CheckpointPtr ckpt;
    transform::Plan plan;
};

Opened openWithPlan(const std::string& path, transform::OutputFormat format)
{
    auto c = openCheckpoint(path);
    if (!c) {
        qWarning("%s", c.error().describe().c_str());
        return {};
    }
    const Checkpoint& in = **c;
    if (in.arena.storages.size() != in.storages.size()) {
        qWarning("storage table and pickle disagree");
        return {};
    }
    return {*c, identityPlan(in, format)};
}

// A sink that takes bytes in order only, as an S3 upload does: writeAt is ByteSink's refusal.
class InOrderSink final : public ByteSink {
public:
    Expected<void> append(Bytes data) override
    {
        bytes.append(reinterpret_cast<const char*>(data.data()), static_cast<qsizetype>(data.size()));
        return {};
    }
    QByteArray bytes;
};

struct PyResult {
    int code = -1;
    QString output;
};

PyResult python(const QStringList& args)
{
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral(CKPTSCOPE_PYTHON), args);
    if (!p.waitForFinished(300000)) {
        return {-1, QStringLiteral("python did not finish")};
    }
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAll()).trimmed()};
}

QString checker()
{
    return QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/write/check_written.py");
}

QString oracle()
{
    return QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/fixtures/torch_oracle.py");
}

// Every entry of a directory, hidden ones included: a failed write must leave none.
QStringList entries(const QString& dir)
{
    return QDir(dir).entryList(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot);
}

// --- an independent safetensors reader (docs/format.md §10), Qt JSON instead of the core's parser ---

struct StTensor {
    QString dtype;
    QList<qint64> shape;
    qint64 begin = 0;
    qint64 end = 0;
};

struct StFile {
    QString error;
    QMap<QString, StTensor> tensors;
    QStringList fileOrder;  // by data offset
    QMap<QString, QString> metadata;
    QByteArray data;
};

qint64 stElementSize(const QString& code)
{
    static const QMap<QString, qint64> sizes{
        {QStringLiteral("BOOL"), 1}, {QStringLiteral("U8"), 1},  {QStringLiteral("I8"), 1},
        {QStringLiteral("I16"), 2},  {QStringLiteral("U16"), 2}, {QStringLiteral("F16"), 2},
        {QStringLiteral("BF16"), 2}, {QStringLiteral("I32"), 4}, {QStringLiteral("U32"), 4},
        {QStringLiteral("F32"), 4},  {QStringLiteral("C64"), 8}, {QStringLiteral("F64"), 8},
        {QStringLiteral("I64"), 8},  {QStringLiteral("U64"), 8}};
    return sizes.value(code, 0);
}

StFile readSafetensors(const QString& path)
{
    StFile st;
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        st.error = QStringLiteral("cannot open");
        return st;
    }
    const QByteArray all = f.readAll();
    if (all.size() < 8) {
        st.error = QStringLiteral("shorter than 8 bytes");
        return st;
    }
    quint64 n = 0;
    for (int i = 7; i >= 0; --i) {
        n = (n << 8) | static_cast<quint8>(all[i]);
    }
    if (n > static_cast<quint64>(all.size()) - 8 || (8 + n) % 8 != 0) {
        st.error = QStringLiteral("header length %1 out of range or not padded to 8").arg(n);
        return st;
    }
    QJsonParseError perr{};
    const QJsonDocument doc = QJsonDocument::fromJson(all.mid(8, static_cast<qsizetype>(n)), &perr);
    if (!doc.isObject()) {
        st.error = QStringLiteral("header is not a JSON object: ") + perr.errorString();
        return st;
    }
    st.data = all.mid(static_cast<qsizetype>(8 + n));
    const QJsonObject obj = doc.object();
    QList<QPair<qint64, QString>> byOffset;
    for (auto it = obj.begin(); it != obj.end(); ++it) {
        if (it.key() == QStringLiteral("__metadata__")) {
            const QJsonObject meta = it.value().toObject();
            for (auto m = meta.begin(); m != meta.end(); ++m) {
                if (!m.value().isString()) {
                    st.error = QStringLiteral("metadata value of %1 is not a string").arg(m.key());
                    return st;
                }
                st.metadata.insert(m.key(), m.value().toString());
            }
            continue;
        }
        const QJsonObject t = it.value().toObject();
        StTensor e;
        e.dtype = t.value(QStringLiteral("dtype")).toString();
        qint64 numel = 1;
        for (const auto& d : t.value(QStringLiteral("shape")).toArray()) {
            e.shape.append(d.toInteger());
            numel *= d.toInteger();
        }
        const QJsonArray off = t.value(QStringLiteral("data_offsets")).toArray();
        e.begin = off.at(0).toInteger();
        e.end = off.at(1).toInteger();
        if (stElementSize(e.dtype) == 0 || e.end - e.begin != numel * stElementSize(e.dtype)) {
            st.error = QStringLiteral("%1: dtype %2 / size does not match its shape").arg(it.key(), e.dtype);
            return st;
        }
        st.tensors.insert(it.key(), e);
        byOffset.append({e.begin, it.key()});
    }
    std::stable_sort(byOffset.begin(), byOffset.end(), [&](const auto& a, const auto& b) {
        const auto& ta = st.tensors[a.second];
        const auto& tb = st.tensors[b.second];
        return a.first != b.first ? a.first < b.first : ta.end < tb.end;
    });
    qint64 expect = 0;
    for (const auto& [begin, name] : byOffset) {
        if (begin != expect) {
            st.error =
                QStringLiteral("%1 starts at %2, expected %3 (hole or overlap)").arg(name).arg(begin).arg(expect);
            return st;
        }
        expect = st.tensors[name].end;
        st.fileOrder.append(name);
    }
    if (expect != st.data.size()) {
        st.error = QStringLiteral("data buffer holds %1 bytes, tensors %2").arg(st.data.size()).arg(expect);
    }
    return st;
}

// The oracle the fixture generator wrote next to each fixture (`<stem>.oracle.json`).
QJsonObject oracleOf(const QString& fixture)
{
    QFile f(QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/") + fixture.left(fixture.lastIndexOf(QLatin1Char('.'))) +
            QStringLiteral(".oracle.json"));
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    return QJsonDocument::fromJson(f.readAll()).object();
}

}  // namespace

class TestWrite : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase();
    void torchRoundTrip_data();
    void torchRoundTrip();
    void torchOutputsLoadAsTheSource();
    void safetensorsRoundTrip_data();
    void safetensorsRoundTrip();
    void largeTensorsStreamInChunks();
    void safetensorsRefuses_data();
    void safetensorsRefuses();
    void outputSameAsInputRefused();
    void fullDiskLeavesNothing_data();
    void fullDiskLeavesNothing();
    void fileSizeLimitLeavesNothing();
    void cancelLeavesNothing();
    void failureKeepsExistingTarget();
    void progressIsThrottledAndComplete();
    void modeFollowsUmask();
    void missingDirectory();
    void singleCardPresetLoads();
    void streamedIsTheFileByteForByte_data();
    void streamedIsTheFileByteForByte();

private:
    // torchRoundTrip writes, torchOutputsLoadAsTheSource checks them all in one Python process
    // (starting torch costs seconds; once per fixture would dominate the suite).
    QTemporaryDir outputs_;
    QStringList sourceAndOutput_;
    // written by torch in initTestCase: tensors larger than a chunk, one of them a transposed view,
    // so copies and gathers run in several chunks and a 1 MiB disk fills up
    std::string large_;
    QJsonObject largeHashes_;
};

void TestWrite::initTestCase()
{
    large_ = outputs_.filePath(QStringLiteral("large.pt")).toStdString();
    static const char* script = R"(
import hashlib, json, sys, torch
torch.manual_seed(1)
sd = {"a": torch.randn(1024, 2560), "b_t": torch.randn(2048, 1536).t(), "c": torch.arange(1000)[::3],
      "d": torch.randn(3, 4, 5).permute(2, 0, 1)[1:]}
torch.save(sd, sys.argv[1])
print(json.dumps({k: hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest() for k, v in sd.items()}))
)";
    const PyResult r = python({QStringLiteral("-c"), QString::fromLatin1(script), q(large_)});
    QVERIFY2(r.code == 0, qPrintable(r.output));
    largeHashes_ = QJsonDocument::fromJson(r.output.toUtf8()).object();
    QCOMPARE(largeHashes_.size(), 4);
}

void TestWrite::torchRoundTrip_data()
{
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("outName");
    const char* names[] = {
        "plain_sd.pt",  "ddp_sd.pt",       "ddp_sd_cuda0.pt",   "train_ckpt.pt",      "multi_gpu.pt",
        "mps.pt",       "views.pt",        "tied_clean.pt",     "dtypes.pt",          "quantized.pt",
        "exotic.pt",    "empty_scalar.pt", "big40k.pt",         "lightning.pt",       "proto4.pt",
        "proto5.pt",    "whole_model.pt",  "whole_model_dp.pt", "numpy_namespace.pt", "sets_bytes_complex.pt",
        "nonfinite.pt", "archive_name.pt", "deflated.pt",       "legacy_sd.pt",       "model.safetensors"};
    for (const char* n : names) {
        QTest::newRow(n) << QString::fromLatin1(n) << QStringLiteral("out.pt");
    }
    QTest::newRow("folder from an odd name") << QStringLiteral("ddp_sd.pt") << QStringLiteral("my model.v2.pth");
    QTest::newRow("hidden name: folder archive") << QStringLiteral("plain_sd.pt") << QStringLiteral(".pt");
}

void TestWrite::torchRoundTrip()
{
    QFETCH(QString, fixture);
    QFETCH(QString, outName);
    const std::string src = fixturePath(fixture);
    auto [in, plan] = openWithPlan(src, transform::OutputFormat::Torch);
    QVERIFY(in);
    for (const auto& ref : plan.arena.storages) {
        if (ref.legacyView.valid()) {
            QSKIP("legacy storage views need the planner's offset translation");
        }
    }
    const QString dir = outputs_.filePath(QString::number(sourceAndOutput_.size()));
    QVERIFY(QDir().mkpath(dir));
    const QString out = dir + QLatin1Char('/') + outName;
    auto r = write::writeCheckpoint(*in, plan, out.toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
    QCOMPARE(entries(dir), QStringList{outName});
    QCOMPARE(static_cast<qint64>(r->bytes), QFileInfo(out).size());
    sourceAndOutput_ << q(src) << out;

    QProcess unzip;
    unzip.start(QStringLiteral("unzip"), {QStringLiteral("-tq"), out});
    QVERIFY(unzip.waitForFinished(60000));
    QVERIFY2(unzip.exitCode() == 0, unzip.readAll().constData());
}

void TestWrite::torchOutputsLoadAsTheSource()
{
    QVERIFY(!sourceAndOutput_.isEmpty());
    const PyResult check = python(QStringList{checker(), QStringLiteral("torch")} + sourceAndOutput_);
    QVERIFY2(check.code == 0, qPrintable(check.output));
    QVERIFY(check.output.count(QStringLiteral(": ok ")) == sourceAndOutput_.size() / 2);
}

void TestWrite::safetensorsRoundTrip_data()
{
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QStringList>("metadataKeys");  // beyond aliases
    QTest::addColumn<QStringList>("noteWords");
    const QStringList fmt{QStringLiteral("format")};
    QTest::newRow("plain_sd") << QStringLiteral("plain_sd.pt") << fmt << QStringList{};
    QTest::newRow("ddp_sd") << QStringLiteral("ddp_sd.pt") << fmt << QStringList{};
    QTest::newRow("views") << QStringLiteral("views.pt") << QStringList{QStringLiteral("tied_b")}
                           << QStringList{QStringLiteral("'tied_b'"),
                                          QStringLiteral("'transposed' is a non-contiguous"),
                                          QStringLiteral("'strided' is a non-contiguous")};
    QTest::newRow("tied_clean") << QStringLiteral("tied_clean.pt") << QStringList{QStringLiteral("head.weight")}
                                << QStringList{QStringLiteral("stored once as 'embed.weight'")};
    QTest::newRow("lightning") << QStringLiteral("lightning.pt")
                               << QStringList{QStringLiteral("epoch"), QStringLiteral("global_step")}
                               << QStringList{QStringLiteral("non-tensor")};
    QTest::newRow("train_ckpt") << QStringLiteral("train_ckpt.pt") << QStringList{QStringLiteral("epoch")}
                                << QStringList{};
    QTest::newRow("empty_scalar") << QStringLiteral("empty_scalar.pt") << fmt << QStringList{};
    QTest::newRow("nonfinite") << QStringLiteral("nonfinite.pt") << fmt << QStringList{};
    QTest::newRow("deflated (inflated through memory)") << QStringLiteral("deflated.pt") << fmt << QStringList{};
    QTest::newRow("legacy_sd") << QStringLiteral("legacy_sd.pt") << fmt << QStringList{};
    QTest::newRow("safetensors in") << QStringLiteral("model.safetensors") << fmt << QStringList{};
}

void TestWrite::safetensorsRoundTrip()
{
    QFETCH(QString, fixture);
    QFETCH(QStringList, metadataKeys);
    QFETCH(QStringList, noteWords);
    const std::string src = fixturePath(fixture);
    auto [in, plan] = openWithPlan(src, transform::OutputFormat::Safetensors);
    QVERIFY(in);
    QTemporaryDir dir;
    const QString out = dir.filePath(QStringLiteral("out.safetensors"));
    auto r = write::writeCheckpoint(*in, plan, out.toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
    QCOMPARE(entries(dir.path()), QStringList{QStringLiteral("out.safetensors")});
    QCOMPARE(static_cast<qint64>(r->bytes), QFileInfo(out).size());

    const StFile st = readSafetensors(out);
    QVERIFY2(st.error.isEmpty(), qPrintable(st.error));
    QCOMPARE(st.metadata.value(QStringLiteral("format")), QStringLiteral("pt"));
    for (const auto& key : metadataKeys) {
        QVERIFY2(st.metadata.contains(key), qPrintable(key));
    }
    std::string notes;
    for (const auto& n : r->notes) {
        notes += n + "\n";
    }
    for (const auto& w : noteWords) {
        QVERIFY2(q(notes).contains(w), qPrintable(q(notes)));
    }
    // the reference writer's order: larger elements first, names ascending within a dtype
    for (qsizetype i = 1; i < st.fileOrder.size(); ++i) {
        const StTensor& a = st.tensors[st.fileOrder[i - 1]];
        const StTensor& b = st.tensors[st.fileOrder[i]];
        QVERIFY(stElementSize(a.dtype) >= stElementSize(b.dtype));
        if (a.dtype == b.dtype) {
            QVERIFY(st.fileOrder[i - 1] < st.fileOrder[i]);
        }
    }
    // every source tensor is there (or is an alias of one that is), with the source's bytes
    const QJsonArray tensors = oracleOf(fixture).value(QStringLiteral("tensors")).toArray();
    QVERIFY(!tensors.isEmpty());
    for (const auto& v : tensors) {
        const QJsonObject t = v.toObject();
        QString name = t.value(QStringLiteral("path")).toString().replace(QLatin1Char('/'), QLatin1Char('.'));
        if (!st.tensors.contains(name)) {
            QVERIFY2(st.metadata.contains(name), qPrintable(name + QStringLiteral(" is missing")));
            name = st.metadata.value(name);
            QVERIFY2(st.tensors.contains(name), qPrintable(name));
        }
        const StTensor& e = st.tensors[name];
        QList<qint64> shape;
        for (const auto& d : t.value(QStringLiteral("shape")).toArray()) {
            shape.append(d.toInteger());
        }
        QCOMPARE(e.shape, shape);
        const QByteArray bytes = st.data.mid(e.begin, e.end - e.begin);
        QCOMPARE(QString::fromLatin1(QCryptographicHash::hash(bytes, QCryptographicHash::Sha256).toHex()),
                 t.value(QStringLiteral("sha256")).toString());
    }
    // Read back, each alias recorded in __metadata__ is a name again, of its kept tensor's storage
    // and view (safetensors' save_model convention), so no tied name is lost on the way back.
    auto back = openCheckpoint(out.toStdString());
    QVERIFY2(back.ok(), back.ok() ? "" : back.error().describe().c_str());
    QMap<QString, const TensorEntry*> byName;
    for (const auto& t : (*back)->tensors) {
        byName.insert(q(std::string(t.path)).replace(QLatin1Char('/'), QLatin1Char('.')), &t);
    }
    int aliases = 0;
    for (const auto& v : tensors) {
        const QString name =
            v.toObject().value(QStringLiteral("path")).toString().replace(QLatin1Char('/'), QLatin1Char('.'));
        QVERIFY2(byName.contains(name), qPrintable(name + QStringLiteral(" is not read back")));
        if (!st.tensors.contains(name)) {
            const TensorEntry* kept = byName.value(st.metadata.value(name));
            QVERIFY(kept != nullptr);
            QCOMPARE(byName[name]->storage, kept->storage);
            QCOMPARE(byName[name]->shape, kept->shape);
            ++aliases;
        }
    }
    QCOMPARE(static_cast<qsizetype>((*back)->tensors.size()), st.tensors.size() + aliases);
}

void TestWrite::largeTensorsStreamInChunks()
{
    auto [in, plan] = openWithPlan(large_, transform::OutputFormat::Safetensors);
    QVERIFY(in);
    QTemporaryDir dir;
    const QString st = dir.filePath(QStringLiteral("large.safetensors"));
    auto r = write::writeCheckpoint(*in, plan, st.toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
    const StFile file = readSafetensors(st);
    QVERIFY2(file.error.isEmpty(), qPrintable(file.error));
    QCOMPARE(file.tensors.size(), largeHashes_.size());
    for (auto it = largeHashes_.begin(); it != largeHashes_.end(); ++it) {
        const StTensor& e = file.tensors[it.key()];
        const QByteArray bytes = file.data.mid(e.begin, e.end - e.begin);
        QCOMPARE(QString::fromLatin1(QCryptographicHash::hash(bytes, QCryptographicHash::Sha256).toHex()),
                 it.value().toString());
    }

    plan.options.format = transform::OutputFormat::Torch;
    const QString pt = dir.filePath(QStringLiteral("large.pt"));
    r = write::writeCheckpoint(*in, plan, pt.toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
    const PyResult check = python({checker(), QStringLiteral("torch"), q(large_), pt});
    QVERIFY2(check.code == 0, qPrintable(check.output));
}

void TestWrite::safetensorsRefuses_data()
{
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("words");
    QTest::newRow("complex128") << QStringLiteral("dtypes.pt") << QStringLiteral("'complex128'");
    QTest::newRow("quantized") << QStringLiteral("quantized.pt") << QStringLiteral("quantized");
    QTest::newRow("sparse/meta") << QStringLiteral("exotic.pt") << QStringLiteral("as safetensors: it is a");
}

void TestWrite::safetensorsRefuses()
{
    QFETCH(QString, fixture);
    QFETCH(QString, words);
    auto [in, plan] = openWithPlan(fixturePath(fixture), transform::OutputFormat::Safetensors);
    QVERIFY(in);
    QTemporaryDir dir;
    auto r = write::writeCheckpoint(*in, plan, dir.filePath(QStringLiteral("x.safetensors")).toStdString());
    QVERIFY(!r.ok());
    QCOMPARE(r.error().code, ErrorCode::Unsupported);
    QVERIFY2(q(r.error().message).contains(words), r.error().message.c_str());
    QVERIFY(entries(dir.path()).isEmpty());
}

void TestWrite::outputSameAsInputRefused()
{
    QTemporaryDir dir;
    const QString input = dir.filePath(QStringLiteral("in.pt"));
    QVERIFY(QFile::copy(q(fixturePath(QStringLiteral("ddp_sd.pt"))), input));
    QFile f(input);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray before = f.readAll();
    f.close();
    QVERIFY(::link(input.toUtf8().constData(), dir.filePath(QStringLiteral("hard.pt")).toUtf8().constData()) == 0);
    QVERIFY(QFile::link(input, dir.filePath(QStringLiteral("sym.pt"))));

    auto [in, plan] = openWithPlan(input.toStdString(), transform::OutputFormat::Torch);
    QVERIFY(in);
    for (const QString& name : {QStringLiteral("in.pt"), QStringLiteral("hard.pt"), QStringLiteral("sym.pt")}) {
        auto r = write::writeCheckpoint(*in, plan, dir.filePath(name).toStdString());
        QVERIFY(!r.ok());
        QCOMPARE(r.error().code, ErrorCode::Usage);
        QVERIFY2(q(r.error().message).contains(QStringLiteral("input file itself")), r.error().message.c_str());
    }
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), before);
    QCOMPARE(entries(dir.path()).size(), 3);
}

void TestWrite::fullDiskLeavesNothing_data()
{
    QTest::addColumn<bool>("safetensors");
    QTest::newRow("torch") << false;
    QTest::newRow("safetensors") << true;
}

void TestWrite::fullDiskLeavesNothing()
{
    QFETCH(bool, safetensors);
    QTemporaryDir dir;
    const QByteArray mountPoint = dir.path().toUtf8();
    if (::mount("tmpfs", mountPoint.constData(), "tmpfs", 0, "size=1m") != 0) {
        QSKIP("cannot mount a 1 MiB tmpfs here (needs root); fileSizeLimitLeavesNothing covers the failure path");
    }
    auto [in, plan] =
        openWithPlan(large_, safetensors ? transform::OutputFormat::Safetensors : transform::OutputFormat::Torch);
    const std::string out = dir.filePath(QStringLiteral("out.pt")).toStdString();
    auto r =
        in ? write::writeCheckpoint(*in, plan, out) : Expected<write::WriteResult>(makeError(ErrorCode::Io, "open"));
    const QStringList left = entries(dir.path());
    ::umount(mountPoint.constData());
    QVERIFY(in);
    QVERIFY(!r.ok());
    QCOMPARE(r.error().code, ErrorCode::WriteFailed);
    QVERIFY2(q(r.error().message).contains(QStringLiteral("No space left on device")), r.error().message.c_str());
    QCOMPARE(q(r.error().path), q(out));
    QVERIFY2(left.isEmpty(), qPrintable(left.join(QLatin1Char(' '))));
}

void TestWrite::fileSizeLimitLeavesNothing()
{
    auto [in, plan] = openWithPlan(large_, transform::OutputFormat::Torch);
    QVERIFY(in);
    QTemporaryDir dir;
    rlimit old{};
    QVERIFY(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    auto* oldHandler = std::signal(SIGXFSZ, SIG_IGN);  // so the write fails with EFBIG instead of killing us
    rlimit small = old;
    small.rlim_cur = 256 * 1024;
    QVERIFY(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    auto r = write::writeCheckpoint(*in, plan, dir.filePath(QStringLiteral("out.pt")).toStdString());
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, oldHandler);
    QVERIFY(!r.ok());
    QCOMPARE(r.error().code, ErrorCode::WriteFailed);
    QVERIFY2(q(r.error().message).contains(QStringLiteral("File too large")), r.error().message.c_str());
    QVERIFY(entries(dir.path()).isEmpty());
}

void TestWrite::cancelLeavesNothing()
{
    auto [in, plan] = openWithPlan(large_, transform::OutputFormat::Torch);
    QVERIFY(in);
    QTemporaryDir dir;
    const std::string out = dir.filePath(QStringLiteral("out.pt")).toStdString();
    std::stop_source before;
    before.request_stop();
    auto r = write::writeCheckpoint(*in, plan, out, {}, before.get_token());
    QVERIFY(!r.ok());
    QCOMPARE(r.error().code, ErrorCode::Cancelled);
    QVERIFY(entries(dir.path()).isEmpty());

    for (auto format : {transform::OutputFormat::Torch, transform::OutputFormat::Safetensors}) {
        plan.options.format = format;
        std::stop_source midway;
        bool stoppedWhileRunning = false;
        auto stopHalfway = [&](const write::WriteProgress& p) {
            if (p.bytesDone > p.bytesTotal / 3 && p.bytesDone < p.bytesTotal && !midway.stop_requested()) {
                midway.request_stop();
                stoppedWhileRunning = true;
            }
        };
        r = write::writeCheckpoint(*in, plan, out, stopHalfway, midway.get_token());
        QVERIFY(stoppedWhileRunning);
        QVERIFY(!r.ok());
        QCOMPARE(r.error().code, ErrorCode::Cancelled);
        QVERIFY(entries(dir.path()).isEmpty());
    }
}

void TestWrite::failureKeepsExistingTarget()
{
    auto [in, plan] = openWithPlan(large_, transform::OutputFormat::Torch);
    QVERIFY(in);
    QTemporaryDir dir;
    const QString out = dir.filePath(QStringLiteral("out.pt"));
    {
        QFile f(out);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("previous contents");
    }
    std::stop_source stop;
    auto r = write::writeCheckpoint(
        *in, plan, out.toStdString(),
        [&](const write::WriteProgress& p) {
            if (p.bytesDone > 0) {
                stop.request_stop();
            }
        },
        stop.get_token());
    QVERIFY(!r.ok());
    QFile f(out);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), QByteArray("previous contents"));
    QCOMPARE(entries(dir.path()), QStringList{QStringLiteral("out.pt")});
}

void TestWrite::progressIsThrottledAndComplete()
{
    auto [in, plan] = openWithPlan(fixturePath(QStringLiteral("big40k.pt")), transform::OutputFormat::Torch);
    QVERIFY(in);
    QTemporaryDir dir;
    std::vector<write::WriteProgress> seen;
    auto r = write::writeCheckpoint(*in, plan, dir.filePath(QStringLiteral("out.pt")).toStdString(),
                                    [&](const write::WriteProgress& p) { seen.push_back(p); });
    QVERIFY(r.ok());
    QVERIFY(seen.size() >= 2);
    QVERIFY2(seen.size() <= 210, qPrintable(QString::number(seen.size())));  // 40 000 records, ~200 reports
    for (std::size_t i = 1; i < seen.size(); ++i) {
        QVERIFY(seen[i].bytesDone >= seen[i - 1].bytesDone);
        QCOMPARE(seen[i].bytesTotal, seen[0].bytesTotal);
    }
    QCOMPARE(seen.back().bytesDone, seen.back().bytesTotal);
    QVERIFY(seen.back().bytesTotal > 40000 * 16);
}

void TestWrite::modeFollowsUmask()
{
    auto [in, plan] = openWithPlan(fixturePath(QStringLiteral("plain_sd.pt")), transform::OutputFormat::Torch);
    QVERIFY(in);
    QTemporaryDir dir;
    const mode_t old = ::umask(027);
    const std::string out = dir.filePath(QStringLiteral("out.pt")).toStdString();
    auto r = write::writeCheckpoint(*in, plan, out);
    ::umask(old);
    QVERIFY(r.ok());
    struct stat st {};
    QVERIFY(::stat(out.c_str(), &st) == 0);
    QCOMPARE(st.st_mode & 0777, static_cast<mode_t>(0640));
}

void TestWrite::missingDirectory()
{
    auto [in, plan] = openWithPlan(fixturePath(QStringLiteral("plain_sd.pt")), transform::OutputFormat::Torch);
    QVERIFY(in);
    QTemporaryDir dir;
    const std::string out = dir.filePath(QStringLiteral("no/such/dir/out.pt")).toStdString();
    auto r = write::writeCheckpoint(*in, plan, out);
    QVERIFY(!r.ok());
    QCOMPARE(r.error().code, ErrorCode::WriteFailed);
    QVERIFY2(q(r.error().message).contains(QStringLiteral("No such file or directory")), r.error().message.c_str());
    QCOMPARE(q(r.error().path), q(out));
}

// The whole chain: the planner's --single-card plan of a DDP checkpoint saved on cuda:0, written,
// then loaded by torch 1.13 with weights_only=True and no map_location on this GPU-less machine.
void TestWrite::singleCardPresetLoads()
{
    const std::string src = fixturePath(QStringLiteral("ddp_sd_cuda0.pt"));
    auto c = openCheckpoint(src);
    QVERIFY(c.ok());
    auto plan = transform::makePlan(**c, transform::singleCardPreset());
    QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().describe().c_str());
    QTemporaryDir dir;
    const QString out = dir.filePath(QStringLiteral("single.pt"));
    auto r = write::writeCheckpoint(**c, *plan, out.toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
    const PyResult load = python({oracle(), QStringLiteral("weights-only-113"), out});
    QVERIFY2(load.code == 0, qPrintable(load.output));
    const PyResult same = python({oracle(), QStringLiteral("compare"), q(src), out, QStringLiteral("--strip-prefix"),
                                  QStringLiteral("module.")});
    QVERIFY2(same.code == 0, qPrintable(same.output));
}

QTEST_GUILESS_MAIN(TestWrite)
// What a stream receives (an S3 upload's parts) is the local file's bytes, every one: stretches of
// records copied in one go (big40k.pt's 40,000), CRCs carried from the input or computed as the
// bytes pass (--compact's partial storages), deflated and legacy inputs, both formats. On the old
// writer the stream was refused at the first stretch's header patch.
void TestWrite::streamedIsTheFileByteForByte_data()
{
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<bool>("safetensors");
    QTest::addColumn<bool>("compact");
    for (const char* n : {"ddp_sd.pt", "big40k.pt", "views.pt", "train_ckpt.pt", "deflated.pt", "legacy_sd.pt",
                          "dtypes.pt", "model.safetensors"}) {
        QTest::newRow(n) << QString::fromLatin1(n) << false << false;
        QTest::newRow((std::string(n) + " compact").c_str()) << QString::fromLatin1(n) << false << true;
    }
    QTest::newRow("large.pt") << QString() << false << false;
    QTest::newRow("large.pt compact") << QString() << false << true;
    QTest::newRow("large.pt to safetensors") << QString() << true << false;
    QTest::newRow("model.safetensors to safetensors") << QStringLiteral("model.safetensors") << true << false;
    QTest::newRow("ddp_sd.pt to safetensors") << QStringLiteral("ddp_sd.pt") << true << false;
}

void TestWrite::streamedIsTheFileByteForByte()
{
    QFETCH(QString, fixture);
    QFETCH(bool, safetensors);
    QFETCH(bool, compact);
    const std::string src = fixture.isEmpty() ? large_ : fixturePath(fixture);
    auto in = openCheckpoint(src);
    QVERIFY2(in.ok(), in.ok() ? "" : in.error().describe().c_str());
    transform::Options opts;
    opts.compact = compact;
    opts.format = safetensors ? transform::OutputFormat::Safetensors : transform::OutputFormat::Torch;
    if (safetensors) {
        opts.weightsOnly = true;
    }
    auto plan = transform::makePlan(**in, opts);
    QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().describe().c_str());
    QTemporaryDir dir;
    const QString out = dir.filePath(safetensors ? QStringLiteral("out.safetensors") : QStringLiteral("out.pt"));
    auto file = write::writeCheckpoint(**in, *plan, out.toStdString());
    QVERIFY2(file.ok(), file.ok() ? "" : file.error().describe().c_str());
    InOrderSink sink;
    auto streamed = write::writeCheckpointTo(**in, *plan, sink, out.toStdString());
    QVERIFY2(streamed.ok(), streamed.ok() ? "" : streamed.error().describe().c_str());
    QFile f(out);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray onDisk = f.readAll();
    QCOMPARE(static_cast<qint64>(streamed->bytes), static_cast<qint64>(sink.bytes.size()));
    QVERIFY2(
        sink.bytes == onDisk,
        qPrintable(
            QStringLiteral("%1 streamed bytes differ from the file's %2").arg(sink.bytes.size()).arg(onDisk.size())));
}

#include "tst_write.moc"
