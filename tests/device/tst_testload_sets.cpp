// `ckptscope testload` on a multi-file checkpoint (issue 13): a Hugging Face sharded set, named by
// its folder, index or a shard, or a ZeRO stage 1/2 folder, is test-loaded as the one file convert
// writes from it, on the CUDA engine over the fake driver; the temporary file is gone afterwards,
// and an incomplete set is bad input before anything is loaded. Fixtures: tests/fixtures/gen_sharded.py.
#include "checkpoint/checkpoint.h"
#include "cli_run.h"
#include "sharded/listing.h"

#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#include <cstdlib>
#include <nlohmann/json.hpp>

namespace {

std::string set(const char* name)
{
    return std::string(CKPTSCOPE_SHARDED_FIXTURE_DIR "/") + name;
}

ckpt::test::CliRun testload(const std::vector<std::string>& args)
{
    std::vector<std::string> full{"testload"};
    full.insert(full.end(), args.begin(), args.end());
    return ckpt::test::ckptscope(full);
}

// Hidden names count too: the consolidated copy is a `.testload.ckptscope-*` file.
bool isEmpty(const QTemporaryDir& dir)
{
    return QDir(dir.path()).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot).isEmpty();
}

}  // namespace

class TestTestloadSets : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void init()
    {
        QVERIFY(m_machine.isValid() && m_tmp.isValid());
        qputenv("FAKE_GPU_STATE", QByteArray(qPrintable(m_machine.filePath(QStringLiteral("gpu.state")))));
        qputenv("FAKE_CUDA_DEVICES", QByteArray("16384"));  // one 16 GiB device
        qputenv("CKPTSCOPE_CUDA_LIBRARY", QByteArray(FAKE_CUDA_PATH));
        qputenv("CKPTSCOPE_NVML_LIBRARY", QByteArray(FAKE_NVML_PATH));
        qputenv("CKPTSCOPE_CUDA_ENGINE", QByteArray(CKPTSCOPE_TEST_ENGINE));
        qputenv("TMPDIR", QByteArray(qPrintable(m_tmp.path())));
    }

    void aSetLoadsAsOneFile_data()
    {
        QTest::addColumn<QString>("path");
        QTest::newRow("folder") << QString::fromStdString(set("hf_st"));
        QTest::newRow("index") << QString::fromStdString(set("hf_bin/pytorch_model.bin.index.json"));
    }

    void aSetLoadsAsOneFile()
    {
        QFETCH(QString, path);
        const auto loc = ckpt::sharded::detectSet(path.toStdString());
        auto listing = ckpt::sharded::listSet(loc);
        QVERIFY(static_cast<bool>(listing));
        const auto r = testload({path.toStdString(), "--device", "cuda:0", "--json"});
        QVERIFY2(r.rc == 0, (r.err + r.out).c_str());
        const auto doc = nlohmann::json::parse(r.out);
        QCOMPARE(doc["tensors_loaded"].get<std::size_t>(), listing->rows.size());
        QCOMPARE(doc["bytes"].get<std::uint64_t>(), listing->totalBytes());
        QCOMPARE(doc["engine"].get<std::string>(), std::string("cuda"));
        QCOMPARE(doc["set"]["files"].get<std::size_t>(), listing->files.size());
        QCOMPARE(doc["file"].get<std::string>(), path.toStdString());
        QVERIFY2(isEmpty(m_tmp), "the consolidated copy was left behind");
    }

    void incompleteSetIsBadInput()
    {
        const auto r = testload({set("hf_missing_shard"), "--device", "cuda:0"});
        QCOMPARE(r.rc, 2);
        QVERIFY2(r.err.find("incomplete") != std::string::npos, r.err.c_str());
        QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), 1);
        QVERIFY(isEmpty(m_tmp));
    }

    // A ZeRO stage 1/2 folder loads as the fp32 model convert writes from its two ranks'
    // partitions: what zero_to_fp32.py rebuilds (gen_sharded.py's expected file).
    void aZeroSetLoadsAsItsFp32Model()
    {
        auto expected = ckpt::openCheckpoint(set("zero2_complete.expected.pt"));
        QVERIFY(static_cast<bool>(expected));
        std::uint64_t bytes = 0;
        for (const auto& t : (*expected)->tensors) {
            bytes += t.nbytes;
        }
        const auto r = testload({set("zero2_complete"), "--device", "cuda:0", "--json"});
        QVERIFY2(r.rc == 0, (r.err + r.out).c_str());
        const auto doc = nlohmann::json::parse(r.out);
        QCOMPARE(doc["tensors_loaded"].get<std::size_t>(), (*expected)->tensors.size());
        QCOMPARE(doc["bytes"].get<std::uint64_t>(), bytes);
        // The rank-0 model states (param_shapes, buffers) and the two ranks' optimizer partitions.
        QCOMPARE(doc["set"]["files"].get<std::size_t>(), std::size_t{3});
        QVERIFY2(isEmpty(m_tmp), "the consolidated copy was left behind");
    }

private:
    QTemporaryDir m_machine;
    QTemporaryDir m_tmp;
};

QTEST_GUILESS_MAIN(TestTestloadSets)
#include "tst_testload_sets.moc"
