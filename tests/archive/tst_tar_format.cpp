// The tar-format checkpoint of PyTorch < 0.1.10: a file built member by member as torch's
// `legacy_load` reads it (tests/fixtures/gen_tar_checkpoint.py, which proves torch 1.13 reads it
// and records what it returned). ckptscope must show the same tensors, convert it into a file
// torch loads with the same values, and refuse damaged archives in one line.
#include "archive/tar.h"
#include "checkpoint/checkpoint.h"
#include "cli/cmd_convert.h"
#include "util/dtype.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <bit>
#include <cstring>
#include <sstream>

namespace {

double element(ckpt::Bytes data, ckpt::DType t, std::uint64_t index)
{
    const std::uint32_t size = ckpt::elementSize(t);
    const std::uint64_t bits = ckpt::loadLE(data, index * size, size);
    switch (t) {
    case ckpt::DType::Float32:
        return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
    case ckpt::DType::Float16:
        return ckpt::halfToDouble(static_cast<std::uint16_t>(bits));
    default:
        return std::nan("");
    }
}

QByteArray readAll(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

bool writeAll(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly) && f.write(bytes) == bytes.size();
}

}  // namespace

class TestTarFormat : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;
    QString tar_;
    QJsonObject oracle_;

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(dir_.isValid());
        tar_ = dir_.path() + QStringLiteral("/old.tar");
        const QString oracle = dir_.path() + QStringLiteral("/old.json");
        QProcess p;
        p.start(QStringLiteral(CKPTSCOPE_PYTHON),
                {QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/fixtures/gen_tar_checkpoint.py"), tar_, oracle});
        QVERIFY(p.waitForFinished(300000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        oracle_ = QJsonDocument::fromJson(readAll(oracle)).object();
        QVERIFY(!oracle_.value(QStringLiteral("tensors")).toArray().isEmpty());
    }

    void membersAreFound()
    {
        const QByteArray bytes = readAll(tar_);
        auto members = ckpt::archive::parseTar(ckpt::asBytes(std::string_view(bytes.constData(), bytes.size())));
        QVERIFY(members);
        for (const char* name : {"sys_info", "pickle", "tensors", "storages"}) {
            QVERIFY2(ckpt::archive::findMember(*members, name) != nullptr, name);
        }
    }

    // Every tensor torch.load returned: same path, dtype, shape, stride, offset and values.
    void tensorsMatchTorch()
    {
        auto c = ckpt::openCheckpoint(tar_.toStdString());
        QVERIFY2(c, c ? "" : c.error().describe().c_str());
        QCOMPARE((*c)->format, ckpt::Format::TorchTar);
        const QJsonArray want = oracle_.value(QStringLiteral("tensors")).toArray();
        QCOMPARE((*c)->tensors.size(), static_cast<std::size_t>(want.size()));
        for (const auto& w : want) {
            const QJsonObject o = w.toObject();
            const std::string path = o.value(QStringLiteral("path")).toString().toStdString();
            const auto* t = [&]() -> const ckpt::TensorEntry* {
                for (const auto& e : (*c)->tensors) {
                    if (e.path == path) {
                        return &e;
                    }
                }
                return nullptr;
            }();
            QVERIFY2(t != nullptr, path.c_str());
            QCOMPARE(QString::fromLatin1(ckpt::dtypeName(t->dtype)), o.value(QStringLiteral("dtype")).toString());
            std::vector<std::int64_t> shape;
            std::vector<std::int64_t> stride;
            for (const auto& d : o.value(QStringLiteral("shape")).toArray()) {
                shape.push_back(d.toInteger());
            }
            for (const auto& d : o.value(QStringLiteral("stride")).toArray()) {
                stride.push_back(d.toInteger());
            }
            QCOMPARE(t->shape, shape);
            QCOMPARE(t->stride, stride);
            QCOMPARE(t->storageOffset, o.value(QStringLiteral("storage_offset")).toInteger());
            QCOMPARE(t->location, std::string("cpu"));
            std::vector<std::byte> scratch;
            auto data = (*c)->storageData(t->storage, scratch);
            QVERIFY(data);
            // C-order walk over the view, as torch's .flatten() gives the values.
            const QJsonArray values = o.value(QStringLiteral("values")).toArray();
            std::vector<std::int64_t> idx(shape.size(), 0);
            for (const auto& v : values) {
                std::int64_t at = t->storageOffset;
                for (std::size_t d = 0; d < idx.size(); ++d) {
                    at += idx[d] * stride[d];
                }
                QCOMPARE(element(*data, t->dtype, static_cast<std::uint64_t>(at)), v.toDouble());
                for (std::size_t d = idx.size(); d-- > 0;) {
                    if (++idx[d] < shape[d]) {
                        break;
                    }
                    idx[d] = 0;
                }
            }
        }
        QVERIFY((*c)->find("epoch").valid());
        QVERIFY((*c)->find("name").valid());
    }

    // --single-card writes a zip that torch loads with the values torch read from the tar.
    void convertsToLoadableZip()
    {
        const QString out = dir_.path() + QStringLiteral("/new.pt");
        std::ostringstream o;
        std::ostringstream e;
        const int rc = ckpt::cli::cmdConvert({tar_.toStdString(), "--single-card", "-o", out.toStdString()}, o, e);
        QVERIFY2(rc == 0, e.str().c_str());
        QProcess p;
        p.start(QStringLiteral(CKPTSCOPE_PYTHON),
                {QStringLiteral("-c"),
                 QStringLiteral("import sys, torch\n"
                                "a = torch.load(sys.argv[1]); b = torch.load(sys.argv[2], weights_only=False)\n"
                                "def same(x, y):\n"
                                "    if isinstance(x, torch.Tensor): return torch.equal(x, y) and x.dtype == y.dtype\n"
                                "    if isinstance(x, dict): return list(x) == list(y) and all(same(x[k], y[k]) for k "
                                "in x)\n"
                                "    return x == y\n"
                                "print(same(a, b))"),
                 tar_, out});
        QVERIFY(p.waitForFinished(300000));
        QCOMPARE(p.readAllStandardOutput().trimmed(), QByteArray("True"));
    }

    void damagedArchivesAreRefused_data()
    {
        QTest::addColumn<int>("cut");        // keep this many bytes (-1: all)
        QTest::addColumn<int>("flip");       // flip a byte at this offset (-1: none)
        QTest::addColumn<QString>("words");  // in the one-line error
        QTest::newRow("truncated in a header") << 1500 << -1 << QStringLiteral("truncated");
        QTest::newRow("truncated in the storages") << 3700 << -1 << QStringLiteral("truncated");
        QTest::newRow("header checksum") << -1 << 10 << QStringLiteral("checksum");
        QTest::newRow("one header only") << 300 << -1 << QStringLiteral("truncated");
    }

    void damagedArchivesAreRefused()
    {
        QFETCH(int, cut);
        QFETCH(int, flip);
        QFETCH(QString, words);
        QByteArray bytes = readAll(tar_);
        if (cut >= 0) {
            bytes.truncate(cut);
        }
        if (flip >= 0) {
            bytes[flip] = static_cast<char>(bytes[flip] ^ 0x55);
        }
        const QString bad = dir_.path() + QStringLiteral("/bad.tar");
        QVERIFY(writeAll(bad, bytes));
        auto c = ckpt::openCheckpoint(bad.toStdString());
        QVERIFY(!c);
        QVERIFY2(QString::fromStdString(c.error().message).contains(words), c.error().message.c_str());
    }

    // The same tar less one member names that member alone, not all three.
    void missingMemberIsNamed()
    {
        const QString bad = dir_.path() + QStringLiteral("/no_tensors.tar");
        QProcess p;
        p.start(QStringLiteral(CKPTSCOPE_PYTHON),
                {QStringLiteral("-c"),
                 QStringLiteral("import sys, tarfile\n"
                                "with tarfile.open(sys.argv[1]) as src, tarfile.open(sys.argv[2], 'w') as dst:\n"
                                "    for m in src.getmembers():\n"
                                "        if m.name != 'tensors':\n"
                                "            dst.addfile(m, src.extractfile(m))\n"),
                 tar_, bad});
        QVERIFY(p.waitForFinished(60000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        auto c = ckpt::openCheckpoint(bad.toStdString());
        QVERIFY(!c);
        const QString message = QString::fromStdString(c.error().message);
        QVERIFY2(message.contains(QStringLiteral("lacks its member 'tensors'")), qPrintable(message));
        QVERIFY2(!message.contains(QStringLiteral("'storages'")), qPrintable(message));
    }
};

QTEST_GUILESS_MAIN(TestTarFormat)
#include "tst_tar_format.moc"
