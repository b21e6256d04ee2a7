// The protocol-2 pickler: what it writes must load in Python (pickletools, pickle.loads) and in
// torch.load to the same values, use only weights_only opcodes, and read back to the same tree.
#include "pickle/pickler.h"
#include "pickle_test_util.h"
#include "torch_records.h"

#include <QTemporaryDir>
#include <QTest>

using namespace ckpt::pickle;
using namespace pickletest;

namespace {

std::string pid(const std::string& cls, const std::string& key, int numel)
{
    return "(" + binunicode("storage") + "ctorch\n" + cls + "\n" + binunicode(key) + binunicode("cpu") + "K" +
           std::string(1, static_cast<char>(numel)) + "tQ";
}

const std::string kHooks = "ccollections\nOrderedDict\n)R";
const std::string kZero = std::string("K\x00", 2);

// unpickle -> pickle -> unpickle; the second pickling must reproduce the first byte for byte.
struct RoundTrip {
    Arena first;
    Arena second;
    ValueId root1;
    ValueId root2;
    std::string ours;
    std::string error;
};

bool roundTrip(const std::string& data, RoundTrip& rt)
{
    auto r1 = run(rt.first, data);
    if (!r1.ok()) {
        rt.error = "unpickle: " + r1.error().describe();
        return false;
    }
    rt.root1 = r1->root;
    auto p1 = picklePersistent(rt.first, rt.root1);
    if (!p1.ok()) {
        rt.error = "pickle: " + p1.error().describe();
        return false;
    }
    rt.ours = *p1;
    auto r2 = run(rt.second, rt.ours);
    if (!r2.ok()) {
        rt.error = "unpickle ours: " + r2.error().describe();
        return false;
    }
    rt.root2 = r2->root;
    auto p2 = picklePersistent(rt.second, rt.root2);
    if (!p2.ok() || *p2 != rt.ours) {
        rt.error = "pickling the re-read tree gives other bytes";
        return false;
    }
    return true;
}

}  // namespace

class TestPickler : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;
    QString values_;
    QString torch_;

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(dir_.isValid());
        values_ = dir_.filePath(QStringLiteral("values"));
        torch_ = dir_.filePath(QStringLiteral("torch"));
        QString out;
        QCOMPARE(runOracle({QStringLiteral("values"), values_}, &out), 0);
        QVERIFY2(runOracle({QStringLiteral("torch"), torch_}, &out) == 0, qPrintable(out));
    }

    // Every value of the oracle's table, at every protocol, round-trips through our pickler; then
    // Python checks all of ours in one go (opcodes, consecutive memo, pickle.loads equality).
    void valuesRoundTrip()
    {
        const QStringList files = QDir(values_).entryList({QStringLiteral("*.pkl")}, QDir::Files, QDir::Name);
        QVERIFY(files.size() > 100);
        for (const QString& f : files) {
            const QString stem = values_ + QLatin1Char('/') + f.chopped(4);
            RoundTrip rt;
            QVERIFY2(roundTrip(readFile(stem + QStringLiteral(".pkl")), rt),
                     qPrintable(f + QStringLiteral(": ") + QString::fromStdString(rt.error)));
            QCOMPARE(canonOf(rt.second, rt.root2), canonOf(rt.first, rt.root1));
            QVERIFY(writeFile(stem + QStringLiteral(".ours.pkl"), rt.ours));
        }
        QString out;
        const int rc = runOracle({QStringLiteral("check"), values_}, &out);
        QVERIFY2(rc == 0, qPrintable(out));
    }

    // torch.save files: our data.pkl next to the original records loads in torch.load to equal
    // tensors, equal _metadata, the same identities and the same storage sharing.
    void torchRoundTrip()
    {
        const QStringList names{QStringLiteral("state_dict"), QStringLiteral("parameters"), QStringLiteral("views"),
                                QStringLiteral("tied"),       QStringLiteral("dtypes"),     QStringLiteral("scalars"),
                                QStringLiteral("quantized"),  QStringLiteral("sparse"),     QStringLiteral("meta"),
                                QStringLiteral("model"),      QStringLiteral("checkpoint"), QStringLiteral("proto4")};
        for (const QString& name : names) {
            const QString stem = torch_ + QLatin1Char('/') + name;
            RoundTrip rt;
            QVERIFY2(roundTrip(readFile(stem + QStringLiteral(".data.pkl")), rt),
                     qPrintable(name + QStringLiteral(": ") + QString::fromStdString(rt.error)));
            TensorWalker w1(rt.first);
            w1.walk(rt.root1, {});
            TensorWalker w2(rt.second);
            w2.walk(rt.root2, {});
            QCOMPARE(w2.records, w1.records);
            QVERIFY(writeFile(stem + QStringLiteral(".ours.pkl"), rt.ours));
        }
        QString out;
        const int rc = runOracle({QStringLiteral("torchcheck"), torch_}, &out);
        QVERIFY2(rc == 0, qPrintable(out));
    }

    // Forms torch 2.x writes (torch 1.13 here cannot make them): v3 with an untyped storage,
    // tensors with Python attributes, parameters with state, meta tensors.
    void modernForms()
    {
        const std::string v2args =
            "(" + pid("FloatStorage", "1", 4) + kZero + "K\x02K\x02\x86K\x02K\x01\x86\x89" + kHooks + "t";
        const std::string data =
            "\x80\x02(" +
            // v3: float8 over UntypedStorage
            std::string("ctorch._utils\n_rebuild_tensor_v3\n(") + pid("UntypedStorage", "0", 8) + kZero +
            "K\x02K\x04\x86K\x04K\x01\x86\x89" + kHooks + "ctorch\nfloat8_e4m3fn\ntR" +
            // _rebuild_from_type_v2(_rebuild_tensor_v2, torch.Tensor, args, {'tag': 1})
            "ctorch._tensor\n_rebuild_from_type_v2\n(ctorch._utils\n_rebuild_tensor_v2\nctorch\nTensor\n" + v2args +
            "}" + binunicode("tag") + "K\x01stR" +
            // Parameter with state
            "ctorch._utils\n_rebuild_parameter_with_state\n(ctorch._utils\n_rebuild_tensor_v2\n" + v2args + "R\x88" +
            kHooks + "}" + binunicode("x") + "K\x07stR" +
            // meta
            "ctorch._utils\n_rebuild_meta_tensor_no_storage\n(ctorch\nfloat16\nK\x03\x85K\x01\x85\x89tR" + "t.";
        RoundTrip rt;
        QVERIFY2(roundTrip(data, rt), rt.error.c_str());
        const Value& items = rt.first[rt.root1];
        QCOMPARE(items.items.size(), std::size_t{4});
        const TensorInfo& v3 = tensorOf(rt.first, items.items[0]);
        QCOMPARE(v3.dtype, ckpt::DType::Float8_e4m3fn);
        QVERIFY(rt.first.storages[0].untyped);
        QCOMPARE(rt.first.storages[0].numel, std::uint64_t{8});
        const TensorInfo& sub = tensorOf(rt.first, items.items[1]);
        QVERIFY(sub.subclassType.valid());
        QCOMPARE(shortRepr(rt.first, sub.subclassState), std::string("{'tag': 1}"));
        const TensorInfo& param = tensorOf(rt.first, items.items[2]);
        QVERIFY(param.isParameter);
        QCOMPARE(shortRepr(rt.first, param.parameterState), std::string("{'x': 7}"));
        const TensorInfo& meta = tensorOf(rt.first, items.items[3]);
        QCOMPARE(meta.form, TensorForm::Meta);
        QCOMPARE(meta.dtype, ckpt::DType::Float16);
        TensorWalker w1(rt.first);
        w1.walk(rt.root1, {});
        TensorWalker w2(rt.second);
        w2.walk(rt.root2, {});
        QCOMPARE(w2.records, w1.records);
        const TensorInfo& sub2 = tensorOf(rt.second, rt.second[rt.root2].items[1]);
        QCOMPARE(globalOf(rt.second, sub2.subclassType).qualified(), std::string("torch.Tensor"));
        QVERIFY(rt.ours.find("_rebuild_tensor_v3") != std::string::npos);
        QVERIFY(rt.ours.find("_rebuild_parameter_with_state") != std::string::npos);
    }

    void globalWithNewlineRefused()
    {
        Arena a;
        auto r = run(a, std::string("\x80\x04\x8c\x03"
                                    "a\nb\x8c\x01"
                                    "c\x93."));
        QVERIFY(r.ok());
        auto p = picklePersistent(a, r->root);
        QVERIFY(!p.ok());
        QCOMPARE(p.error().code, ckpt::ErrorCode::Unsupported);
    }

    void protocolTwoSpellings()
    {
        Arena a;
        Value set;
        set.kind = Kind::Set;
        set.items = {a.integer(1)};
        const ValueId s = a.add(set);
        const ValueId root = a.tuple({s, a.bytes("ab"), a.bytes(""), a.dtype(ckpt::DType::BFloat16)});
        auto p = picklePersistent(a, root);
        QVERIFY(p.ok());
        QVERIFY(p->starts_with("\x80\x02"));
        QVERIFY(p->find("c__builtin__\nset\n") != std::string::npos);
        QVERIFY(p->find("c_codecs\nencode\n") != std::string::npos);
        QVERIFY(p->find("c__builtin__\nbytes\n") != std::string::npos);
        QVERIFY(p->find("ctorch\nbfloat16\n") != std::string::npos);
        Arena b;
        auto r = run(b, *p);
        QVERIFY(r.ok());
        QCOMPARE(shortRepr(b, r->root), std::string("({1}, b'ab', b'', torch.bfloat16)"));
    }

    void sharedAndCyclic()
    {
        Arena a;
        const ValueId inner = a.list({a.integer(1)});
        const ValueId self = a.list({});
        a[self].items.push_back(self);
        const ValueId root = a.tuple({inner, inner, self});
        auto p = picklePersistent(a, root);
        QVERIFY(p.ok());
        Arena b;
        auto r = run(b, *p);
        QVERIFY(r.ok());
        const Value& t = b[r->root];
        QCOMPARE(t.items[0], t.items[1]);
        QCOMPARE(b[t.items[2]].items[0], t.items[2]);
    }

    // An object whose constructor arguments contain the object cannot exist in Python and must
    // not send the pickler round in circles.
    void cyclicArgumentsRefused()
    {
        Arena a;
        const ValueId l = a.list({});
        ObjectInfo o;
        o.callable = {"mod", "Cls"};
        o.args = a.tuple({l});
        const ValueId obj = a.object(o);
        a[l].items.push_back(obj);
        auto p = picklePersistent(a, obj);
        QVERIFY(!p.ok());
        QCOMPARE(p.error().code, ckpt::ErrorCode::Unsupported);
        QVERIFY(p.error().message.find("mod.Cls contains itself") != std::string::npos);
        // a recursive tuple through a list is fine (CPython's POP/GET form)
        Arena b;
        const ValueId bl = b.list({});
        const ValueId bt = b.tuple({bl, b.integer(1)});
        b[bl].items.push_back(bt);
        auto q = picklePersistent(b, bt);
        QVERIFY(q.ok());
        Arena c;
        auto r = run(c, *q);
        QVERIFY(r.ok());
        QCOMPARE(c[c[c[r->root].items[0]].items[0]].items[0], c[r->root].items[0]);
    }

    void deepAndWide()
    {
        constexpr int kDepth = 100000;
        Arena a;
        auto r = run(a, std::string(kDepth, ']') + std::string(kDepth - 1, 'a') + ".");
        QVERIFY(r.ok());
        auto p = picklePersistent(a, r->root);
        QVERIFY(p.ok());
        Arena b;
        auto again = run(b, *p);
        QVERIFY(again.ok());
        int depth = 1;
        for (ValueId v = again->root; !b[v].items.empty(); v = b[v].items[0]) {
            ++depth;
        }
        QCOMPARE(depth, kDepth);
        // a tuple DAG of tree size 2^2000 is written once per node
        Arena d;
        std::string dag = "K\x01";
        for (int n = 0; n < 2000; ++n) {
            dag += "2\x86";
        }
        auto dr = run(d, dag + ".");
        QVERIFY(dr.ok());
        auto dp = picklePersistent(d, dr->root);
        QVERIFY(dp.ok());
        QVERIFY(dp->size() < 100000);  // ~16 bytes per level
        // batches of 1000 like CPython: 2500 items -> 3 APPENDS (None is one byte, no 0x65 in data)
        Arena w;
        std::vector<ValueId> items;
        for (int n = 0; n < 2500; ++n) {
            items.push_back(w.none());
        }
        auto wp = picklePersistent(w, w.list(items));
        QVERIFY(wp.ok());
        QCOMPARE(std::count(wp->begin(), wp->end(), 'e'), 3);
    }

    void storagesFromArena()
    {
        Arena a;
        auto r = run(a, readFile(torch_ + QStringLiteral("/tied.data.pkl")));
        QVERIFY(r.ok());
        // callers rewrite keys and locations in Arena::storages before pickling
        for (auto& s : a.storages) {
            s.key = "k" + s.key;
            s.location = "cuda:1";
        }
        auto p = picklePersistent(a, r->root);
        QVERIFY(p.ok());
        Arena b;
        auto again = run(b, *p);
        QVERIFY(again.ok());
        QCOMPARE(b.storages.size(), a.storages.size());
        for (const auto& s : b.storages) {
            QVERIFY(s.key.starts_with("k"));
            QCOMPARE(s.location, std::string("cuda:1"));
        }
    }
};

QTEST_GUILESS_MAIN(TestPickler)
#include "tst_pickler.moc"
