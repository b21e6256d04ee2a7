// sharded/set_view.h alone (ckptscope_sharded, no command line): a set opened as one checkpoint
// holds, key for key and byte for byte, what real torch.save wrote as the set's consolidated state
// dict (the generators' `<set>.expected.pt`), every storage assembled and read in place from the
// set's files: Hugging Face shards (a storage shared inside a .bin shard stays shared), ZeRO
// partitions with and without param groups as one storage, bf16 buffers cast to float32, DCP chunk
// boxes (dim-0 slabs, dim-1 boxes assembled in a buffer, a transposed chunk, a 0-d tensor, values
// besides tensors) and FSDP local shards (ShardedTensor, DTensor).
#include "checkpoint/checkpoint.h"
#include "sharded/formats.h"
#include "sharded/listing.h"
#include "sharded/set_view.h"
#include "sharded/sharded.h"
#include "sharded/zero.h"
#include "transform/transform.h"
#include "write/write.h"

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QString>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <stop_token>
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

// A control that counts the member files told in `seen` and asks `stop` for a stop while the
// second is told (the window's Cancel pressed during a read).
ckpt::sharded::OpenControl stopAtSecondFile(std::stop_source& stop, std::size_t& seen)
{
    ckpt::sharded::OpenControl control;
    control.stop = stop.get_token();
    control.progress = [&stop, &seen](std::size_t, std::size_t, const std::string&) {
        if (++seen == 2) {
            stop.request_stop();
        }
    };
    return control;
}

// The code of the error `e` holds; nothing when it holds a value.
template <class T> std::optional<ckpt::ErrorCode> outcome(const ckpt::Expected<T>& e)
{
    return e ? std::nullopt : std::optional(e.error().code);
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
        // Every file of the set as a path, what a write refuses as its target.
        QCOMPARE(v.setMembers, ckpt::sharded::memberFiles(loc));
        QVERIFY(v.setMembers.size() >= files);
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

    // readSet reads a set once for both its listing and its view; an incomplete set keeps its
    // listing, says why it is not whole, and its listing view refuses every read with that reason.
    void readSetListsAndOpensOnce()
    {
        const auto whole = ckpt::sharded::readSet(ckpt::sharded::detectSet(CKPTSCOPE_SHARDED_FIXTURE_DIR "/hf_st"));
        QVERIFY2(whole.ok(), whole ? "" : whole.error().message.c_str());
        QVERIFY(whole->view != nullptr && !whole->notWhole);
        QCOMPARE(whole->view->tensors.size(), whole->listing.rows.size());

        const auto loc = ckpt::sharded::detectSet(CKPTSCOPE_SHARDED_FIXTURE_DIR "/hf_missing_shard");
        const auto part = ckpt::sharded::readSet(loc);
        QVERIFY2(part.ok(), part ? "" : part.error().message.c_str());
        QVERIFY(part->view == nullptr && part->notWhole.has_value());
        QVERIFY(!part->listing.rows.empty());
        auto listed = ckpt::sharded::listingView(part->listing, *part->notWhole);
        QVERIFY2(listed.ok(), listed ? "" : listed.error().message.c_str());
        const Checkpoint& v = **listed;
        QCOMPARE(v.tensors.size(), part->listing.rows.size());
        for (const auto& row : part->listing.rows) {
            const auto t = std::find_if(v.tensors.begin(), v.tensors.end(),
                                        [&](const ckpt::TensorEntry& e) { return e.path.view() == row.key; });
            QVERIFY2(t != v.tensors.end(), row.key.c_str());
            QCOMPARE(t->dtype, row.dtype);
            QVERIFY(std::vector<std::int64_t>(t->shape.begin(), t->shape.end()) == row.shape);
            QCOMPARE(std::string(t->location.view()), row.location);
        }
        std::vector<std::byte> scratch;
        const auto read = v.storageData(ckpt::StorageIndex{0}, scratch);
        QVERIFY(!read.ok());
        QCOMPARE(read.error().message, part->notWhole->message);
    }

    // Reading a set tells each member file once, in order, of how many; a stop asked for while one
    // is told ends the read there, Cancelled (the window's progress and Cancel).
    void readSetTellsEachFileAndStops_data()
    {
        QTest::addColumn<QString>("name");
        QTest::newRow("Hugging Face shards") << QStringLiteral("hf_st");
        QTest::newRow("ZeRO-2 rank files") << QStringLiteral("zero2_w3");
    }
    void readSetTellsEachFileAndStops()
    {
        QFETCH(QString, name);
        const auto loc = ckpt::sharded::detectSet(CKPTSCOPE_SHARDED_FIXTURE_DIR "/" + name.toStdString());
        std::vector<std::pair<std::size_t, std::size_t>> told;
        ckpt::sharded::OpenControl control;
        control.progress = [&](std::size_t index, std::size_t total, const std::string&) {
            told.emplace_back(index, total);
        };
        const auto read = ckpt::sharded::readSet(loc, {.groupStorages = true}, control);
        QVERIFY2(read.ok(), read ? "" : read.error().message.c_str());
        QVERIFY(told.size() >= 3);
        const std::size_t total = told.back().second;
        QCOMPARE(told.size(), total);
        for (std::size_t k = 0; k < told.size(); ++k) {
            QCOMPARE(told[k].first, k);
            // ZeRO's rank-0 file is read before it says how many ranks there are.
            QVERIFY(told[k].second == total || (k == 0 && told[k].second == 0));
        }

        std::stop_source stop;
        std::size_t seen = 0;
        const auto cancelled = ckpt::sharded::readSet(loc, {.groupStorages = true}, stopAtSecondFile(stop, seen));
        QVERIFY(!cancelled.ok());
        QCOMPARE(cancelled.error().code, ckpt::ErrorCode::Cancelled);
        QCOMPARE(seen, std::size_t{2});
    }

    // The registry's other calls take the same control: a stop asked for while the second member
    // file is told ends listSet, openView and consolidateSet there, Cancelled, and nothing is written.
    void everyCallStopsBetweenFiles()
    {
        const auto loc = ckpt::sharded::detectSet(CKPTSCOPE_SHARDED_FIXTURE_DIR "/hf_st");
        QTemporaryDir tmp;
        const std::string out = tmp.filePath(QStringLiteral("out.pt")).toStdString();
        // Each call, as the error it ends with (nothing when it read the set whole).
        using Outcome = std::optional<ckpt::ErrorCode>;
        const std::vector<std::pair<const char*, std::function<Outcome(const ckpt::sharded::OpenControl&)>>> calls{
            {"listSet", [&](const auto& c) { return outcome(ckpt::sharded::listSet(loc, c)); }},
            {"openView",
             [&](const auto& c) { return outcome(ckpt::sharded::openView(loc, {.groupStorages = true}, c)); }},
            {"consolidateSet", [&](const auto& c) { return outcome(ckpt::sharded::consolidateSet(loc, out, {}, c)); }}};
        for (const auto& [name, call] : calls) {
            std::stop_source stop;
            std::size_t seen = 0;
            QVERIFY2(call(stopAtSecondFile(stop, seen)) == Outcome(ckpt::ErrorCode::Cancelled), name);
            QVERIFY2(seen == 2, name);
            QVERIFY2(!QFileInfo::exists(QString::fromStdString(out)), name);
        }
        // Without a stop each reads the set whole.
        for (const auto& [name, call] : calls) {
            QVERIFY2(call({}) == std::nullopt, name);
        }
        QVERIFY(QFileInfo::exists(QString::fromStdString(out)));
    }

    // What a path opens as is decided in one place: a set's folder or any of its files stands for
    // the set, an FSDP rank file is its rank's shards alone, and a file of no set is no set.
    void setInputNamesWhatAPathOpens()
    {
        using ckpt::sharded::SetKind;
        const std::string fsdpRank = CKPTSCOPE_FSDP_FIXTURE_DIR "/fsdp_st/pytorch_model_fsdp_0_rank0.bin";
        const auto rank = ckpt::sharded::setInput(fsdpRank);
        QVERIFY(rank.has_value());
        QCOMPARE(rank->kind, SetKind::FsdpRanks);
        QVERIFY(rank->alone);
        QCOMPARE(rank->index, fsdpRank);
        QVERIFY(!ckpt::sharded::wholeSetInput(fsdpRank).has_value());
        const auto listing = ckpt::sharded::listSet(*rank);
        QVERIFY2(listing.ok(), listing ? "" : listing.error().message.c_str());
        QCOMPARE(listing->files.size(), std::size_t{1});
        QVERIFY(!ckpt::sharded::openView(*rank).ok());

        const auto folder = ckpt::sharded::setInput(CKPTSCOPE_FSDP_FIXTURE_DIR "/fsdp_st");
        QVERIFY(folder.has_value() && !folder->alone);
        QVERIFY(ckpt::sharded::openView(*folder).ok());

        const auto zeroRank = ckpt::sharded::wholeSetInput(
            CKPTSCOPE_ZERO_FIXTURE_DIR "/zero2_w3/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt");
        QVERIFY(zeroRank.has_value());
        QCOMPARE(zeroRank->kind, SetKind::DeepSpeedZero);

        QVERIFY(!ckpt::sharded::setInput(CKPTSCOPE_FSDP_FIXTURE_DIR "/fsdp_st.expected.pt").has_value());
        QVERIFY(!ckpt::sharded::setInput(CKPTSCOPE_FSDP_FIXTURE_DIR "/no such file").has_value());
    }

    // A write whose target is one of the files the set is read from (a shard, the index) would
    // rename the copy over a file it is still reading: refused before anything is written.
    void writingOntoAFileOfTheSetIsRefused()
    {
        QTemporaryDir tmp;
        const QDir from(QStringLiteral(CKPTSCOPE_SHARDED_FIXTURE_DIR "/hf_st"));
        const QDir dir(tmp.path());
        for (const auto& f : from.entryList(QDir::Files)) {
            QVERIFY(QFile::copy(from.filePath(f), dir.filePath(f)));
        }
        auto view = ckpt::sharded::openView(ckpt::sharded::detectSet(tmp.path().toStdString()));
        QVERIFY2(view.ok(), view ? "" : view.error().message.c_str());
        auto plan = ckpt::transform::makePlan(**view, {});
        QVERIFY(plan.ok());
        for (const auto& f : dir.entryList(QDir::Files)) {
            QFile file(dir.filePath(f));
            QVERIFY(file.open(QIODevice::ReadOnly));
            const QByteArray before = QCryptographicHash::hash(file.readAll(), QCryptographicHash::Sha256);
            file.close();
            const auto wrote = ckpt::write::writeCheckpoint(**view, *plan, dir.filePath(f).toStdString());
            QVERIFY2(!wrote.ok(), qPrintable(f));
            QCOMPARE(wrote.error().code, ckpt::ErrorCode::Usage);
            QVERIFY2(wrote.error().message.find("a file of the set") != std::string::npos,
                     wrote.error().message.c_str());
            QVERIFY(file.open(QIODevice::ReadOnly));
            QCOMPARE(QCryptographicHash::hash(file.readAll(), QCryptographicHash::Sha256), before);
        }
        QCOMPARE(dir.entryList(QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot), from.entryList(QDir::Files));
    }
};

QTEST_GUILESS_MAIN(TestSetView)
#include "tst_set_view.moc"
