// cOrderRuns / forEachCOrderRun against a naive element-by-element gather: the readers, the
// safetensors writer and the value scan all copy strided views through these runs, so a wrong
// fold here would corrupt every one of them at once. Real PyTorch views are covered by tst_reader.
#include "checkpoint/tensor_bytes.h"

#include <QTest>

#include <cstring>

using namespace ckpt;

namespace {

using Dims = std::vector<std::int64_t>;

// The definition of C order, with nothing folded or merged.
std::vector<std::byte> naiveGather(Bytes storage, const Dims& shape, const Dims& stride, std::int64_t offset,
                                   std::size_t elementSize)
{
    std::vector<std::byte> out;
    std::int64_t numel = 1;
    for (auto s : shape) {
        numel *= s;
    }
    Dims index(shape.size(), 0);
    for (std::int64_t n = 0; n < numel; ++n) {
        std::int64_t element = offset;
        for (std::size_t d = 0; d < shape.size(); ++d) {
            element += index[d] * stride[d];
        }
        const auto* p = storage.data() + static_cast<std::size_t>(element) * elementSize;
        out.insert(out.end(), p, p + elementSize);
        for (std::size_t d = shape.size(); d-- > 0;) {
            if (++index[d] < shape[d]) {
                break;
            }
            index[d] = 0;
        }
    }
    return out;
}

}  // namespace

Q_DECLARE_METATYPE(Dims)

class TestTensorBytes : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void runsMatchNaiveGather_data();
    void runsMatchNaiveGather();
    void stopsWhenAsked();
};

void TestTensorBytes::runsMatchNaiveGather_data()
{
    QTest::addColumn<Dims>("shape");
    QTest::addColumn<Dims>("stride");
    QTest::addColumn<qint64>("offset");
    QTest::addColumn<int>("elementSize");
    QTest::addColumn<int>("runs");         // how many callbacks
    QTest::addColumn<int>("runElements");  // elements per run
    QTest::addColumn<int>("outerDims");    // odometer wheels left after folding and merging

    QTest::newRow("contiguous") << Dims{2, 3, 4} << Dims{12, 4, 1} << qint64{5} << 4 << 1 << 24 << 0;
    QTest::newRow("transposed 2-D") << Dims{5, 3} << Dims{1, 5} << qint64{0} << 4 << 15 << 1 << 2;
    QTest::newRow("column step") << Dims{4, 3} << Dims{6, 2} << qint64{1} << 4 << 12 << 1 << 1;
    QTest::newRow("row step") << Dims{3, 4} << Dims{8, 1} << qint64{4} << 4 << 3 << 4 << 1;
    QTest::newRow("size-1 dims, odd strides")
        << Dims{1, 3, 1, 4} << Dims{7, 4, 13, 1} << qint64{2} << 4 << 1 << 12 << 0;
    QTest::newRow("size-1 dim in a transposed view")
        << Dims{3, 1, 2} << Dims{1, 99, 3} << qint64{0} << 4 << 6 << 1 << 2;
    QTest::newRow("zero-size dim") << Dims{3, 0, 4} << Dims{4, 4, 1} << qint64{0} << 4 << 0 << 0 << 0;
    QTest::newRow("0-d scalar") << Dims{} << Dims{} << qint64{7} << 4 << 1 << 1 << 0;
    QTest::newRow("expanded rows") << Dims{4, 3} << Dims{0, 1} << qint64{2} << 4 << 4 << 3 << 1;
    QTest::newRow("expanded twice") << Dims{2, 3, 5} << Dims{0, 0, 1} << qint64{0} << 4 << 6 << 5 << 1;
    QTest::newRow("expanded columns") << Dims{3, 4} << Dims{1, 0} << qint64{0} << 4 << 12 << 1 << 2;
    QTest::newRow("permuted 3-D, float16") << Dims{4, 2, 3} << Dims{1, 12, 4} << qint64{0} << 2 << 24 << 1 << 2;
    QTest::newRow("sliced 4-D, bytes") << Dims{2, 2, 3, 2} << Dims{60, 12, 4, 1} << qint64{3} << 1 << 12 << 2 << 2;
}

void TestTensorBytes::runsMatchNaiveGather()
{
    QFETCH(Dims, shape);
    QFETCH(Dims, stride);
    QFETCH(qint64, offset);
    QFETCH(int, elementSize);
    QFETCH(int, runs);
    QFETCH(int, runElements);
    QFETCH(int, outerDims);
    const auto es = static_cast<std::size_t>(elementSize);

    std::vector<std::byte> storage(1024);
    for (std::size_t i = 0; i < storage.size(); ++i) {
        storage[i] = static_cast<std::byte>(i % 251);  // distinct enough that a misplaced byte shows
    }
    const auto expected = naiveGather(storage, shape, stride, offset, es);

    const CRuns plan = cOrderRuns(shape, stride, es);
    QCOMPARE(plan.runBytes, static_cast<std::uint64_t>(runElements) * es);
    QCOMPARE(static_cast<int>(plan.size.size()), outerDims);
    QCOMPARE(plan.byteStride.size(), plan.size.size());

    std::vector<std::byte> got;
    int calls = 0;
    const bool finished = forEachCOrderRun(shape, stride, offset, es, [&](std::uint64_t at, std::uint64_t n) {
        ++calls;
        if (n != plan.runBytes || at + n > storage.size()) {
            return false;
        }
        got.insert(got.end(), storage.begin() + static_cast<std::ptrdiff_t>(at),
                   storage.begin() + static_cast<std::ptrdiff_t>(at + n));
        return true;
    });
    QVERIFY(finished);
    QCOMPARE(calls, runs);
    QCOMPARE(got.size(), expected.size());
    QVERIFY(got == expected);
}

void TestTensorBytes::stopsWhenAsked()
{
    int calls = 0;
    const bool finished =
        forEachCOrderRun(Dims{4, 5}, Dims{1, 4}, 0, 4, [&](std::uint64_t, std::uint64_t) { return ++calls < 7; });
    QVERIFY(!finished);
    QCOMPARE(calls, 7);
}

QTEST_GUILESS_MAIN(TestTensorBytes)
#include "tst_tensor_bytes.moc"
