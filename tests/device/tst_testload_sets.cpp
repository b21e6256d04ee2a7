// `ckptscope testload` on a multi-file checkpoint (issues 13 and 27), on the CUDA engine over the
// fake driver. A Hugging Face sharded set (named by its folder, its index or a shard) and a ZeRO
// stage 1/2 folder, a DCP folder and FSDP rank files are loaded in place: the engine opens the set as
// one checkpoint and reads each storage from the files that hold it, so $TMPDIR is not even needed
// (it does not exist here), and --verify proves every tensor on the device carries the bytes real
// torch's state dict of the set holds (each fixture's <set>.expected.pt). An incomplete set is bad
// input before anything is loaded. Fixtures: tests/fixtures/gen_sharded.py, tests/sharded/gen_dcp.py,
// gen_fsdp.py.
#include "checkpoint/checkpoint.h"
#include "checkpoint/tensor_bytes.h"
#include "cli_run.h"
#include "device/sha256.h"
#include "sharded/listing.h"
#include "sharded/set_view.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

namespace {

std::string set(const char* name)
{
    return std::string(CKPTSCOPE_SHARDED_FIXTURE_DIR "/") + name;
}

// Each tensor's C-order bytes in a file real torch wrote, by key path.
std::map<std::string, std::vector<std::byte>> tensorBytes(const std::string& file)
{
    std::map<std::string, std::vector<std::byte>> out;
    auto ck = ckpt::openCheckpoint(file);
    if (!ck) {
        return out;
    }
    for (const auto& t : (*ck)->tensors) {
        std::vector<std::byte> bytes;
        if (ckpt::forEachTensorChunk(**ck, t, [&bytes](ckpt::Bytes b) {
                bytes.insert(bytes.end(), b.begin(), b.end());
                return true;
            })) {
            out[t.path] = std::move(bytes);
        }
    }
    return out;
}

// --verify's report of a load: every storage as loaded equals the set read in place, and hashes as
// the storage torch's own tensors make: each storage of the view rebuilt from the bytes of the
// tensors that view it in `expected` (a file real torch wrote; what no tensor covers, a ZeRO
// group's padding, taken from the view), so the engine is shown to hold torch's bytes.
void checkVerified(const nlohmann::json& doc, const std::string& path, const std::string& expected)
{
    const auto storages = doc.at("storage_checks");
    QVERIFY(!storages.empty());
    const auto want = tensorBytes(expected);
    QVERIFY(!want.empty());
    auto view = ckpt::sharded::openInput(path, true);
    QVERIFY(static_cast<bool>(view));
    const ckpt::Checkpoint& v = **view;
    for (const auto& s : storages) {
        QVERIFY2(s.at("matches_file").get<bool>(), s.dump().c_str());
        const auto key = s.at("storage").get<std::string>();
        for (std::uint32_t i = 0; i < v.storages.size(); ++i) {
            const ckpt::StorageIndex si{i};
            if (v.storages[si].key != key) {
                continue;
            }
            std::vector<std::byte> image;
            QVERIFY(v.streamStorage(si, 0, v.storages[si].nbytes, [&image](ckpt::Bytes b) {
                         image.insert(image.end(), b.begin(), b.end());
                         return true;
                     }).ok());
            std::size_t covered = 0;
            for (const auto& t : v.tensors) {
                if (t.storage != si) {
                    continue;
                }
                QVERIFY2(t.contiguous && want.contains(t.path), t.path.c_str());
                const auto& bytes = want.at(t.path);
                const auto at = static_cast<std::size_t>(t.storageOffset) * ckpt::elementSize(t.dtype);
                QVERIFY2(bytes.size() == t.nbytes && at + bytes.size() <= image.size(), t.path.c_str());
                std::copy(bytes.begin(), bytes.end(), image.begin() + static_cast<std::ptrdiff_t>(at));
                covered += bytes.size();
            }
            QVERIFY2(covered > 0, key.c_str());
            QCOMPARE(s.at("sha256").get<std::string>(), ckpt::device::sha256Hex(image));
        }
    }
}

ckpt::test::CliRun testload(const std::vector<std::string>& args)
{
    std::vector<std::string> full{"testload"};
    full.insert(full.end(), args.begin(), args.end());
    return ckpt::test::ckptscope(full);
}

}  // namespace

class TestTestloadSets : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void init()
    {
        QVERIFY(m_machine.isValid());
        qputenv("FAKE_GPU_STATE", QByteArray(qPrintable(m_machine.filePath(QStringLiteral("gpu.state")))));
        qputenv("FAKE_CUDA_DEVICES", QByteArray("16384"));  // one 16 GiB device
        qputenv("CKPTSCOPE_CUDA_LIBRARY", QByteArray(FAKE_CUDA_PATH));
        qputenv("CKPTSCOPE_NVML_LIBRARY", QByteArray(FAKE_NVML_PATH));
        qputenv("CKPTSCOPE_CUDA_ENGINE", QByteArray(CKPTSCOPE_TEST_ENGINE));
        // Read in place: no temporary directory is needed, so none exists.
        qputenv("TMPDIR", QByteArray("/nonexistent/ckptscope-tmp"));
    }

    void aSetLoadsInPlace_data()
    {
        QTest::addColumn<QString>("path");
        QTest::addColumn<QString>("expected");
        const auto row = [](const char* name, const std::string& path, const std::string& expected) {
            QTest::newRow(name) << QString::fromStdString(path) << QString::fromStdString(expected);
        };
        row("hf folder", set("hf_st"), set("hf_st.expected.pt"));
        row("hf index", set("hf_bin/pytorch_model.bin.index.json"), set("hf_bin.expected.pt"));
        // module. keys, storages saved from cuda:1, a NaN: loaded as they are.
        row("hf ddp from cuda:1", set("hf_ddp_cuda"), set("hf_ddp_cuda.expected.pt"));
        // The fp32 model zero_to_fp32.py rebuilds from two ranks' partitions.
        row("zero-2", set("zero2_complete"), set("zero2_complete.expected.pt"));
        // Chunk boxes of 2.x's writer, one file per rank and one file per item.
        const std::string dcp = CKPTSCOPE_DCP_FIXTURE_DIR "/";
        row("dcp", dcp + "dcp_basic", dcp + "dcp_basic.expected.pt");
        row("dcp per item", dcp + "dcp_per_item", dcp + "dcp_per_item.expected.pt");
        // FSDP rank files: ShardedTensor and DTensor local shards.
        const std::string fsdp = CKPTSCOPE_FSDP_FIXTURE_DIR "/";
        row("fsdp sharded tensors", fsdp + "fsdp_st", fsdp + "fsdp_st.expected.pt");
        row("fsdp dtensors", fsdp + "fsdp_dtensor", fsdp + "fsdp_dtensor.expected.pt");
    }

    // Every kind of set loads as the model its consolidation writes, read in place ($TMPDIR does
    // not exist), byte for byte what real torch's state dict of it holds.
    void aSetLoadsInPlace()
    {
        QFETCH(QString, path);
        QFETCH(QString, expected);
        auto want = ckpt::openCheckpoint(expected.toStdString());
        QVERIFY(static_cast<bool>(want));
        std::uint64_t bytes = 0;
        for (const auto& t : (*want)->tensors) {
            bytes += t.nbytes;
        }
        const auto r = testload({path.toStdString(), "--device", "cuda:0", "--verify", "--json"});
        QVERIFY2(r.rc == 0, (r.err + r.out).c_str());
        const auto doc = nlohmann::json::parse(r.out);
        QCOMPARE(doc["tensors_loaded"].get<std::size_t>(), (*want)->tensors.size());
        QCOMPARE(doc["bytes"].get<std::uint64_t>(), bytes);
        QCOMPARE(doc["engine"].get<std::string>(), std::string("cuda"));
        QVERIFY(doc["set"]["files"].get<std::size_t>() > 1);
        QCOMPARE(doc["file"].get<std::string>(), path.toStdString());
        // The set's kind is the identifier `inspect --json` gives it, its phrase beside it.
        const auto listing = ckpt::test::ckptscope({"inspect", path.toStdString(), "--json"});
        QVERIFY2(listing.rc == 0, listing.err.c_str());
        const auto inspected = nlohmann::json::parse(listing.out);
        QCOMPARE(doc["set"]["kind"].get<std::string>(), inspected["set"]["kind"].get<std::string>());
        QCOMPARE(doc["set"]["what"].get<std::string>(), inspected["set"]["what"].get<std::string>());
        checkVerified(doc, path.toStdString(), expected.toStdString());
    }

    // The LibTorch helper reads a set in place too (a 64 MiB piece at a time), and its per-tensor
    // hashes are those of real torch's tensors. DCP: one tensor sharded along dim 1, assembled.
    void aSetLoadsInPlaceOnLibTorch_data() { aSetLoadsInPlace_data(); }
    void aSetLoadsInPlaceOnLibTorch()
    {
#ifndef CKPTSCOPE_TEST_HELPER
        QSKIP("no LibTorch helper in this build");
#else
        QFETCH(QString, path);
        QFETCH(QString, expected);
        qputenv("CKPTSCOPE_TORCH_HELPER", QByteArray(CKPTSCOPE_TEST_HELPER));
        const auto r = testload({path.toStdString(), "--device", "cpu", "--verify", "--json"});
        QVERIFY2(r.rc == 0, (r.err + r.out).c_str());
        const auto doc = nlohmann::json::parse(r.out);
        QCOMPARE(doc["engine"].get<std::string>(), std::string("torch"));
        checkVerified(doc, path.toStdString(), expected.toStdString());
        const auto want = tensorBytes(expected.toStdString());
        std::size_t hashed = 0;
        for (const auto& c : doc.at("checks")) {
            const auto p = c.at("path").get<std::string>();
            QVERIFY2(want.contains(p), p.c_str());
            QCOMPARE(c.at("sha256").get<std::string>(), ckpt::device::sha256Hex(want.at(p)));
            ++hashed;
        }
        QCOMPARE(hashed, want.size());
#endif
    }

    // The set's files as the listing names them: the index's shards.
    void aSetCountsItsFiles()
    {
        const auto loc = ckpt::sharded::detectSet(set("hf_st"));
        auto listing = ckpt::sharded::listSet(loc);
        QVERIFY(static_cast<bool>(listing));
        const auto r = testload({set("hf_st"), "--device", "cuda:0", "--json"});
        QVERIFY2(r.rc == 0, (r.err + r.out).c_str());
        const auto doc = nlohmann::json::parse(r.out);
        QCOMPARE(doc["set"]["files"].get<std::size_t>(), listing->files.size());
        QCOMPARE(doc["tensors_loaded"].get<std::size_t>(), listing->rows.size());
        QCOMPARE(doc["bytes"].get<std::uint64_t>(), listing->totalBytes());
    }

    // The text report says how the set was loaded, and a DDP replay reads it in place too.
    void aSetSaysItWasReadInPlace()
    {
        const auto r = testload({set("hf_bin"), "--device", "cuda:0"});
        QVERIFY2(r.rc == 0, (r.err + r.out).c_str());
        QVERIFY2(r.out.find("each storage read in place from the files that hold it") != std::string::npos,
                 r.out.c_str());
        const auto replay = testload({set("hf_bin"), "--ddp-ranks", "2", "--json"});
        QVERIFY2(replay.rc == 0, (replay.err + replay.out).c_str());
        const auto doc = nlohmann::json::parse(replay.out);
        QCOMPARE(doc["failed_ranks"].get<int>(), 0);
        QVERIFY(doc["weight_bytes"].get<std::uint64_t>() > 0);
    }

    void incompleteSetIsBadInput()
    {
        const auto r = testload({set("hf_missing_shard"), "--device", "cuda:0"});
        QCOMPARE(r.rc, 2);
        QVERIFY2(r.err.find("incomplete") != std::string::npos, r.err.c_str());
        QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), 1);
    }

private:
    QTemporaryDir m_machine;
};

QTEST_GUILESS_MAIN(TestTestloadSets)
#include "tst_testload_sets.moc"
