// Value scans: NaN/Inf counts for every floating dtype (raw bits, strided views) and per-tensor
// statistics, checked on hand-made bytes and against PyTorch's own isnan/isinf/min/max/mean/std.
#include "diagnose/diagnose.h"
#include "diagnose/values.h"
#include "oracle.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

using namespace ckpt;
using namespace ckpt::diagnose;

namespace {

template <class T> std::vector<std::byte> bytesOf(const std::vector<T>& v)
{
    std::vector<std::byte> out(v.size() * sizeof(T));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
}

std::vector<std::byte> raw(std::initializer_list<int> b)
{
    std::vector<std::byte> out;
    for (int x : b) {
        out.push_back(static_cast<std::byte>(x));
    }
    return out;
}

bool near(double a, double b)
{
    return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b));
}

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

class TestValues : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void countsPerDtype_data()
    {
        QTest::addColumn<int>("dtype");
        QTest::addColumn<QByteArray>("data");
        QTest::addColumn<int>("nan");
        QTest::addColumn<int>("inf");
        QTest::addColumn<int>("negInf");
        const auto qb = [](const std::vector<std::byte>& v) {
            return QByteArray(reinterpret_cast<const char*>(v.data()), qsizetype(v.size()));
        };
        QTest::newRow("float32") << int(DType::Float32)
                                 << qb(bytesOf<float>({1.f, kNan, -kInf, kInf, kInf, -0.f, 3e38f, -kNan})) << 2 << 3
                                 << 1;
        QTest::newRow("float64") << int(DType::Float64)
                                 << qb(bytesOf<double>({1.0, double(kNan), -double(kInf), 1e308})) << 1 << 1 << 1;
        // float16: 0x7c00 +Inf, 0xfc00 -Inf, 0x7e00 NaN, 0x7bff max finite
        QTest::newRow("float16") << int(DType::Float16)
                                 << qb(bytesOf<std::uint16_t>({0x7c00, 0xfc00, 0x7e00, 0x7bff, 0x3c00, 0xfe01})) << 2
                                 << 2 << 1;
        // bfloat16: 0x7f80 +Inf, 0xff80 -Inf, 0x7fc0 NaN, 0x7f7f max finite
        QTest::newRow("bfloat16") << int(DType::BFloat16)
                                  << qb(bytesOf<std::uint16_t>({0x7f80, 0xff80, 0x7fc0, 0x7f7f, 0x3f80})) << 1 << 2
                                  << 1;
        // e5m2: 0x7c +Inf, 0xfc -Inf, 0x7d..0x7f NaN
        QTest::newRow("float8_e5m2") << int(DType::Float8_e5m2) << qb(raw({0x7c, 0xfc, 0x7d, 0xff, 0x7b, 0x00})) << 2
                                     << 2 << 1;
        // e4m3fn: no Inf; only S.1111.111 is NaN (0x7e = 448 is finite)
        QTest::newRow("float8_e4m3fn") << int(DType::Float8_e4m3fn) << qb(raw({0x7f, 0xff, 0x7e, 0x78, 0x00})) << 2 << 0
                                       << 0;
        // fnuz: 0x80 is the one NaN, 0x7f and 0xff are finite
        QTest::newRow("float8_e4m3fnuz") << int(DType::Float8_e4m3fnuz) << qb(raw({0x80, 0x7f, 0xff, 0x00})) << 1 << 0
                                         << 0;
        QTest::newRow("float8_e5m2fnuz") << int(DType::Float8_e5m2fnuz) << qb(raw({0x80, 0x80, 0x7c, 0xfc})) << 2 << 0
                                         << 0;
        QTest::newRow("float8_e8m0fnu") << int(DType::Float8_e8m0fnu) << qb(raw({0xff, 0xfe, 0x00, 0x7f})) << 1 << 0
                                        << 0;
        // complex64: (nan, 1) nan; (inf, nan) both; (1, -inf) inf; (1, 2) finite
        QTest::newRow("complex64") << int(DType::Complex64)
                                   << qb(bytesOf<float>({kNan, 1.f, kInf, kNan, 1.f, -kInf, 1.f, 2.f})) << 2 << 2 << 0;
        QTest::newRow("complex32") << int(DType::Complex32)
                                   << qb(bytesOf<std::uint16_t>({0x7e00, 0x3c00, 0x3c00, 0x3c00})) << 1 << 0 << 0;
        QTest::newRow("int32 never") << int(DType::Int32) << qb(bytesOf<std::int32_t>({0x7f800000, -1})) << 0 << 0 << 0;
    }

    void countsPerDtype()
    {
        QFETCH(int, dtype);
        QFETCH(QByteArray, data);
        QFETCH(int, nan);
        QFETCH(int, inf);
        QFETCH(int, negInf);
        const Bytes b(reinterpret_cast<const std::byte*>(data.constData()), std::size_t(data.size()));
        const auto r = countNonFinite(static_cast<DType>(dtype), b);
        QCOMPARE(int(r.nan), nan);
        QCOMPARE(int(r.inf), inf);
        QCOMPARE(int(r.negInf), negInf);
    }

    // The fast pass works in blocks: a NaN far into a large buffer is still found.
    void largeBuffer()
    {
        std::vector<float> v(3'000'017, 0.5f);
        v[2'999'999] = kNan;
        v[1'048'576] = -kInf;
        const auto b = bytesOf(v);
        const auto r = countNonFinite(DType::Float32, b);
        QCOMPARE(r.nan, 1U);
        QCOMPARE(r.negInf, 1U);
    }

    void stridedViews()
    {
        // Storage of 10 floats; NaN at even positions from 2. The view [2:8:2] sees 3 NaNs, the
        // view [3:9:2] none, a transposed 2x2 view over [0..4) one Inf.
        std::vector<float> v{kInf, 1, kNan, 3, kNan, 5, kNan, 7, 8, 9};
        const auto b = bytesOf(v);
        TensorView even{DType::Float32, {3}, {2}, 2, false};
        TensorView odd{DType::Float32, {3}, {2}, 3, false};
        TensorView t{DType::Float32, {2, 2}, {1, 2}, 0, false};
        QCOMPARE(countNonFinite(even, b)->nan, 3U);
        QCOMPARE(countNonFinite(odd, b)->total(), 0U);
        QCOMPARE(countNonFinite(t, b)->inf, 1U);
        QCOMPARE(countNonFinite(t, b)->nan, 1U);
        TensorView past{DType::Float32, {4}, {3}, 0, false};  // reaches element 9: fine
        QVERIFY(countNonFinite(past, b));
        TensorView beyond{DType::Float32, {4}, {3}, 1, false};  // reaches element 10
        QVERIFY(!countNonFinite(beyond, b));
        auto stats = viewStats(odd, b);
        QVERIFY(stats);
        QCOMPARE(stats->preview, std::string("[3, 5, 7]"));
        QCOMPARE(stats->mean, 5.0);

        // Counts and the histogram visit dimensions in storage order, which must neither lose nor
        // add elements: a permuted view over [0..8) sees the Inf and three NaNs, and a broadcast
        // dimension counts every repeat, as torch.isnan(t.expand(...)).sum() does.
        TensorView permuted{DType::Float32, {2, 2, 2}, {1, 4, 2}, 0, false};
        QCOMPARE(countNonFinite(permuted, b)->inf, 1U);
        QCOMPARE(countNonFinite(permuted, b)->nan, 3U);
        TensorView rowsRepeated{DType::Float32, {4, 3}, {0, 2}, 2, false};
        QCOMPARE(countNonFinite(rowsRepeated, b)->nan, 12U);
        TensorView columnsRepeated{DType::Float32, {3, 4}, {2, 0}, 2, false};
        QCOMPARE(countNonFinite(columnsRepeated, b)->nan, 12U);
        const auto w = bytesOf<float>({0, 1, 2, 3, 4, 5});
        StatsOptions three;
        three.bins = 3;
        auto st = viewStats(TensorView{DType::Float32, {3, 2}, {1, 3}, 0, false}, w, three);
        QVERIFY(st);
        QCOMPARE(st->histogram, (std::vector<std::uint64_t>{2, 2, 2}));
        QCOMPARE(st->preview, std::string("[0, 3, 1, 4, 2, 5]"));  // still C order
    }

    void statistics()
    {
        const auto b = bytesOf<float>({1, 2, 3, 4, kNan, -kInf});
        TensorView v{DType::Float32, {6}, {1}, 0, false};
        StatsOptions o;
        o.bins = 4;
        auto s = viewStats(v, b, o);
        QVERIFY(s);
        QCOMPARE(s->finite, 4U);
        QCOMPARE(s->nan, 1U);
        QCOMPARE(s->inf, 1U);
        QCOMPARE(s->negInf, 1U);
        QCOMPARE(s->min, 1.0);
        QCOMPARE(s->max, 4.0);
        QCOMPARE(s->mean, 2.5);
        QVERIFY(near(s->std, std::sqrt(1.25)));
        QCOMPARE(s->histogram, (std::vector<std::uint64_t>{1, 1, 1, 1}));
        QCOMPARE(s->preview, std::string("[1, 2, 3, 4, nan, -inf]"));

        const auto ints = bytesOf<std::int64_t>({std::int64_t{1} << 62, -1, 0});
        auto si = viewStats(TensorView{DType::Int64, {3}, {1}, 0, false}, ints);
        QVERIFY(si);
        QCOMPARE(si->preview, std::string("[4611686018427387904, -1, 0]"));
        const auto bools = raw({1, 0, 1});
        QCOMPARE(viewStats(TensorView{DType::Bool, {3}, {1}, 0, false}, bools)->preview,
                 std::string("[True, False, True]"));
        const auto cx = bytesOf<float>({3, -4});
        auto sc = viewStats(TensorView{DType::Complex64, {1}, {1}, 0, false}, cx);
        QCOMPARE(sc->preview, std::string("[3-4j]"));
        QCOMPARE(sc->max, 5.0);
        // Big-endian archives: the same float32 1.0 with its bytes reversed.
        const auto be = raw({0x3f, 0x80, 0x00, 0x00});
        QCOMPARE(viewStats(TensorView{DType::Float32, {1}, {1}, 0, true}, be)->max, 1.0);
        // Preview is cut at previewCount.
        std::vector<float> many(100, 1.f);
        StatsOptions few;
        few.previewCount = 2;
        QCOMPARE(viewStats(TensorView{DType::Float32, {100}, {1}, 0, false}, bytesOf(many), few)->preview,
                 std::string("[1, 1, ...]"));
    }

    // Counts and statistics against torch.isnan/isinf/isneginf and finite min/max/mean/std.
    void againstTorch_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("nonfinite") << QStringLiteral("nonfinite.pt");
        QTest::newRow("dtypes") << QStringLiteral("dtypes.pt");
        QTest::newRow("views") << QStringLiteral("views.pt");
        QTest::newRow("plain") << QStringLiteral("plain_sd.pt");
    }

    void againstTorch()
    {
        QFETCH(QString, file);
        const QString script =
            QStringLiteral("import sys, json, torch\n"
                           "sd = torch.load(sys.argv[1], map_location='cpu')\n"
                           "out = {}\n"
                           "for k, t in sd.items():\n"
                           "    if not isinstance(t, torch.Tensor) or t.is_quantized or t.is_sparse: continue\n"
                           "    r = {'nan': 0, 'inf': 0, 'neginf': 0}\n"
                           "    if t.is_floating_point() or t.is_complex():\n"
                           "        r['nan'] = int(torch.isnan(t).sum()); r['inf'] = int(torch.isinf(t).sum())\n"
                           "        r['neginf'] = 0 if t.is_complex() else int(torch.isneginf(t).sum())\n"
                           "    v = t.abs().double() if t.is_complex() else t.double()\n"
                           "    fin = v[torch.isfinite(v)]\n"
                           "    r['finite'] = fin.numel()\n"
                           "    if fin.numel():\n"
                           "        r.update(min=fin.min().item(), max=fin.max().item(), mean=fin.mean().item(),\n"
                           "                 std=fin.std(unbiased=False).item() if fin.numel() > 1 else 0.0)\n"
                           "    out[k] = r\n"
                           "print(json.dumps(out))\n");
        const auto path = diagtest::fixture(file.toStdString().c_str());
        const auto json = diagtest::python(script, {QString::fromStdString(path)});
        const auto oracle = QJsonDocument::fromJson(json.toUtf8()).object();
        QVERIFY2(!oracle.isEmpty(), qPrintable(json));
        auto c = openCheckpoint(path);
        QVERIFY(c);
        int compared = 0;
        std::vector<std::byte> scratch;
        for (std::uint32_t n = 0; n < (*c)->tensors.size(); ++n) {
            const TensorIndex i{n};
            const auto& t = (*c)->tensors[i];
            const auto o = oracle.value(QString::fromStdString(t.path)).toObject();
            if (o.isEmpty()) {
                continue;
            }
            const auto nf = tensorNonFinite(**c, i, scratch);
            QVERIFY2(nf, t.path.c_str());
            QCOMPARE(qint64(nf->nan), qint64(o.value(QStringLiteral("nan")).toInt()));
            QCOMPARE(qint64(nf->inf), qint64(o.value(QStringLiteral("inf")).toInt()));
            QCOMPARE(qint64(nf->negInf), qint64(o.value(QStringLiteral("neginf")).toInt()));
            const auto s = tensorStats(**c, i);
            QVERIFY2(s, t.path.c_str());
            QCOMPARE(qint64(s->finite), qint64(o.value(QStringLiteral("finite")).toInt()));
            if (s->finite > 0) {
                for (const auto& [name, got] : {std::pair{"min", s->min}, std::pair{"max", s->max},
                                                std::pair{"mean", s->mean}, std::pair{"std", s->std}}) {
                    const double want = o.value(QString::fromLatin1(name)).toDouble();
                    QVERIFY2(std::fabs(got - want) <= 1e-6 * std::max(1.0, std::fabs(want)),
                             qPrintable(QString::fromStdString(t.path) + QLatin1Char(' ') + QString::fromLatin1(name) +
                                        QStringLiteral(": ") + QString::number(got) + QStringLiteral(" vs ") +
                                        QString::number(want)));
                }
            }
            ++compared;
        }
        QVERIFY(compared >= 2);
    }

    // A per-tensor affine quantized tensor's statistics are over its values, torch's dequantize(),
    // not its integer codes; a per-channel one has none rather than the codes' (quantized.pt).
    void quantizedStatisticsAreDequantized()
    {
        const auto path = diagtest::fixture("quantized.pt");
        const auto json = diagtest::python(
            QStringLiteral("import sys, json, torch\n"
                           "t = torch.load(sys.argv[1])['per_tensor'].dequantize().double()\n"
                           "print(json.dumps({'min': t.min().item(), 'max': t.max().item(), 'mean': t.mean().item(),\n"
                           "                  'std': t.std(unbiased=False).item()}))\n"),
            {QString::fromStdString(path)});
        const auto want = QJsonDocument::fromJson(json.toUtf8()).object();
        QVERIFY2(!want.isEmpty(), qPrintable(json));
        auto c = openCheckpoint(path);
        QVERIFY(c);
        const auto s = tensorStats(**c, (*c)->nodes[(*c)->find("per_tensor")].tensor);
        QVERIFY(s);
        for (const auto& [name, got] : {std::pair{"min", s->min}, std::pair{"max", s->max}, std::pair{"mean", s->mean},
                                        std::pair{"std", s->std}}) {
            const double w = want.value(QString::fromLatin1(name)).toDouble();
            QVERIFY2(std::fabs(got - w) <= 1e-6 * std::max(1.0, std::fabs(w)),  // torch dequantizes in float32
                     qPrintable(QString::fromLatin1(name) + QStringLiteral(": ") + QString::number(got) +
                                QStringLiteral(" vs ") + QString::number(w)));
        }
        QVERIFY2(s->preview.find('.') != std::string::npos, s->preview.c_str());  // values, not integer codes
        const auto perChannel = tensorStats(**c, (*c)->nodes[(*c)->find("per_channel")].tensor);
        QVERIFY(!perChannel);
        QVERIFY(perChannel.error().message.find("per_channel_affine") != std::string::npos);
    }

    void nonfiniteRule()
    {
        auto c = openCheckpoint(diagtest::fixture("nonfinite.pt"));
        QVERIFY(c);
        CheckOptions o;
        o.values = true;
        auto fs = check(**c, o);
        QVERIFY(fs);
        const Finding* f = nullptr;
        for (const auto& x : *fs) {
            f = x.code == "nonfinite-values" ? &x : f;
        }
        QVERIFY(f);
        QCOMPARE(f->paths, (std::vector<std::string>{"f32", "f16", "bf16"}));
        QVERIFY2(f->detail.find("`f32` (float32, 16 values): 3 NaN, 2 +Inf, 1 -Inf") != std::string::npos,
                 f->detail.c_str());
        QVERIFY(f->detail.find("`f16` (float16, 8 values): 1 NaN, 1 +Inf, 0 -Inf") != std::string::npos);
        QVERIFY(f->detail.find("`bf16` (bfloat16, 8 values): 2 NaN, 0 +Inf, 1 -Inf") != std::string::npos);
        auto clean = openCheckpoint(diagtest::fixture("dtypes.pt"));
        auto none = check(**clean, o);
        for (const auto& x : *none) {
            QVERIFY(x.code != "nonfinite-values");
        }
    }

    // util/dtype's halfToDouble, shared by the value scans and --weights-only's numpy scalars.
    void halfToDoubleIsExact()
    {
        QCOMPARE(halfToDouble(0x3C00), 1.0);
        QCOMPARE(halfToDouble(0xC000), -2.0);
        QCOMPARE(halfToDouble(0x7BFF), 65504.0);
        QCOMPARE(halfToDouble(0x0001), std::ldexp(1.0, -24));  // smallest subnormal
        QVERIFY(std::signbit(halfToDouble(0x8000)) && halfToDouble(0x8000) == 0.0);
        QCOMPARE(halfToDouble(0xFC00), -std::numeric_limits<double>::infinity());
        // NaNs keep sign and payload, as numpy's float16 -> float conversion keeps them.
        const auto bitsOf = [](double d) { return std::bit_cast<std::uint64_t>(d); };
        QCOMPARE(bitsOf(halfToDouble(0x7E00)), std::uint64_t{0x7FF8000000000000});
        QCOMPARE(bitsOf(halfToDouble(0xFE00)), std::uint64_t{0xFFF8000000000000});
        QCOMPARE(bitsOf(halfToDouble(0x7C01)), std::uint64_t{0x7FF0040000000000});
    }
};

QTEST_GUILESS_MAIN(TestValues)
#include "tst_values.moc"
