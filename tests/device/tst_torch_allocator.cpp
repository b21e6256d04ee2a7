// torch's caching-allocator arithmetic (c10/cuda/CUDACachingAllocator.cpp), as the test-load predicts
// torch.load(map_location='cuda:N')'s peak with it: rounding, the two pools, segment sizes and when a
// block is split; and its settings parsed as PyTorch's own parser parses them.
#include "device/torch_allocator.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

using ckpt::device::TorchAllocatorConfig;
using ckpt::device::torchLoadPeak;

namespace {
constexpr std::uint64_t kMiB = 1ULL << 20;
}

class TestTorchAllocator : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // The torch2 run reads a fresh oracle; without the root its generator did not run: "not run".
    void initTestCase()
    {
        const QByteArray fresh = qgetenv("CKPTSCOPE_ALLOC_CONF_ORACLE");
        if (!fresh.isEmpty() && !QFile::exists(QString::fromLocal8Bit(fresh))) {
            QSKIP("no fresh allocator-config oracle (no PyTorch 2.x root): not run");
        }
    }

    void smallRequestsShareTwoMiBSegments()
    {
        // 4 bytes round to 512; a 2 MiB segment holds 4096 such blocks, the 4097th opens another.
        auto p = torchLoadPeak({4});
        QCOMPARE(p.requestedBytes, 4ULL);
        QCOMPARE(p.allocatedBytes, 512ULL);
        QCOMPARE(p.reservedBytes, 2 * kMiB);
        QCOMPARE(p.segments, 1ULL);
        p = torchLoadPeak(std::vector<std::uint64_t>(4097, 300));
        QCOMPARE(p.segments, 2ULL);
        QCOMPARE(p.reservedBytes, 4 * kMiB);
        // Exactly 1 MiB is still small: two of them fill one segment.
        p = torchLoadPeak({kMiB, kMiB});
        QCOMPARE(p.reservedBytes, 2 * kMiB);
    }

    void midSizedRequestsCarveTwentyMiBSegments()
    {
        // Just over 1 MiB is large: a 20 MiB segment, split since more than 1 MiB remains.
        auto p = torchLoadPeak({kMiB + 1});
        QCOMPARE(p.reservedBytes, 20 * kMiB);
        QCOMPARE(p.allocatedBytes, kMiB + 512);
        // Four 5 MiB storages: 20 -> 15 -> 10 -> 5 remain; the last takes the 5 MiB block whole
        // (nothing would remain to split off), the fifth needs a new segment.
        p = torchLoadPeak({5 * kMiB, 5 * kMiB, 5 * kMiB, 5 * kMiB});
        QCOMPARE(p.reservedBytes, 20 * kMiB);
        QCOMPARE(p.segments, 1ULL);
        p = torchLoadPeak({5 * kMiB, 5 * kMiB, 5 * kMiB, 5 * kMiB, 5 * kMiB});
        QCOMPARE(p.reservedBytes, 40 * kMiB);
        // Two 9.5 MiB storages share one segment: the 10.5 MiB split off the first holds the second,
        // and the 1 MiB then left is not more than 1 MiB, so the second gets its block whole.
        p = torchLoadPeak({9 * kMiB + kMiB / 2, 9 * kMiB + kMiB / 2});
        QCOMPARE(p.reservedBytes, 20 * kMiB);
        QCOMPARE(p.allocatedBytes, 9 * kMiB + kMiB / 2 + 10 * kMiB + kMiB / 2);
    }

    void largeRequestsRoundToTwoMiB()
    {
        auto p = torchLoadPeak({10 * kMiB});
        QCOMPARE(p.reservedBytes, 10 * kMiB);
        p = torchLoadPeak({10 * kMiB + 1});
        QCOMPARE(p.reservedBytes, 12 * kMiB);
        QCOMPARE(p.allocatedBytes, 10 * kMiB + 512);  // almost 2 MiB remain: split off
        // A block at most 1 MiB bigger than the request is handed out whole.
        p = torchLoadPeak({11 * kMiB + 1});
        QCOMPARE(p.reservedBytes, 12 * kMiB);
        QCOMPARE(p.allocatedBytes, 12 * kMiB);
        p = torchLoadPeak({(1ULL << 30) + 3});
        QCOMPARE(p.reservedBytes, (1ULL << 30) + 2 * kMiB);
    }

    void emptyStoragesTakeNothing()
    {
        auto p = torchLoadPeak({0, 0});
        QCOMPARE(p.reservedBytes, 0ULL);
        QCOMPARE(p.segments, 0ULL);
    }

    void poolsDoNotMix()
    {
        // A small request never takes from a large segment's remainder, nor the reverse.
        auto p = torchLoadPeak({5 * kMiB, 1000});
        QCOMPARE(p.reservedBytes, 22 * kMiB);
        QCOMPARE(p.segments, 2ULL);
    }

    // What PyTorch 2.11 reserved and allocated on an H100 (bench/testload/alloc_probe.py, kept in
    // torch_allocator_h100.json) for 400 mixed, 1000 small and 120 large storages, under five
    // allocator settings: the model must give the same bytes, not merely close ones.
    void matchesTorchOnAnH100_data()
    {
        QTest::addColumn<QString>("conf");
        QTest::addColumn<QString>("sizes");
        for (const char* conf : {"default", "expandable_segments:True", "max_split_size_mb:20",
                                 "roundup_power2_divisions:4", "expandable_segments:True,roundup_power2_divisions:4"}) {
            for (const char* sizes : {"mixed", "small", "large"}) {
                QTest::addRow("%s %s", conf, sizes) << QString::fromLatin1(conf) << QString::fromLatin1(sizes);
            }
        }
    }
    void matchesTorchOnAnH100()
    {
        QFETCH(QString, conf);
        QFETCH(QString, sizes);
        QFile f(QStringLiteral(CKPTSCOPE_ALLOCATOR_FIXTURE));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonObject doc = QJsonDocument::fromJson(f.readAll()).object();
        std::vector<std::uint64_t> bytes;
        for (const auto& v : doc[QStringLiteral("sizes")].toObject()[sizes].toArray()) {
            bytes.push_back(static_cast<std::uint64_t>(v.toInteger()));
        }
        const QJsonObject measured = doc[QStringLiteral("measured")].toObject()[conf].toObject()[sizes].toObject();
        auto config =
            TorchAllocatorConfig::parse(conf == QStringLiteral("default") ? std::string() : conf.toStdString());
        QVERIFY(config);
        const auto p = torchLoadPeak(bytes, *config);
        QCOMPARE(p.reservedBytes, static_cast<std::uint64_t>(measured[QStringLiteral("reserved")].toInteger()));
        QCOMPARE(p.allocatedBytes, static_cast<std::uint64_t>(measured[QStringLiteral("allocated")].toInteger()));
    }

    void expandableSegmentsGrowByPages()
    {
        auto c = TorchAllocatorConfig::parse("expandable_segments:True");
        QVERIFY(c);
        // One 5 MiB storage: the default takes a 20 MiB segment; so does the expandable large pool's
        // first page. Five of them: 40 MiB by default (four fit one segment), 40 MiB of pages too.
        QCOMPARE(torchLoadPeak({5 * kMiB}, *c).reservedBytes, 20 * kMiB);
        // 30 MiB and 11 MiB: 30 + 12 MiB segments by default, 41 MiB of requests in three pages.
        QCOMPARE(torchLoadPeak({30 * kMiB, 11 * kMiB}).reservedBytes, 42 * kMiB);
        QCOMPARE(torchLoadPeak({30 * kMiB, 11 * kMiB}, *c).reservedBytes, 60 * kMiB);
        // Small storages share 2 MiB pages across what would be separate segments.
        QCOMPARE(torchLoadPeak(std::vector<std::uint64_t>(3, kMiB), *c).reservedBytes, 4 * kMiB);
    }

    void parsesWhatTorchAccepts()
    {
        auto c = TorchAllocatorConfig::parse("max_split_size_mb:25,roundup_power2_divisions:[64:2,>:8],"
                                             "garbage_collection_threshold:0.6");
        QVERIFY2(c, c ? "" : c.error().message.c_str());
        QCOMPARE(c->maxSplitSize, 25 * kMiB);
        // Up to 64 MB: 2 divisions (the first interval fills everything below it); beyond: 8.
        QCOMPARE(c->roundupDivisions[0], 2ULL);
        QCOMPARE(c->roundupDivisions[6], 2ULL);
        QCOMPARE(c->roundupDivisions[7], 8ULL);
        QCOMPARE(c->roundupDivisions[15], 8ULL);
        QCOMPARE(c->ignored, std::vector<std::string>{"garbage_collection_threshold:0.6"});
        QVERIFY(!TorchAllocatorConfig::parse("expandable_segments:yes"));
        QVERIFY(!TorchAllocatorConfig::parse("roundup_power2_divisions:3"));
        QVERIFY(!TorchAllocatorConfig::parse("max_split_size_mb"));
        c = TorchAllocatorConfig::parse("backend:cudaMallocAsync");
        QVERIFY(c);
        QVERIFY2(c->describe().find("not modelled") != std::string::npos, c->describe().c_str());
        // A key torch does not know is reported, with what a CUDA build of torch does with it.
        c = TorchAllocatorConfig::parse("expandable_segment:True");
        QVERIFY(c);
        QCOMPARE(c->unknown, std::vector<std::string>{"expandable_segment:True"});
        QVERIFY2(c->describe().find("Unrecognized key") != std::string::npos, c->describe().c_str());
        // c10's words when it refuses.
        auto bad = TorchAllocatorConfig::parse("max_split_size_mb:19");
        QVERIFY(!bad);
        QVERIFY2(bad.error().message.find("max_split_size_mb too small, must be >= 20") != std::string::npos,
                 bad.error().message.c_str());
    }

    // Every string of tests/device/torch_alloc_conf_2.14.json, as PyTorch 2.14's own parser (c10's
    // AcceleratorAllocatorConfig, read back by torch_alloc_conf_oracle.py) took it: refused where it
    // refused, and the same limits, divisions and expandable flag where it did not.
    // CKPTSCOPE_ALLOC_CONF_ORACLE names a fresh oracle file instead (ctest tst_torch_allocator_torch2).
    void parsesAsTorchDoes_data()
    {
        QTest::addColumn<QJsonObject>("answer");
        const QJsonObject doc = oracle();
        QVERIFY(!doc.isEmpty());
        for (const auto& v : doc[QStringLiteral("cases")].toArray()) {
            const QJsonObject o = v.toObject();
            QTest::addRow("'%s'", qPrintable(o[QStringLiteral("conf")].toString())) << o;
        }
    }
    void parsesAsTorchDoes()
    {
        QFETCH(QJsonObject, answer);
        const auto c = TorchAllocatorConfig::parse(answer[QStringLiteral("conf")].toString().toStdString());
        const QString torchError = answer[QStringLiteral("error")].toString();
        QVERIFY2(
            static_cast<bool>(c) == torchError.isEmpty(),
            qPrintable(c ? QStringLiteral("torch refused it: ") + torchError
                         : QStringLiteral("torch took it; the model: ") + QString::fromStdString(c.error().message)));
        if (!c) {
            return;
        }
        auto bytes = [&](const char* key) { return static_cast<std::uint64_t>(answer[QLatin1String(key)].toDouble()); };
        // JSON numbers are doubles: UINT64_MAX arrives rounded, compare it as such.
        QCOMPARE(static_cast<double>(c->maxSplitSize), answer[QStringLiteral("max_split_size")].toDouble());
        QCOMPARE(c->largeSegmentSize, bytes("large_segment_size"));
        QCOMPARE(c->maxNonSplitRounding, bytes("max_non_split_rounding_size"));
        QCOMPARE(c->expandableSegments, answer[QStringLiteral("expandable_segments")].toBool());
        const QJsonArray divisions = answer[QStringLiteral("roundup_power2_divisions")].toArray();
        QCOMPARE(divisions.size(), 16);
        for (int i = 0; i < 16; ++i) {
            QCOMPARE(c->roundupDivisions[static_cast<std::size_t>(i)],
                     static_cast<std::uint64_t>(divisions[i].toInteger()));
        }
    }

    // large_segment_size_mb is the segment of a 1-10 MiB request and the large pool's page with
    // expandable segments: it changes what a load reserves.
    void largeSegmentSizeChangesTheReservation()
    {
        auto c = TorchAllocatorConfig::parse("large_segment_size_mb: 40");
        QVERIFY(c);
        QCOMPARE(torchLoadPeak({5 * kMiB}, *c).reservedBytes, 40 * kMiB);
        QCOMPARE(torchLoadPeak({5 * kMiB}).reservedBytes, 20 * kMiB);
        // Nine 5 MiB storages: eight fill a 40 MiB segment, the ninth opens another; by default four
        // fill each 20 MiB one.
        QCOMPARE(torchLoadPeak(std::vector<std::uint64_t>(9, 5 * kMiB), *c).reservedBytes, 80 * kMiB);
        QCOMPARE(torchLoadPeak(std::vector<std::uint64_t>(9, 5 * kMiB)).reservedBytes, 60 * kMiB);
        c = TorchAllocatorConfig::parse("large_segment_size_mb:64,expandable_segments:True");
        QVERIFY(c);
        QCOMPARE(torchLoadPeak({30 * kMiB, 11 * kMiB}, *c).reservedBytes, 64 * kMiB);
        QVERIFY2(c->describe().find("does not change") == std::string::npos, c->describe().c_str());
        c = TorchAllocatorConfig::parse("max_non_split_rounding_mb:64");
        QVERIFY(c);
        QCOMPARE(c->maxNonSplitRounding, 64 * kMiB);
        QVERIFY2(c->describe().find("does not change") == std::string::npos, c->describe().c_str());
    }

    // Which variable torch reads, as PyTorch 2.14 read them in the oracle's fresh interpreters:
    // PYTORCH_CUDA_ALLOC_CONF first (even empty), then PYTORCH_HIP_ALLOC_CONF, then PYTORCH_ALLOC_CONF.
    void readsTheEnvironmentAsTorchDoes()
    {
        const QJsonObject doc = oracle();
        const QJsonArray cases = doc[QStringLiteral("environments")].toArray();
        QVERIFY(!cases.isEmpty());
        const char* names[] = {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};
        for (const auto& v : cases) {
            const QJsonObject env = v.toObject()[QStringLiteral("environment")].toObject();
            for (const char* name : names) {
                if (env.contains(QLatin1String(name))) {
                    qputenv(name, env[QLatin1String(name)].toString().toUtf8());
                } else {
                    qunsetenv(name);
                }
            }
            auto c = TorchAllocatorConfig::fromEnvironment();
            QVERIFY(c);
            QCOMPARE(static_cast<double>(c->maxSplitSize), v.toObject()[QStringLiteral("max_split_size")].toDouble());
        }
        qputenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments: True");
        qunsetenv("PYTORCH_ALLOC_CONF");
        auto c = TorchAllocatorConfig::fromEnvironment();
        QVERIFY(c && c->expandableSegments);
        QCOMPARE(c->source, std::string("PYTORCH_CUDA_ALLOC_CONF=expandable_segments: True"));
        qputenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:maybe");
        c = TorchAllocatorConfig::fromEnvironment();
        QVERIFY(!c);
        QVERIFY2(c.error().message.starts_with("PYTORCH_CUDA_ALLOC_CONF: "), c.error().message.c_str());
        for (const char* name : names) {
            qunsetenv(name);
        }
    }

private:
    static QJsonObject oracle()
    {
        const QByteArray fresh = qgetenv("CKPTSCOPE_ALLOC_CONF_ORACLE");
        QFile f(fresh.isEmpty() ? QStringLiteral(CKPTSCOPE_ALLOC_CONF_FIXTURE) : QString::fromLocal8Bit(fresh));
        if (!f.open(QIODevice::ReadOnly)) {
            qWarning("cannot read %s", qPrintable(f.fileName()));
            return {};
        }
        return QJsonDocument::fromJson(f.readAll()).object();
    }
};

QTEST_GUILESS_MAIN(TestTorchAllocator)
#include "tst_torch_allocator.moc"
