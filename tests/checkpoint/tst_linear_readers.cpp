// Issue 16: inputs that made a reader quadratic must be read in linear time. Each file is written
// by its generator under tests/hostile/gen/ and opened in-process; the bound is loose (10 s, for a
// loaded 2-core CI machine) but the quadratic readers took 40 s and more on these files.
#include "archive/zip.h"
#include "checkpoint/checkpoint.h"
#include "time_bound.h"

#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

using namespace ckpt;

namespace {

const qint64 kBoundMs = ckpt::test::timeBoundMs(10000);

float floatAt(const Checkpoint& c, const StorageEntry& s)
{
    float v = -1;
    if (s.present && s.fileOffset + sizeof v <= c.bytes.size()) {
        std::memcpy(&v, c.bytes.data() + s.fileOffset, sizeof v);
    }
    return v;
}

}  // namespace

class TestLinearReaders : public QObject {
    Q_OBJECT

private:
    QTemporaryDir dir_;

    // Runs tests/hostile/gen/<script> into the temporary directory; the path of the file it wrote.
    QString generate(const char* script, const char* file)
    {
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start(QStringLiteral(CKPTSCOPE_PYTHON),
                {QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/hostile/gen/") + QLatin1String(script), dir_.path()});
        const bool finished = p.waitForFinished(300000);
        const QString output = QString::fromUtf8(p.readAll());
        if (!finished || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
            qWarning("%s failed: %s", script, qPrintable(output));
            return {};
        }
        return dir_.filePath(QLatin1String(file));
    }

    struct Opened {
        CheckpointPtr ck;
        qint64 ms = 0;
        QByteArray error;
    };
    static Opened openTimed(const QString& path)
    {
        QElapsedTimer timer;
        timer.start();
        auto ck = openCheckpoint(path.toStdString());
        Opened o;
        o.ms = timer.elapsed();
        qInfo("%s opened in %lld ms", qPrintable(path.section(QLatin1Char('/'), -1)), static_cast<long long>(o.ms));
        if (ck) {
            o.ck = *ck;
        } else {
            o.error = QByteArray::fromStdString(ck.error().describe());
        }
        return o;
    }
    static QByteArray tooSlow(qint64 ms)
    {
        return "took " + QByteArray::number(ms) + " ms, more than the " + QByteArray::number(kBoundMs) +
               " ms bound: quadratic again?";
    }

private Q_SLOTS:
    void initTestCase() { QVERIFY(dir_.isValid()); }

    // The folded index keeps the linear scan's answers: an exact name first, else the first
    // record that matches ignoring ASCII case.
    void caseInsensitiveLookupKeepsItsRules()
    {
        QFile f(dir_.filePath(QStringLiteral("case.zip")));
        QVERIFY(f.open(QIODevice::ReadWrite));
        archive::ZipWriter w(f.handle());
        for (const char* name : {"a/data.pkl", "a/DATA/0", "a/Data/0", "a/DATA/1", "a/data/1", "a/dAtA/Ä"}) {
            QVERIFY(w.addRecord(name, Bytes(reinterpret_cast<const std::byte*>(name), std::strlen(name))));
        }
        QVERIFY(w.finish());
        f.close();
        auto m = MappedFile::open(f.fileName().toStdString());
        QVERIFY(m);
        auto z = archive::ZipReader::parse((*m)->bytes());
        QVERIFY(z);
        auto nameOf = [&](std::string_view rel) {
            const archive::ZipRecord* r = z->find(rel);
            return r == nullptr ? std::string("-") : r->name;
        };
        QCOMPARE(nameOf("data/0"), std::string("a/DATA/0"));  // first of two case-insensitive matches
        QCOMPARE(nameOf("Data/0"), std::string("a/Data/0"));  // exact beats an earlier folded match
        QCOMPARE(nameOf("data/1"), std::string("a/data/1"));
        QCOMPARE(nameOf("DATA/1"), std::string("a/DATA/1"));
        QCOMPARE(nameOf("DaTa.PKL"), std::string("a/data.pkl"));
        QCOMPARE(nameOf("data/Ä"), std::string("a/dAtA/Ä"));  // only ASCII letters fold
        QCOMPARE(nameOf("data/ä"), std::string("-"));
        QCOMPARE(nameOf("data/2"), std::string("-"));
    }

    // 120k storages whose records differ from their names in case: every lookup is the
    // case-insensitive fallback.
    void upperCaseZipRecords()
    {
        const QString path = generate("big_upper_zip.py", "upper.pt");
        QVERIFY(!path.isEmpty());
        const Opened o = openTimed(path);
        QVERIFY2(o.ck, o.error.constData());
        QVERIFY2(o.ms <= kBoundMs, tooSlow(o.ms).constData());
        const Checkpoint& c = *o.ck;
        QCOMPARE(c.format, Format::TorchZip);
        QCOMPARE(c.storages.size(), std::size_t{120000});
        QCOMPARE(c.tensors.size(), std::size_t{0});
        QCOMPARE(c.nodes[kRootNode].kind, NodeKind::List);
        QCOMPARE(c.nodes[kRootNode].childCount, 120000U);
        for (std::uint32_t i : {0U, 57U, 119999U}) {
            const StorageEntry& s = c.storages[StorageIndex{i}];
            QCOMPARE(s.key, std::to_string(i));
            QCOMPARE(s.record, "a/DATA/" + std::to_string(i));
            QVERIFY(s.present);
            QCOMPARE(s.nbytes, std::uint64_t{4});
        }
    }

    void manySafetensors()
    {
        const QString path = generate("many_safetensors.py", "many.safetensors");
        QVERIFY(!path.isEmpty());
        const Opened o = openTimed(path);
        QVERIFY2(o.ck, o.error.constData());
        QVERIFY2(o.ms <= kBoundMs, tooSlow(o.ms).constData());
        const Checkpoint& c = *o.ck;
        QCOMPARE(c.format, Format::Safetensors);
        QCOMPARE(c.tensors.size(), std::size_t{200000});
        QCOMPARE(c.storages.size(), std::size_t{200000});
        QCOMPARE(c.safetensorsMetadata.size(), std::size_t{1});
        QCOMPARE(c.safetensorsMetadata[0].first, std::string("format"));
        for (std::uint32_t i : {0U, 123456U, 199999U}) {
            const TensorEntry& t = c.tensors[TensorIndex{i}];
            QCOMPARE(t.path, "layers." + std::to_string(i) + ".weight");
            QCOMPARE(t.dtype, DType::Float32);
            QCOMPARE(t.shape, std::vector<std::int64_t>{1});
            QCOMPARE(floatAt(c, c.storages.at(t.storage)), static_cast<float>(i));
        }
    }

    // torch.save(_use_new_zipfile_serialization=False) of 180k one-element tensors.
    void manyLegacyStorages()
    {
        const QString path = generate("many_legacy_storages.py", "legacy_storages.pt");
        QVERIFY(!path.isEmpty());
        const Opened o = openTimed(path);
        QVERIFY2(o.ck, o.error.constData());
        QVERIFY2(o.ms <= kBoundMs, tooSlow(o.ms).constData());
        const Checkpoint& c = *o.ck;
        QCOMPARE(c.format, Format::TorchLegacy);
        QCOMPARE(c.tensors.size(), std::size_t{180000});
        QCOMPARE(c.storages.size(), std::size_t{180000});
        for (std::uint32_t i : {0U, 98765U, 179999U}) {
            const TensorEntry& t = c.tensors[TensorIndex{i}];
            QCOMPARE(t.path, "t" + std::to_string(i));
            QCOMPARE(t.dtype, DType::Float32);
            QCOMPARE(t.shape, std::vector<std::int64_t>{1});
            // The bytes found for the tensor's storage key are its own: float(i).
            QCOMPARE(floatAt(c, c.storages.at(t.storage)), static_cast<float>(i));
        }
    }

    // Deflated records (a re-zipped checkpoint): reading every storage must not parse the
    // archive's directory again for each one.
    void deflatedRecordsReadOnce()
    {
        const QString path = generate("many_deflated_records.py", "deflated.pt");
        QVERIFY(!path.isEmpty());
        const Opened o = openTimed(path);
        QVERIFY2(o.ck, o.error.constData());
        const Checkpoint& c = *o.ck;
        QCOMPARE(c.storages.size(), std::size_t{30000});
        QElapsedTimer timer;
        timer.start();
        std::vector<std::byte> scratch;
        for (std::uint32_t i = 0; i < c.storages.size(); ++i) {
            QVERIFY(c.storages[StorageIndex{i}].compressed);
            auto bytes = c.storageData(StorageIndex{i}, scratch);
            QVERIFY2(bytes, bytes ? "" : bytes.error().describe().c_str());
            QCOMPARE(bytes->size(), std::size_t{4});
            float v = -1;
            std::memcpy(&v, bytes->data(), sizeof v);
            QCOMPARE(v, static_cast<float>(i));
        }
        const qint64 ms = timer.elapsed();
        qInfo("30000 deflated storages read in %lld ms", static_cast<long long>(ms));
        QVERIFY2(ms <= kBoundMs, tooSlow(ms).constData());
    }
};

QTEST_GUILESS_MAIN(TestLinearReaders)
#include "tst_linear_readers.moc"
