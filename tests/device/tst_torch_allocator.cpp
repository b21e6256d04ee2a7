// torch's caching-allocator arithmetic (c10/cuda/CUDACachingAllocator.cpp, default settings), as
// the test-load predicts torch.load(map_location='cuda:N')'s peak with it: rounding, the two pools,
// segment sizes and when a block is split.
#include "device/torch_allocator.h"

#include <QTest>

using ckpt::device::torchLoadPeak;

namespace {
constexpr std::uint64_t kMiB = 1ULL << 20;
}

class TestTorchAllocator : public QObject {
    Q_OBJECT
private Q_SLOTS:
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
};

QTEST_GUILESS_MAIN(TestTorchAllocator)
#include "tst_torch_allocator.moc"
