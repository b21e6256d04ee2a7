// pickle/compact.h: the 16-byte containers every pickle Value holds. They replace std::string and
// std::vector in 400 000 values of a large state dict, so each must behave as the standard one
// did across the inline/heap boundary, on copy, move, insert and erase.
#include "pickle/compact.h"
#include "pickle/value.h"

#include <QTest>

#include <string>
#include <vector>

using ckpt::pickle::IdList;
using ckpt::pickle::SmallVector;
using ckpt::pickle::Text;
using ckpt::pickle::ValueId;

class TstCompact : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void sizes()
    {
        QCOMPARE(sizeof(Text), std::size_t{16});
        QCOMPARE(sizeof(IdList), std::size_t{16});
        QCOMPARE(sizeof(SmallVector<std::int64_t>), std::size_t{24});
        QCOMPARE(sizeof(ckpt::pickle::Value), std::size_t{48});
    }

    // Every length from empty through the last inline one (15) to heap ones, as std::string.
    void textMatchesStdString()
    {
        for (std::size_t n = 0; n <= 40; ++n) {
            std::string s;
            for (std::size_t i = 0; i < n; ++i) {
                s.push_back(static_cast<char>('a' + (i * 7) % 26));
            }
            const Text t(s);
            QCOMPARE(t.size(), s.size());
            QCOMPARE(t.view(), std::string_view(s));
            QCOMPARE(t.c_str()[n], '\0');
            Text copy = t;
            QCOMPARE(copy.str(), s);
            Text moved = std::move(copy);
            QCOMPARE(moved.str(), s);
            QVERIFY(copy.empty());  // NOLINT(bugprone-use-after-move): a moved-from Text is empty
            moved += "xyz";
            QCOMPARE(moved.str(), s + "xyz");
            moved = t;
            QCOMPARE(moved.str(), s);
        }
        const std::string withNul("a\0b", 3);
        QCOMPARE(Text(withNul).size(), std::size_t{3});
        QVERIFY(Text("abc") < Text("abd"));
        QVERIFY(Text("layers.0.weight.long") == std::string("layers.0.weight.long"));
        QCOMPARE(Text("archive/data/12").find('/'), std::size_t{7});
        QCOMPARE(Text("archive/data/12").substr(8), std::string("data/12"));
    }

    void smallVectorMatchesStdVector()
    {
        std::vector<ValueId> ref;
        IdList v;
        for (std::uint32_t i = 0; i < 20; ++i) {
            ref.push_back(ValueId{i});
            v.push_back(ValueId{i});
            QCOMPARE(v.size(), ref.size());
            QVERIFY(v == ref);
            IdList copy = v;
            QVERIFY(copy == v);
        }
        // insert and erase across the inline/heap boundary
        IdList small{ValueId{1}};
        const std::vector<ValueId> more{ValueId{2}, ValueId{3}, ValueId{4}};
        small.insert(small.end(), more.begin(), more.end());
        QVERIFY(small == (std::vector<ValueId>{ValueId{1}, ValueId{2}, ValueId{3}, ValueId{4}}));
        small.erase(small.begin() + 1, small.begin() + 3);
        QVERIFY(small == (std::vector<ValueId>{ValueId{1}, ValueId{4}}));
        small.insert(small.begin(), ValueId{0});
        QVERIFY(small == (std::vector<ValueId>{ValueId{0}, ValueId{1}, ValueId{4}}));
        IdList moved = std::move(small);
        QCOMPARE(moved.size(), std::size_t{3});
        QVERIFY(small.empty());  // NOLINT(bugprone-use-after-move): a moved-from list is empty

        SmallVector<std::int64_t> dims;
        dims.assign(std::size_t{3}, 0);
        QVERIFY(dims == (std::vector<std::int64_t>{0, 0, 0}));
        dims.resize(1);
        QVERIFY(dims == (std::vector<std::int64_t>{0}));
        dims = std::vector<std::int64_t>{6, 1, 5, 5};
        const std::vector<std::int64_t> back = dims;
        QCOMPARE(back, (std::vector<std::int64_t>{6, 1, 5, 5}));
    }
};

QTEST_GUILESS_MAIN(TstCompact)
#include "tst_compact.moc"
