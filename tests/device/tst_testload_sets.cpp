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

// The sha256 of each tensor's C-order bytes in a file real torch wrote, by key path.
std::map<std::string, std::string> tensorHashes(const std::string& file)
{
    std::map<std::string, std::string> out;
    auto ck = ckpt::openCheckpoint(file);
    if (!ck) {
        return out;
    }
    for (const auto& t : (*ck)->tensors) {
        ckpt::device::Sha256 h;
        if (ckpt::forEachTensorChunk(**ck, t, [&h](ckpt::Bytes b) {
                h.update(b);
                return true;
            })) {
            out[t.path] = h.hexDigest();
        }
    }
    return out;
}

// --verify's report of a load: every storage as loaded equals the set read in place, and every
// tensor's bytes equal those of the same key in `expected` (a file real torch wrote).
void checkVerified(const nlohmann::json& doc, const std::string& expected)
{
    const auto storages = doc.at("storage_checks");
    QVERIFY(!storages.empty());
    for (const auto& s : storages) {
        QVERIFY2(s.at("matches_file").get<bool>(), s.dump().c_str());
    }
    const auto want = tensorHashes(expected);
    QVERIFY(!want.empty());
    const auto checks = doc.at("checks");
    QCOMPARE(checks.size(), want.size());
    for (const auto& c : checks) {
        const auto path = c.at("path").get<std::string>();
        QVERIFY2(want.contains(path), path.c_str());
        QVERIFY2(c.at("sha256").get<std::string>() == want.at(path), path.c_str());
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
        checkVerified(doc, expected.toStdString());
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
