// sharded/set_view.h alone (ckptscope_sharded, no command line): a set opened as one checkpoint
// holds, key for key and byte for byte, what real torch.save wrote as the set's consolidated state
// dict (the generators' `<set>.expected.pt`), every storage assembled and read in place from the
// set's files: Hugging Face shards (a storage shared inside a .bin shard stays shared), ZeRO
// partitions with and without param groups as one storage, bf16 buffers cast to float32, DCP chunk
// boxes (dim-0 slabs, dim-1 boxes assembled in a buffer, a transposed chunk, a 0-d tensor, values
// besides tensors) and FSDP local shards (ShardedTensor, DTensor).
#include "checkpoint/checkpoint.h"
#include "sharded/listing.h"
#include "sharded/set_view.h"
#include "sharded/sharded.h"
#include "sharded/zero.h"

#include <QString>
#include <QTest>

#include <map>
#include <vector>

namespace {

using ckpt::Bytes;
using ckpt::Checkpoint;
using ckpt::CheckpointPtr;

// A tensor's bytes in C order, read through streamStorage (contiguous tensors only).
std::vector<std::byte> bytesOf(const Checkpoint& c, const ckpt::TensorEntry& t)
{
    std::vector<std::byte> out;
    if (!t.storage.valid() || !t.contiguous || t.numel == 0) {
        return out;
    }
    const std::uint64_t at = static_cast<std::uint64_t>(t.storageOffset) * ckpt::elementSize(t.dtype);
    auto read = c.streamStorage(t.storage, at, t.nbytes, [&](Bytes b) {
        out.insert(out.end(), b.begin(), b.end());
        return true;
    });
    if (!read) {
        qWarning("%s: %s", t.path.c_str(), read.error().message.c_str());
        out.clear();
    }
    return out;
}

CheckpointPtr opened(const std::string& path)
{
    auto c = ckpt::openCheckpoint(path);
    return c ? *c : nullptr;
}

}  // namespace

class TestSetView : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void viewHoldsTheConsolidatedStateDict_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<bool>("groups");  // ZeRO: param groups as one storage each
        const QString sharded = QStringLiteral(CKPTSCOPE_SHARDED_FIXTURE_DIR "/");
        const QString zero = QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR "/");
        QTest::newRow("HF .bin") << sharded + QStringLiteral("hf_bin") << true;
        QTest::newRow("HF safetensors") << sharded + QStringLiteral("hf_st") << true;
        QTest::newRow("HF .bin, tied in one shard") << sharded + QStringLiteral("hf_bin_tied") << true;
        QTest::newRow("ZeRO-2, 2 ranks, grouped") << sharded + QStringLiteral("zero2_complete") << true;
        QTest::newRow("ZeRO-2, 3 ranks, a storage per tensor") << sharded + QStringLiteral("zero2_w3") << false;
        QTest::newRow("ZeRO-2 bf16") << zero + QStringLiteral("zero2_bf16_w2") << true;
        QTest::newRow("ZeRO-3 bf16") << zero + QStringLiteral("zero3_bf16_w2") << false;
        const QString dcp = QStringLiteral(CKPTSCOPE_DCP_FIXTURE_DIR "/");
        const QString fsdp = QStringLiteral(CKPTSCOPE_FSDP_FIXTURE_DIR "/");
        QTest::newRow("DCP") << dcp + QStringLiteral("dcp_basic") << true;
        QTest::newRow("DCP before 2.4 (old TensorProperties)") << dcp + QStringLiteral("dcp_old") << true;
        QTest::newRow("DCP, a file per item") << dcp + QStringLiteral("dcp_per_item") << true;
        QTest::newRow("FSDP ShardedTensor ranks") << fsdp + QStringLiteral("fsdp_st") << true;
        QTest::newRow("FSDP DTensor ranks") << fsdp + QStringLiteral("fsdp_dtensor") << true;
    }
    void viewHoldsTheConsolidatedStateDict()
    {
        QFETCH(QString, set);
        QFETCH(bool, groups);
        const std::string dir = set.toStdString();
        const auto loc = ckpt::sharded::detectSet(dir);
        ckpt::Expected<CheckpointPtr> view = ckpt::makeError(ckpt::ErrorCode::Internal, "not opened");
        std::size_t files = 0;
        if (loc.kind == ckpt::sharded::SetKind::DeepSpeedZero) {
            auto z = ckpt::sharded::zero::open(loc);
            QVERIFY2(z.ok(), z ? "" : z.error().message.c_str());
            view = ckpt::sharded::viewOf(*z, groups);
            files = z->files.size();
        } else if (loc.kind == ckpt::sharded::SetKind::Dcp || loc.kind == ckpt::sharded::SetKind::FsdpRanks) {
            view = ckpt::sharded::openView(loc);
            files = view ? (*view)->setFiles.size() : 0;
            QVERIFY(files > 1);
        } else {
            auto hf = ckpt::sharded::openSet(loc);
            QVERIFY2(hf.ok(), hf ? "" : hf.error().message.c_str());
            view = ckpt::sharded::viewOf(*hf);
            files = hf->shardFiles.size();
        }
        QVERIFY2(view.ok(), view ? "" : view.error().message.c_str());
        const Checkpoint& v = **view;
        QCOMPARE(v.setFiles.size(), files);
        QVERIFY(v.file == nullptr && v.bytes.empty());
        for (const auto& s : v.storages) {
            QVERIFY(s.assembled && s.present && !s.inMapping());
        }

        const CheckpointPtr want = opened(dir + ".expected.pt");
        QVERIFY(want != nullptr);
        std::map<std::string, const ckpt::TensorEntry*> mine;
        for (const auto& t : v.tensors) {
            mine.emplace(t.path, &t);
        }
        QCOMPARE(mine.size(), want->tensors.size());
        for (const auto& w : want->tensors) {
            const auto it = mine.find(w.path);
            QVERIFY2(it != mine.end(), w.path.c_str());
            const ckpt::TensorEntry& t = *it->second;
            QCOMPARE(t.dtype, w.dtype);
            QVERIFY2(std::vector<std::int64_t>(t.shape.begin(), t.shape.end()) ==
                         std::vector<std::int64_t>(w.shape.begin(), w.shape.end()),
                     w.path.c_str());
            const auto got = bytesOf(v, t);
            QVERIFY2(got.size() == w.nbytes, w.path.c_str());  // read whole (none of these is empty)
            QVERIFY2(got == bytesOf(*want, w), w.path.c_str());
        }
        QVERIFY(v.checkUnchanged().ok());
    }

    // A range that is not whole elements of a cast storage, or past a storage's end, is an error,
    // never bytes from elsewhere.
    void badRangesAreErrors()
    {
        const auto loc = ckpt::sharded::detectSet(CKPTSCOPE_SHARDED_FIXTURE_DIR "/hf_bin");
        auto hf = ckpt::sharded::openSet(loc);
        QVERIFY(hf.ok());
        auto view = ckpt::sharded::viewOf(*hf);
        QVERIFY(view.ok());
        const Checkpoint& v = **view;
        const ckpt::StorageIndex first{0};
        const auto n = v.storages[first].nbytes;
        auto past = v.streamStorage(first, n, 1, [](Bytes) { return true; });
        QVERIFY(!past.ok());
        std::uint64_t seen = 0;
        auto whole = v.streamStorage(first, 0, n, [&](Bytes b) {
            seen += b.size();
            return true;
        });
        QVERIFY(whole.ok());
        QCOMPARE(seen, n);
        auto stopped = v.streamStorage(first, 0, n, [](Bytes) { return false; });
        QVERIFY(!stopped.ok());
    }
};

QTEST_GUILESS_MAIN(TestSetView)
#include "tst_set_view.moc"
