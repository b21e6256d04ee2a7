// safetensors reading and header writing, against a Python writer that lays files out exactly as
// the reference Rust writer does (compact serde JSON, space padding to 8), and every rule of the
// reference reader's validation.
#include "archive/safetensors.h"
#include "archive_test_util.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QTest>

using namespace ckpt;
using namespace ckpt::archive;
using namespace archive_test;

namespace {

// argv: out path, JSON spec {"tensors": [[name, dtype, shape, hex]], "metadata": {...} | null}.
// Serialized as serde_json does: no spaces, non-ASCII kept, fields dtype/shape/data_offsets.
const QString kReferenceWriter = QStringLiteral(R"(
import sys, json, struct
spec = json.loads(sys.argv[2])
header = {}
if spec['metadata']:
    header['__metadata__'] = spec['metadata']
off, blobs = 0, []
for name, dt, shape, hx in spec['tensors']:
    b = bytes.fromhex(hx)
    header[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(b)]}
    off += len(b)
    blobs.append(b)
h = json.dumps(header, separators=(',', ':'), ensure_ascii=False).encode()
h += b' ' * ((8 - len(h) % 8) % 8)
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(blobs))
)");

struct Spec {
    QString name;
    QString dtype;
    std::vector<std::int64_t> shape;
    int nbytes;
};

QByteArray writeReference(const QString& path, const std::vector<Spec>& tensors, const QJsonObject& metadata)
{
    QJsonArray list;
    for (const Spec& t : tensors) {
        QJsonArray shape;
        for (auto d : t.shape) {
            shape.append(qint64(d));
        }
        QByteArray data(t.nbytes, '\0');
        for (int i = 0; i < t.nbytes; ++i) {
            data[i] = char(i * 7 + t.nbytes);
        }
        list.append(QJsonArray{t.name, t.dtype, shape, QString::fromLatin1(data.toHex())});
    }
    QJsonObject spec{{QStringLiteral("tensors"), list},
                     {QStringLiteral("metadata"), metadata.isEmpty() ? QJsonValue() : QJsonValue(metadata)}};
    const PyResult r =
        runPython(kReferenceWriter, {path, QString::fromUtf8(QJsonDocument(spec).toJson(QJsonDocument::Compact))});
    if (r.exitCode != 0) {
        qWarning("%s", r.err.constData());
        return {};
    }
    return readAll(path);
}

QByteArray fileWith(const QByteArray& header, int dataBytes, std::optional<std::uint64_t> declared = {})
{
    QByteArray out(8, '\0');
    const std::uint64_t n = declared.value_or(std::uint64_t(header.size()));
    for (int i = 0; i < 8; ++i) {
        out[i] = char((n >> (8 * i)) & 0xFF);
    }
    return out + header + QByteArray(dataBytes, 'x');
}

}  // namespace

class TestSafetensors : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void parsesReferenceFile();
    void headerMatchesReferenceWriter();
    void validationErrors_data();
    void validationErrors();
    void validEdgeCases_data();
    void validEdgeCases();
    void headerWriterErrors();
    void signature();
    void mutationsNeverEscapeTheFile();
    void dtypeTable();

private:
    QTemporaryDir dir_;
};

void TestSafetensors::parsesReferenceFile()
{
    const std::vector<Spec> specs{
        {QStringLiteral("emb.weight"), QStringLiteral("F32"), {2, 3}, 24},
        {QStringLiteral("idx"), QStringLiteral("I64"), {4}, 32},
        {QStringLiteral("half"), QStringLiteral("BF16"), {3}, 6},
        {QStringLiteral("flag"), QStringLiteral("BOOL"), {2}, 2},
        {QStringLiteral("empty"), QStringLiteral("F32"), {0, 4}, 0},
        {QStringLiteral("scalar"), QStringLiteral("F16"), {}, 2},
        {QStringLiteral("fp8"), QStringLiteral("F8_E4M3"), {5}, 5},
        {QStringLiteral("sub"), QStringLiteral("F6_E2M3"), {4}, 3},  // no torch dtype: kept as a code
        {QStringLiteral("gewicht.ü"), QStringLiteral("U8"), {1}, 1},
    };
    const QJsonObject meta{{QStringLiteral("format"), QStringLiteral("pt")},
                           {QStringLiteral("note"), QStringLiteral("grüße")}};
    const QByteArray file = writeReference(dir_.filePath(QStringLiteral("ref.safetensors")), specs, meta);
    QVERIFY(!file.isEmpty());
    QVERIFY(looksLikeSafetensors(bytesOf(file)));
    auto st = parseSafetensors(bytesOf(file));
    QVERIFY2(st.ok(), st.ok() ? "" : st.error().describe().c_str());
    QCOMPARE(st->headerSize % 8, 0U);
    QCOMPARE(st->dataStart, st->headerSize + 8);
    QCOMPARE(st->tensors.size(), specs.size());
    std::uint64_t offset = 0;
    for (std::size_t i = 0; i < specs.size(); ++i) {
        const SafetensorsEntry& e = st->tensors[i];
        QCOMPARE(QString::fromStdString(e.name), specs[i].name);
        QCOMPARE(QString::fromStdString(e.dtypeCode), specs[i].dtype);
        QCOMPARE(e.shape, specs[i].shape);
        QCOMPARE(e.begin, offset);
        QCOMPARE(e.end, offset + std::uint64_t(specs[i].nbytes));
        offset = e.end;
    }
    QCOMPARE(st->tensors[0].dtype, DType::Float32);
    QCOMPARE(st->tensors[2].dtype, DType::BFloat16);
    QCOMPARE(st->tensors[3].dtype, DType::Bool);
    QCOMPARE(st->tensors[6].dtype, DType::Float8_e4m3fn);
    QCOMPARE(st->tensors[7].dtype, DType::Unknown);
    const std::vector<std::pair<std::string, std::string>> expectedMeta{{"format", "pt"}, {"note", "grüße"}};
    QCOMPARE(st->metadata, expectedMeta);
}

void TestSafetensors::headerMatchesReferenceWriter()
{
    const std::vector<Spec> specs{
        {QStringLiteral("a.weight"), QStringLiteral("F64"), {2, 2}, 32},
        {QStringLiteral("b"), QStringLiteral("I32"), {3}, 12},
        {QStringLiteral("c"), QStringLiteral("F16"), {}, 2},
        {QStringLiteral("z.ü\"q"), QStringLiteral("U8"), {0}, 0},
    };
    for (bool withMeta : {false, true}) {
        const QJsonObject meta =
            withMeta ? QJsonObject{{QStringLiteral("format"), QStringLiteral("pt")}} : QJsonObject{};
        const QByteArray file = writeReference(dir_.filePath(QStringLiteral("hdr.safetensors")), specs, meta);
        QVERIFY(!file.isEmpty());
        auto st = parseSafetensors(bytesOf(file));
        QVERIFY(st.ok());
        std::vector<SafetensorsOut> out;
        for (const auto& e : st->tensors) {
            out.push_back({e.name, e.dtype, e.shape, e.end - e.begin});
        }
        auto header = safetensorsHeader(out, st->metadata);
        QVERIFY2(header.ok(), header.ok() ? "" : header.error().describe().c_str());
        QCOMPARE(QByteArray::fromStdString(*header), file.left(qsizetype(st->dataStart)));
    }
}

void TestSafetensors::validationErrors_data()
{
    QTest::addColumn<QByteArray>("file");
    QTest::addColumn<int>("code");
    auto row = [](const char* name, const QByteArray& file, ErrorCode code) {
        QTest::newRow(name) << file << int(code);
    };
    const QByteArray u8a = R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]})";
    row("hole", fileWith("{" + u8a + R"(,"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})", 5),
        ErrorCode::Corrupt);
    row("overlap", fileWith("{" + u8a + R"(,"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", 3),
        ErrorCode::Corrupt);
    row("does not start at 0", fileWith(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", 3),
        ErrorCode::Corrupt);
    row("end before begin", fileWith(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[2,0]}})", 2),
        ErrorCode::Corrupt);
    row("wrong size", fileWith(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), ErrorCode::Corrupt);
    row("trailing bytes", fileWith("{" + u8a + "}", 3), ErrorCode::Corrupt);
    row("buffer truncated", fileWith("{" + u8a + "}", 1), ErrorCode::Truncated);
    row("header too large", fileWith("{}", 0, 100'000'001), ErrorCode::Limit);
    row("header past the end", fileWith("{}", 0, 3), ErrorCode::Truncated);
    row("shorter than 8 bytes", QByteArray("\x02\0\0", 3), ErrorCode::Truncated);
    row("non-string metadata", fileWith(R"({"__metadata__":{"a":1}})", 0), ErrorCode::Corrupt);
    row("metadata not an object", fileWith(R"({"__metadata__":["a"]})", 0), ErrorCode::Corrupt);
    row("not JSON", fileWith("{nope", 0), ErrorCode::Corrupt);
    row("not an object", fileWith("[1]", 0), ErrorCode::Corrupt);
    row("garbage after object", fileWith("{}x", 0), ErrorCode::Corrupt);
    row("duplicate keys", fileWith("{" + u8a + "," + u8a + "}", 2), ErrorCode::Corrupt);
    row("entry not an object", fileWith(R"({"a":5})", 0), ErrorCode::Corrupt);
    row("dtype not a string", fileWith(R"({"a":{"dtype":4,"shape":[],"data_offsets":[0,1]}})", 1), ErrorCode::Corrupt);
    row("negative shape", fileWith(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", 0), ErrorCode::Corrupt);
    row("fractional shape", fileWith(R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}})", 0),
        ErrorCode::Corrupt);
    row("three offsets", fileWith(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 1), ErrorCode::Corrupt);
    row("negative offset", fileWith(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[-1,0]}})", 0),
        ErrorCode::Corrupt);
    row("missing offsets", fileWith(R"({"a":{"dtype":"U8","shape":[1]}})", 1), ErrorCode::Corrupt);
    row("unknown dtype", fileWith(R"({"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}})", 1),
        ErrorCode::Unsupported);
    row("sub-byte misaligned", fileWith(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", 1),
        ErrorCode::Corrupt);
    row("shape overflow",
        fileWith(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", 0),
        ErrorCode::Corrupt);
    row("size overflow", fileWith(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0),
        ErrorCode::Corrupt);
}

void TestSafetensors::validationErrors()
{
    QFETCH(QByteArray, file);
    QFETCH(int, code);
    auto st = parseSafetensors(bytesOf(file));
    QVERIFY(!st.ok());
    QVERIFY2(int(st.error().code) == code, st.error().describe().c_str());
    QVERIFY(!st.error().message.empty());
}

void TestSafetensors::validEdgeCases_data()
{
    QTest::addColumn<QByteArray>("file");
    QTest::addColumn<int>("tensors");
    QTest::newRow("empty header") << fileWith("{}", 0) << 0;
    QTest::newRow("padded header") << fileWith("{}      ", 0) << 0;
    QTest::newRow("null metadata") << fileWith(R"({"__metadata__":null})", 0) << 0;
    QTest::newRow("empty tensor") << fileWith(R"({"a":{"dtype":"F32","shape":[3,0],"data_offsets":[0,0]}})", 0) << 1;
    QTest::newRow("scalar") << fileWith(R"({"a":{"dtype":"I16","shape":[],"data_offsets":[0,2]}})", 2) << 1;
    QTest::newRow("F4 pairs") << fileWith(R"({"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}})", 2) << 1;
    QTest::newRow("header order differs from offsets")
        << fileWith(R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},)"
                    R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})",
                    3)
        << 2;
}

void TestSafetensors::validEdgeCases()
{
    QFETCH(QByteArray, file);
    QFETCH(int, tensors);
    auto st = parseSafetensors(bytesOf(file));
    QVERIFY2(st.ok(), st.ok() ? "" : st.error().describe().c_str());
    QCOMPARE(int(st->tensors.size()), tensors);
    if (tensors == 2) {
        QCOMPARE(st->tensors[0].name, std::string("b"));  // header order, not offset order
    }
}

void TestSafetensors::headerWriterErrors()
{
    QCOMPARE(safetensorsHeader({{"a", DType::Complex128, {1}, 16}}, {}).error().code, ErrorCode::Unsupported);
    QCOMPARE(safetensorsHeader({{"a", DType::QInt8, {1}, 1}}, {}).error().code, ErrorCode::Unsupported);
    QCOMPARE(safetensorsHeader({{"a", DType::Float32, {2}, 7}}, {}).error().code, ErrorCode::Usage);
    QCOMPARE(safetensorsHeader({{"a", DType::Float32, {-2}, 8}}, {}).error().code, ErrorCode::Usage);
    QCOMPARE(safetensorsHeader({{"a", DType::UInt8, {1}, 1}, {"a", DType::UInt8, {1}, 1}}, {}).error().code,
             ErrorCode::Usage);
    QCOMPARE(safetensorsHeader({{"__metadata__", DType::UInt8, {1}, 1}}, {}).error().code, ErrorCode::Usage);
    QCOMPARE(safetensorsHeader({{"bad\xff", DType::UInt8, {1}, 1}}, {}).error().code, ErrorCode::Usage);

    // A written header plus its data buffer parses back to the same entries.
    const std::vector<SafetensorsOut> out{{"x", DType::Float32, {2, 2}, 16}, {"y", DType::Int64, {}, 8}};
    auto header = safetensorsHeader(out, {{"k", "v"}});
    QVERIFY(header.ok());
    QCOMPARE(header->size() % 8, 0U);
    const QByteArray file = QByteArray::fromStdString(*header) + QByteArray(24, 'd');
    auto st = parseSafetensors(bytesOf(file));
    QVERIFY2(st.ok(), st.ok() ? "" : st.error().describe().c_str());
    QCOMPARE(st->tensors.size(), 2U);
    QCOMPARE(st->tensors[1].begin, 16U);
    QCOMPARE(st->tensors[1].dtype, DType::Int64);
    QCOMPARE(st->metadata.size(), 1U);
}

void TestSafetensors::signature()
{
    QVERIFY(looksLikeSafetensors(bytesOf(fileWith("{}", 0))));
    QVERIFY(!looksLikeSafetensors(bytesOf(QByteArray("PK\x03\x04\0\0\0\0\0\0\0\0", 12))));
    QVERIFY(!looksLikeSafetensors(bytesOf(fileWith("{}", 0, 100))));
    QVERIFY(!looksLikeSafetensors(bytesOf(fileWith("[]", 0))));
    QVERIFY(!looksLikeSafetensors(bytesOf(QByteArray("\x02\0\0\0", 4))));
}

void TestSafetensors::mutationsNeverEscapeTheFile()
{
    const QByteArray good = fileWith(R"({"__metadata__":{"a":"b"},"w":{"dtype":"F32","shape":[2,2],)"
                                     R"("data_offsets":[0,16]},"v":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}})",
                                     19);
    QVERIFY(parseSafetensors(bytesOf(good)).ok());
    QRandomGenerator rng(7);
    for (int i = 0; i < 20000; ++i) {
        QByteArray bad = good;
        const int edits = 1 + int(rng.bounded(4));
        for (int k = 0; k < edits; ++k) {
            bad[qsizetype(rng.bounded(quint32(bad.size())))] = char(rng.bounded(256));
        }
        if (rng.bounded(4) == 0) {
            bad.truncate(qsizetype(rng.bounded(quint32(bad.size()))));
        }
        auto st = parseSafetensors(bytesOf(bad));
        if (st) {
            for (const auto& t : st->tensors) {
                QVERIFY(t.begin <= t.end);
                QVERIFY(st->dataStart + t.end <= std::uint64_t(bad.size()));
            }
        }
    }
}

// util/dtype's one safetensors table serves the reader (sizes), the writer (order) and the names.
void TestSafetensors::dtypeTable()
{
    const std::vector<std::string_view> order{"BOOL",    "F4",      "F6_E2M3", "F6_E3M2",     "U8",          "I8",
                                              "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",
                                              "U16",     "F16",     "BF16",    "I32",         "U32",         "F32",
                                              "C64",     "F64",     "I64",     "U64"};
    std::size_t named = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
        const auto bits = safetensorsBits(order[i]);
        QVERIFY2(bits, order[i].data());
        const auto t = dtypeFromSafetensors(order[i]);
        if (!t) {
            QVERIFY2(*bits < 8, order[i].data());  // only the sub-byte floats have no torch dtype
            continue;
        }
        ++named;
        QCOMPARE(safetensorsName(*t), order[i]);
        QCOMPARE(*bits, std::uint64_t{elementSize(*t)} * 8);
        QCOMPARE(safetensorsAlignmentRank(*t), std::optional<std::size_t>(i));
    }
    QCOMPARE(named, std::size_t{19});
    QVERIFY(!safetensorsBits("F128"));
    QVERIFY(safetensorsName(DType::Complex128).empty());
    QVERIFY(!safetensorsAlignmentRank(DType::Complex128));
    QVERIFY(!dtypeFromSafetensors(""));
}

QTEST_GUILESS_MAIN(TestSafetensors)
#include "tst_safetensors.moc"
