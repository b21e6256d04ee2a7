// The restricted unpickler against real pickles (Python's pickle.dumps at protocols 0-5 and
// torch.save files, made at test time by tests/pickle/pickle_oracle.py) and against hostile input.
#include "pickle/opcodes.h"
#include "pickle_test_util.h"
#include "torch_records.h"

#include <QTemporaryDir>
#include <QTest>

#include <chrono>
#include <ctime>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

using namespace ckpt::pickle;
using namespace pickletest;

namespace {

// A hand-made _rebuild_tensor_v2 call over one FloatStorage of `numel` elements.
std::string v2Pickle(const std::string& size, const std::string& stride,
                     const std::string& offset = std::string("K\x00", 2), std::int64_t numel = 4)
{
    return std::string("\x80\x02") + "ctorch._utils\n_rebuild_tensor_v2\n(" + "(" + binunicode("storage") +
           "ctorch\nFloatStorage\n" + binunicode("0") + binunicode("cpu") + long1(numel) + "tQ" + offset + size +
           stride + "\x89" + "ccollections\nOrderedDict\n)R" + "tR.";
}

}  // namespace

class TestUnpickler : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;
    QString values_;
    QString torch_;

    std::string torchFile(const QString& name) const { return readFile(torch_ + QLatin1Char('/') + name); }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(dir_.isValid());
        values_ = dir_.filePath(QStringLiteral("values"));
        torch_ = dir_.filePath(QStringLiteral("torch"));
        QString out;
        QCOMPARE(runOracle({QStringLiteral("values"), values_}, &out), 0);
        QVERIFY2(runOracle({QStringLiteral("torch"), torch_}, &out) == 0, qPrintable(out));
        QVERIFY2(runOracle({QStringLiteral("bigsd"), torch_, QStringLiteral("40000")}, &out) == 0, qPrintable(out));
    }

    // Every value of the oracle's table at every protocol decodes to what pickle.loads gives.
    void values_data()
    {
        QTest::addColumn<QString>("stem");
        const QStringList files = QDir(values_).entryList({QStringLiteral("*.pkl")}, QDir::Files, QDir::Name);
        QVERIFY(files.size() > 100);
        for (const QString& f : files) {
            const QString stem = f.chopped(4);
            QTest::newRow(qPrintable(stem)) << values_ + QLatin1Char('/') + stem;
        }
    }
    void values()
    {
        QFETCH(QString, stem);
        const std::string data = readFile(stem + QStringLiteral(".pkl"));
        const std::string want = readFile(stem + QStringLiteral(".canon"));
        Arena a;
        auto r = run(a, data);
        QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
        QCOMPARE(r->consumed, data.size());
        const int proto = stem.back().digitValue();
        QCOMPARE(r->protocol, proto >= 2 ? proto : 0);
        QVERIFY(r->opcodesSeen.test(op::STOP));
        const std::string got = canonOf(a, r->root);
        QVERIFY2(got == want, qPrintable(QStringLiteral("\nwant %1\ngot  %2")
                                             .arg(QString::fromStdString(want.substr(0, 400)),
                                                  QString::fromStdString(got.substr(0, 400)))));
        // display helpers must stay bounded whatever the value
        QVERIFY(shortRepr(a, r->root, 80).size() <= 80);
    }

    void torchTensors_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<bool>("legacy");
        for (const char* n : {"state_dict", "parameters", "views", "tied", "dtypes", "scalars", "quantized", "sparse",
                              "meta", "model", "checkpoint", "proto4"}) {
            QTest::newRow(n) << QString::fromLatin1(n) << false;
        }
        QTest::newRow("legacy_sd") << QStringLiteral("legacy_sd") << true;
        QTest::newRow("legacy_model") << QStringLiteral("legacy_model") << true;
    }
    // TensorInfo fields against what torch.load says about the same file.
    void torchTensors()
    {
        QFETCH(QString, name);
        QFETCH(bool, legacy);
        Arena a;
        ValueId root;
        if (legacy) {
            // magic, protocol version, sys_info, then the object with 6-tuple storage pids
            const std::string file = torchFile(name + QStringLiteral(".legacy"));
            std::size_t at = 0;
            for (int n = 0; n < 4; ++n) {
                UnpickleOptions o;
                o.legacyPersistentIds = n == 3;
                auto r = unpickle(ckpt::asBytes(file).subspan(at), a, o);
                QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
                at += r->consumed;
                root = r->root;
                if (n == 0) {
                    QCOMPARE(a[root].kind, Kind::BigInt);
                    QCOMPARE(shortRepr(a, root), std::string("119547037146038801333356"));
                }
            }
        } else {
            auto r = run(a, torchFile(name + QStringLiteral(".data.pkl")));
            QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
            root = r->root;
        }
        TensorWalker w(a);
        w.walk(root, {});
        const QStringList want = QString::fromStdString(torchFile(name + QStringLiteral(".expect")))
                                     .split(QLatin1Char('\n'), Qt::SkipEmptyParts);
        QStringList got;
        for (const auto& r : w.records) {
            got << QString::fromStdString(r);
        }
        QCOMPARE(got, want);
    }

    void stateDictMetadata()
    {
        Arena a;
        auto r = run(a, torchFile(QStringLiteral("state_dict.data.pkl")));
        QVERIFY(r.ok());
        const Value& sd = a[r->root];
        QCOMPARE(sd.kind, Kind::Dict);
        QVERIFY(sd.flag);
        QVERIFY(sd.attrs.valid());
        const Value& attrs = a[sd.attrs];
        QCOMPARE(attrs.kind, Kind::Dict);
        QCOMPARE(keyText(a, attrs.items[0]), std::string("_metadata"));
        const Value& md = a[attrs.items[1]];
        QVERIFY(md.flag);
        QCOMPARE(keyText(a, md.items[0]), std::string(""));
        QCOMPARE(shortRepr(a, md.items[1]), std::string("{'version': 1}"));
        QCOMPARE(r->protocol, 2);
        // zip storages: one per key, dtype from the class, location as saved
        QCOMPARE(a.storages.size(), std::size_t{9});
        QCOMPARE(a.storages[0].className, std::string("FloatStorage"));
        QCOMPARE(a.storages[0].location, std::string("cpu"));
        QCOMPARE(a.storages[6].dtype, ckpt::DType::Int64);
    }

    void tiedShareStorage()
    {
        Arena a;
        auto r = run(a, torchFile(QStringLiteral("tied.data.pkl")));
        QVERIFY(r.ok());
        const Value& d = a[r->root];
        // 'a' and 'b' are the same Parameter object: the same ValueId
        QCOMPARE(d.items[1], d.items[3]);
        const TensorInfo& w = tensorOf(a, d.items[1]);
        const TensorInfo& data = tensorOf(a, d.items[5]);
        QVERIFY(w.isParameter);
        QVERIFY(!data.isParameter);
        QCOMPARE(a[w.storage].i, a[data.storage].i);
        QVERIFY(!a.storages[static_cast<std::size_t>(a[w.storage].i)].conflicting);
    }

    void checkpointObjects()
    {
        Arena a;
        auto r = run(a, torchFile(QStringLiteral("checkpoint.data.pkl")));
        QVERIFY(r.ok());
        const Value& d = a[r->root];
        std::map<std::string, ValueId> byKey;
        for (std::size_t n = 0; n + 1 < d.items.size(); n += 2) {
            byKey[keyText(a, d.items[n])] = d.items[n + 1];
        }
        QCOMPARE(shortRepr(a, byKey["args"]), std::string("argparse.Namespace(lr=0.1, arch='mlp')"));
        QCOMPARE(shortRepr(a, byKey["device"]), std::string("device(type='cpu')"));
        QCOMPARE(shortRepr(a, byKey["size"]), std::string("torch.Size([2, 3])"));
        QCOMPARE(shortRepr(a, byKey["dtype"]), std::string("torch.float16"));
        QCOMPARE(shortRepr(a, byKey["epoch"]), std::string("5"));
        NumpyInfo np;
        QVERIFY(decodeNumpy(a, byKey["best"], np));
        QVERIFY(np.isScalar);
        QCOMPARE(np.dtype, std::string("<f8"));
        QCOMPARE(np.data.size(), std::size_t{8});
        QCOMPARE(objectOf(a, byKey["best"]).callable.qualified(), std::string("numpy.core.multiarray.scalar"));
    }

    void shortReprForms()
    {
        Arena a;
        QCOMPARE(shortRepr(a, a.str("text")), std::string("'text'"));
        QCOMPARE(shortRepr(a, a.str("it's")), std::string("'it\\'s'"));
        QCOMPARE(shortRepr(a, a.real(1.5)), std::string("1.5"));
        QCOMPARE(shortRepr(a, a.real(1.0)), std::string("1.0"));
        QCOMPARE(shortRepr(a, a.real(1e16)), std::string("1e+16"));
        QCOMPARE(shortRepr(a, a.real(1e-5)), std::string("1e-05"));
        QCOMPARE(shortRepr(a, a.real(0.0001)), std::string("0.0001"));
        QCOMPARE(shortRepr(a, a.real(-2.5e-7)), std::string("-2.5e-07"));
        QCOMPARE(shortRepr(a, a.boolean(true)), std::string("True"));
        QCOMPARE(shortRepr(a, a.none()), std::string("None"));
        QCOMPARE(shortRepr(a, a.bytes("a\x01'")), std::string("b'a\\x01\\''"));
        QCOMPARE(shortRepr(a, a.tuple({a.integer(1), a.integer(2)})), std::string("(1, 2)"));
        QCOMPARE(shortRepr(a, a.tuple({a.integer(1)})), std::string("(1,)"));
        std::vector<ValueId> many;
        for (int n = 0; n < 100; ++n) {
            many.push_back(a.integer(n));
        }
        QCOMPARE(shortRepr(a, a.list(many), 80), std::string("[...] (100 items)"));
        QCOMPARE(shortRepr(a, a.dtype(ckpt::DType::Float16)), std::string("torch.float16"));
        Value dev;
        dev.kind = Kind::Device;
        dev.text = "cuda";
        dev.i = 1;
        QCOMPARE(shortRepr(a, a.add(dev)), std::string("device(type='cuda', index=1)"));
        Value size;
        size.kind = Kind::Size;
        size.items = {a.integer(2), a.integer(3)};
        QCOMPARE(shortRepr(a, a.add(size)), std::string("torch.Size([2, 3])"));
        ObjectInfo ns;
        ns.callable = {"argparse", "Namespace"};
        ns.form = ObjectForm::NewObj;
        ns.args = a.tuple({});
        ns.state = a.dict({a.str("lr"), a.real(0.1), a.str("name"), a.str("x")}, false);
        QCOMPARE(shortRepr(a, a.object(ns)), std::string("argparse.Namespace(lr=0.1, name='x')"));
        QCOMPARE(keyText(a, a.integer(7)), std::string("7"));
        QCOMPARE(keyText(a, a.tuple({a.integer(1), a.str("a")})), std::string("(1, 'a')"));
        Value big;
        big.kind = Kind::BigInt;
        big.text = std::string("\x00\x00\x00\x00\x00\x00\x00\x00\x01", 9);  // 2**64
        QCOMPARE(shortRepr(a, a.add(big)), std::string("18446744073709551616"));
        QCOMPARE(std::string(kindName(Kind::PersistentId)), std::string("persistent_id"));
    }

    // Protocol 0/1 text forms and Python 2 byte strings.
    void textOpcodes()
    {
        Arena a;
        auto r =
            run(a, "(I01\nI00\nI-7\nL123456789012345678901234567890L\nF-2.5\nS'a\\'b\\x41\\n'\nVcaf\\u00e9\\\\u\nt.");
        QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
        QCOMPARE(shortRepr(a, r->root, 200),
                 std::string(
                     "(True, False, -7, 123456789012345678901234567890, -2.5, 'a\\'bA\\n', 'caf\xc3\xa9\\\\\\\\u')"));
        // Python 2 str: its bytes are kept (torch.load decodes them as UTF-8); bytes that are not
        // UTF-8 show as \xNN and are counted, since torch.load fails on them.
        r = run(a, "(U\x03\xe2\x82\xacU\x02\xe9x"
                   "c__builtin__\nset\n"
                   "]\x85R"
                   "ccopy_reg\n_reconstructor\nt.");
        QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
        QCOMPARE(shortRepr(a, r->root, 200), std::string("('\xe2\x82\xac', '\\xe9x', set(), copyreg._reconstructor)"));
        QCOMPARE(r->undecodableStrings, std::size_t{1});
        QCOMPARE(r->undecodablePython2, std::size_t{1});
        QCOMPARE(r->firstUndecodable, std::size_t{6});
        QVERIFY(a[a[r->root].items[1]].flag);
        QCOMPARE(a[a[r->root].items[1]].text, std::string("\xe9x"));
        // A BINUNICODE that is not UTF-8 is corrupt: counted, not a Python 2 str.
        r = run(a, std::string("X\x02\x00\x00\x00"
                               "a\x86.",
                               8));
        QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
        QCOMPARE(shortRepr(a, r->root), std::string("'a\\x86'"));
        QCOMPARE(r->undecodableStrings, std::size_t{1});
        QCOMPARE(r->undecodablePython2, std::size_t{0});
        // INST / OBJ / DUP / POP / POP_MARK / GET / PUT
        r = run(a, "(K\x01"
                   "imod\nCls\np7\n0g7\n2(K\x05\x31(cmod\nOther\nK\x02o\x86.");
        QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
        const Value& t = a[r->root];
        QCOMPARE(t.items.size(), std::size_t{2});
        QCOMPARE(objectOf(a, t.items[0]).callable.qualified(), std::string("mod.Cls"));
        QCOMPARE(objectOf(a, t.items[0]).form, ObjectForm::Inst);
        QCOMPARE(objectOf(a, t.items[1]).callable.qualified(), std::string("mod.Other"));
        QCOMPARE(objectOf(a, t.items[1]).form, ObjectForm::Obj);
        QCOMPARE(shortRepr(a, objectOf(a, t.items[1]).args), std::string("(2,)"));
    }

    void hostile_data()
    {
        QTest::addColumn<QByteArray>("data");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("message");
        QTest::addColumn<int>("offset");
        auto row = [](const char* name, std::string d, ckpt::ErrorCode c, const char* msg, int off) {
            QTest::newRow(name) << QByteArray(d.data(), static_cast<qsizetype>(d.size())) << static_cast<int>(c)
                                << QString::fromLatin1(msg) << off;
        };
        using E = ckpt::ErrorCode;
        row("unknown opcode", "\x80\x02\xff.", E::Corrupt, "unknown opcode 0xff", 2);
        row("underflow reduce", "\x80\x02R.", E::Corrupt, "stack underflow at REDUCE", 2);
        row("underflow below mark", "K\x01(R.", E::Corrupt, "stack underflow at REDUCE", 3);
        row("appends without mark",
            "]K\x01"
            "e.",
            E::Corrupt, "APPENDS without a MARK", 3);
        row("stop on mark", "(.", E::Corrupt, "stack underflow at STOP", 1);
        row("missing memo", "h\x05.", E::Corrupt, "memo key 5 missing", 0);
        row("missing text memo", "g12\n.", E::Corrupt, "memo key 12 missing", 0);
        row("empty", "", E::Truncated, "pickle ends before STOP (truncated)", 0);
        row("no stop", "\x80\x02]", E::Truncated, "pickle ends before STOP (truncated)", 3);
        row("binunicode 2^31", std::string("X\x00\x00\x00\x80", 5) + "abc", E::Truncated,
            "BINUNICODE declares 2147483648 bytes", 0);
        row("binbytes8 huge", std::string("\x8e\xff\xff\xff\xff\xff\xff\xff\x7f", 9), E::Truncated,
            "BINBYTES8 declares", 0);
        row("frame beyond end", std::string("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00", 11), E::Truncated,
            "FRAME declares 16 bytes", 2);
        row("binint cut", "J\x01\x02", E::Truncated, "BININT needs 4 bytes", 0);
        row("global cut", "cfoo\nbar", E::Truncated, "GLOBAL argument has no end of line", 0);
        row("protocol 6", "\x80\x06N.", E::Unsupported, "unsupported pickle protocol 6", 0);
        row("out of band", "\x80\x05\x97.", E::Unsupported, "out-of-band buffers", 2);
        row("append to tuple",
            ")K\x01"
            "a.",
            E::Corrupt, "APPEND onto a tuple", 3);
        row("setitem on list", "]K\x01K\x02s.", E::Corrupt, "SETITEM onto a list", 5);
        row("build on list", "]}b.", E::Corrupt, "BUILD on a list", 2);
        row("call a list", "])R.", E::Unsupported, "REDUCE of a list value", 2);
        row("stack global ints", "K\x01K\x02\x93.", E::Corrupt, "STACK_GLOBAL needs two strings", 4);
        row("odd dict",
            "(K\x01"
            "d.",
            E::Corrupt, "odd number of items for DICT", 3);
        row("bad string", "S'abc\n.", E::Corrupt, "STRING opcode argument must be quoted", 0);
        row("bad int", "Ixyz\n.", E::Corrupt, "invalid integer literal", 0);
        row("huge int literal", "I" + std::string(5000, '9') + "\n.", E::Limit, "exceeds the 4300 digits", 0);
        row("negative binstring", std::string("T\xff\xff\xff\xff", 5), E::Corrupt, "negative byte count", 0);
        row("ext code 0", std::string("\x82\x00.", 3), E::Corrupt, "EXT1 specifies code <= 0", 0);
        row("shape overflow", v2Pickle(long1(1LL << 40) + long1(1LL << 40) + "\x86", "K\x01K\x01\x86"), E::Limit,
            "overflows", 0);
        row("negative dim", v2Pickle(long1(-1) + "\x85", "K\x01\x85"), E::Corrupt,
            "malformed arguments to torch._utils._rebuild_tensor_v2: negative dimension", 0);
        row("size/stride mismatch", v2Pickle("K\x02\x85", ")"), E::Corrupt, "differ in length", 0);
        row("offset not int", v2Pickle("K\x02\x85", "K\x01\x85", "N"), E::Corrupt, "storage offset is a none", 0);
        row("extent overflow", v2Pickle("K\x02\x85", long1(INT64_MAX) + "\x85"), E::Limit, "overflows", 0);
    }
    void hostile()
    {
        QFETCH(QByteArray, data);
        QFETCH(int, code);
        QFETCH(QString, message);
        QFETCH(int, offset);
        Arena a;
        auto r = run(a, data.toStdString());
        QVERIFY(!r.ok());
        const QString got = QString::fromStdString(r.error().message);
        QVERIFY2(got.contains(message), qPrintable(got));
        QCOMPARE(static_cast<int>(r.error().code), code);
        QVERIFY(r.error().offset.has_value());
        if (!message.contains(QStringLiteral("overflows")) && !message.contains(QStringLiteral("malformed")) &&
            !message.contains(QStringLiteral("differ")) && !message.contains(QStringLiteral("offset is"))) {
            QCOMPARE(static_cast<int>(*r.error().offset), offset);
        }
    }

    void truncatedAtEveryByte()
    {
        const std::string data = torchFile(QStringLiteral("model.data.pkl"));
        QVERIFY(data.size() > 1000);
        for (std::size_t n = 0; n < data.size(); ++n) {
            Arena a;
            auto r = run(a, data.substr(0, n));
            QVERIFY2(!r.ok(), qPrintable(QStringLiteral("prefix %1 parsed").arg(n)));
            QVERIFY2(r.error().code == ckpt::ErrorCode::Truncated,
                     qPrintable(QStringLiteral("prefix %1: %2").arg(n).arg(QString::fromStdString(r.error().message))));
        }
        Arena a;
        QVERIFY(run(a, data).ok());
    }

    void deepNesting()
    {
        constexpr int kDepth = 100000;
        {  // lists in lists through APPEND
            Arena a;
            auto r = run(a, std::string(kDepth, ']') + std::string(kDepth - 1, 'a') + ".");
            QVERIFY(r.ok());
            ValueId v = r->root;
            int depth = 1;
            while (!a[v].items.empty()) {
                v = a[v].items[0];
                ++depth;
            }
            QCOMPARE(depth, kDepth);
            QCOMPARE(shortRepr(a, r->root, 40).size() <= 40, true);
            QVERIFY(!keyText(a, r->root).empty());
        }
        {  // MARK/TUPLE
            Arena a;
            auto r = run(a, std::string(kDepth, '(') + std::string(kDepth, 't') + ".");
            QVERIFY(r.ok());
            QVERIFY(shortRepr(a, r->root).size() <= 80);
        }
        {  // unbalanced: marks never closed
            Arena a;
            auto r = run(a, std::string(kDepth, '(') + ".");
            QVERIFY(!r.ok());
        }
    }

    void farMemoIndex()
    {
        Arena a;
        auto r = run(a, "]r\xf0\xff\xff\xffj\xf0\xff\xff\xff\x94h\x01\x86.");
        QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
        const Value& t = a[r->root];
        QCOMPARE(t.items[0], t.items[1]);  // MEMOIZE took key len(memo) == 1
    }

    void sharedScalars()
    {
        // CPython's small ints, None and the bools are single objects: so are ckptscope's, which
        // keeps a state dict's offsets, sizes and flags from filling the arena.
        Arena a;
        auto r = run(a, "(K\x04K\x04NN\x88\x88M\x01\x01M\x01\x01t.");
        QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
        const auto& items = a[r->root].items;
        QCOMPARE(items.size(), std::size_t{8});
        QVERIFY(items[0] == items[1] && items[2] == items[3] && items[4] == items[5]);
        QVERIFY(!(items[6] == items[7]));  // 257 is past the shared range
        QCOMPARE(shortRepr(a, r->root), std::string("(4, 4, None, None, True, True, 257, 257)"));
    }

    void dupBomb()
    {
        // a list appended to itself 500 000 times, and a tuple DAG whose tree size is 2^2000
        Arena a;
        std::string d = std::string("]q\x00(", 4);
        for (int n = 0; n < 500000; ++n) {
            d += std::string("h\x00", 2);
        }
        d += "e0K\x01";
        for (int n = 0; n < 2000; ++n) {
            d += "2\x86";
        }
        d += ".";
        auto r = run(a, d);
        QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
        QVERIFY(shortRepr(a, r->root, 80).size() <= 80);
        QVERIFY(a.size() < 10000);
        UnpickleOptions small;
        small.budget = ckpt::MemoryBudget{.pickleBytes = 0, .base = 4096};
        Arena b;
        // (200 Nones would not do: None is made once and shared, as small ints and bools are)
        auto limited = run(b, "(" + std::string(200, ']') + "l.", small);
        QVERIFY(!limited.ok());
        QCOMPARE(limited.error().code, ckpt::ErrorCode::Limit);
    }

    // The rewrites ask nestingDepth before recursing: it must count a deep chain exactly, stop at
    // its limit on a hostile one without recursing, and end on a list that holds itself.
    void nestingDepthIsIterativeAndBounded()
    {
        Arena a;
        auto shallow = run(a, "]]]aa.");  // [[[]]]
        QVERIFY2(shallow.ok(), shallow.ok() ? "" : shallow.error().describe().c_str());
        QCOMPARE(nestingDepth(a, shallow->root, 1000), 2U);
        Arena deep;
        auto nested = run(deep, std::string(200000, ']') + std::string(199999, 'a') + ".");
        QVERIFY2(nested.ok(), nested.ok() ? "" : nested.error().describe().c_str());
        QCOMPARE(nestingDepth(deep, nested->root, 1000), 1001U);
        QCOMPARE(nestingDepth(deep, nested->root, 500000), 199999U);
        Arena self;
        auto cyclic = run(self, std::string("]q\x00h\x00"
                                            "a.",
                                            7));  // l = []; l.append(l)
        QVERIFY2(cyclic.ok(), cyclic.ok() ? "" : cyclic.error().describe().c_str());
        QCOMPARE(nestingDepth(self, cyclic->root, 1000), 0U);
    }

    void persistentIdsKeptWhenUnknown()
    {
        Arena a;
        // zip pid with an unknown class, a tar-era string pid, and a module pid outside legacy mode
        auto r = run(a, "("
                        "(" +
                            binunicode("storage") + "cfoo\nBar\n" + binunicode("0") + binunicode("cpu") + "K\x01tQ" +
                            binunicode("key") + "Q" + "(" + binunicode("module") + "cm\nC\nNNtQ" + "t.");
        QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
        for (ValueId item : a[r->root].items) {
            QCOMPARE(a[item].kind, Kind::PersistentId);
        }
        QVERIFY(!r->warnings.empty());
        // conflicting declarations of one key are flagged
        Arena b;
        auto c = run(b, "("
                        "(" +
                            binunicode("storage") + "ctorch\nFloatStorage\n" + binunicode("0") + binunicode("cpu") +
                            "K\x04tQ" + "(" + binunicode("storage") + "ctorch\nHalfStorage\n" + binunicode("0") +
                            binunicode("cpu") + "K\x04tQ" + "t.");
        QVERIFY(c.ok());
        QCOMPARE(b.storages.size(), std::size_t{1});
        QVERIFY(b.storages[0].conflicting);
    }

    void legacyTensorClassBuild()
    {
        Arena a;
        auto r = run(a, "\x80\x02"
                        "ctorch\nFloatTensor\n)\x81("
                        "(" +
                            binunicode("storage") + "ctorch\nFloatStorage\n" + binunicode("k") + binunicode("cuda:1") +
                            "K\x06tQ" + std::string("K\x00K\x02K\x03\x86K\x03K\x01\x86tb.", 16));
        QVERIFY2(r.ok(), r.ok() ? "" : r.error().describe().c_str());
        QCOMPARE(a[r->root].kind, Kind::Tensor);
        const TensorInfo& t = tensorOf(a, r->root);
        QCOMPARE(t.shape, (std::vector<std::int64_t>{2, 3}));
        QCOMPARE(t.dtype, ckpt::DType::Float32);
        QCOMPARE(shortRepr(a, r->root), std::string("tensor(float32, [2, 3], cuda:1)"));
    }

    void globalsMapped()
    {
        Arena a;
        auto r = run(a, "(c__builtin__\nlong\nccopy_reg\n_reconstructor\nctorch.tensor\n_rebuild_from_type_v2\n"
                        "ctorch\nbfloat16\nctorch\ncomplex\nt.");
        QVERIFY(r.ok());
        QCOMPARE(shortRepr(a, r->root, 200), std::string("(builtins.int, copyreg._reconstructor, "
                                                         "torch._tensor._rebuild_from_type_v2, torch.bfloat16, "
                                                         "torch.complex)"));
        // protocol 3+ pickles are not mapped (as in CPython)
        r = run(a, "\x80\x03"
                   "c__builtin__\nlong\n.");
        QCOMPARE(shortRepr(a, r->root), std::string("__builtin__.long"));
    }

    // The target is "well under 100 ms" at -O2. Process CPU time of warm runs is measured: the
    // shared build machine runs many jobs (wall time is noise) and its VM makes first-touch page
    // faults ~50x dearer than on bare metal, which the heap reuse of the later runs takes out.
    void performance40kStateDict()
    {
#if defined(__GLIBC__)
        mallopt(M_MMAP_THRESHOLD, 1 << 30);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
        const std::string data = torchFile(QStringLiteral("bigsd.data.pkl"));
        QVERIFY(data.size() > 1'000'000);
        double best = 1e9;
        double bestWall = 1e9;
        for (int n = 0; n < 4; ++n) {
            Arena a;
            QElapsedTimer t;
            t.start();
            const std::clock_t c0 = std::clock();
            auto r = run(a, data);
            const double cpu = static_cast<double>(std::clock() - c0) * 1000.0 / CLOCKS_PER_SEC;
            if (n > 0) {
                best = std::min(best, cpu);
                bestWall = std::min(bestWall, static_cast<double>(t.nsecsElapsed()) / 1e6);
            }
            QVERIFY(r.ok());
            QCOMPARE(a.storages.size(), std::size_t{40000});
            QCOMPARE(a[r->root].items.size(), std::size_t{80000});
        }
        qInfo("40 000-key state dict (%zu bytes): %.1f ms CPU, %.1f ms wall", data.size(), best, bestWall);
#if defined(__SANITIZE_ADDRESS__) || !CKPTSCOPE_LIBS_OPTIMIZED
        QSKIP("timing is only meaningful in an optimised build without sanitizers");
#else
        // Timings belong in bench/; this bound only catches a quadratic regression on a loaded machine.
        QVERIFY2(best < 500.0, qPrintable(QStringLiteral("%1 ms CPU").arg(best)));
#endif
    }
};

QTEST_GUILESS_MAIN(TestUnpickler)
#include "tst_unpickler.moc"
