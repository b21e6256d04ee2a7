// Hostile inputs through the real binaries: `ckptscope testload --verify` on an expanded view of
// 2^31 elements over a 4-byte storage (tests/hostile/gen/stride0_2e31.py) runs in bounded memory
// and reports the storage's hash equal to the file's; a silent helper ends the command with one
// line and exit 1.
#include "cli/cmd_testload.h"
#include "device/sha256.h"
#include "process_run.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <array>
#include <cstdlib>
#include <cstring>
#include <sstream>

class TestTestloadHostile : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        qputenv("CKPTSCOPE_TORCH_HELPER", QByteArray(CKPTSCOPE_TEST_HELPER));
        qputenv("CKPTSCOPE_NVML_LIBRARY", QByteArray("/nonexistent/libnvidia-ml.so.1"));
        QVERIFY(m_dir.isValid());
        QProcess gen;
        gen.start(QStringLiteral(CKPTSCOPE_PYTHON),
                  {QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/hostile/gen/stride0_2e31.py"), m_dir.path()});
        QVERIFY(gen.waitForFinished(60000));
        QVERIFY2(gen.exitCode() == 0, gen.readAllStandardError().constData());
        m_file = m_dir.filePath(QStringLiteral("stride0_2e31.pt")).toStdString();
        QVERIFY(QFile::exists(QString::fromStdString(m_file)));
    }

    // The view's C-order bytes are 8 GiB; hashing them meant materialising them (8.3 GB peak).
    // Now the helper hashes the 4-byte storage and the tensor carries a note instead.
    void expandedViewVerifiesInBoundedMemory()
    {
        const auto r = ckpt::test::runProcess({CKPTSCOPE_TEST_CLI, "testload", m_file, "--verify", "--json"});
        qInfo("testload --verify on 2^31 stride-0 elements: %lld ms, peak RSS %ld KiB", static_cast<long long>(r.ms),
              r.maxRssKiB);
        QVERIFY2(r.rc == 0, r.out.constData());
        QVERIFY2(r.maxRssKiB > 0 && r.maxRssKiB < 512L * 1024, qPrintable(QString::number(r.maxRssKiB)));

        const QJsonObject j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j.value(QStringLiteral("tensors_loaded")).toInt(), 1);
        const QJsonArray storages = j.value(QStringLiteral("storage_checks")).toArray();
        QCOMPARE(storages.size(), 1);
        const QJsonObject s = storages[0].toObject();
        const float value = 1.5F;  // what the generator stores
        std::array<std::byte, 4> bytes{};
        std::memcpy(bytes.data(), &value, bytes.size());
        QCOMPARE(s.value(QStringLiteral("sha256")).toString(), QString::fromStdString(ckpt::device::sha256Hex(bytes)));
        QCOMPARE(s.value(QStringLiteral("bytes")).toInt(), 4);
        QCOMPARE(s.value(QStringLiteral("matches_file")).toBool(), true);
        const QJsonArray checks = j.value(QStringLiteral("checks")).toArray();
        QCOMPARE(checks.size(), 1);
        const QJsonObject c = checks[0].toObject();
        QCOMPARE(c.value(QStringLiteral("path")).toString(), QStringLiteral("w"));
        QVERIFY(!c.contains(QStringLiteral("sha256")));
        QVERIFY2(c.value(QStringLiteral("note")).toString().startsWith(QStringLiteral("expanded view: 8.0 GiB")),
                 qPrintable(c.value(QStringLiteral("note")).toString()));
    }

    // The command's side of a silent helper: one line naming it, exit 1 (the load ran and failed;
    // the file itself is fine).
    void silentHelperEndsTheCommand()
    {
        const std::string fake = CKPTSCOPE_SOURCE_DIR "/tests/device/fake_helper.sh";
        qputenv("CKPTSCOPE_TORCH_HELPER", QByteArray(fake.c_str()));
        qputenv("FAKE_HELPER_MODE", QByteArray("hang"));
        qputenv("CKPTSCOPE_HELPER_TIMEOUT", QByteArray("1"));
        std::ostringstream out;
        std::ostringstream err;
        QElapsedTimer timer;
        timer.start();
        const int rc = ckpt::cli::cmdTestload({m_file}, out, err);
        const qint64 ms = timer.elapsed();
        qputenv("CKPTSCOPE_TORCH_HELPER", QByteArray(CKPTSCOPE_TEST_HELPER));
        qunsetenv("FAKE_HELPER_MODE");
        qunsetenv("CKPTSCOPE_HELPER_TIMEOUT");
        const std::string e = err.str();
        QCOMPARE(rc, 1);
        QVERIFY2(ms < 10000, qPrintable(QString::number(ms)));
        QCOMPARE(static_cast<int>(std::count(e.begin(), e.end(), '\n')), 1);
        QVERIFY2(QString::fromStdString(e).contains(QStringLiteral("the test-load helper ") +
                                                    QString::fromStdString(fake) +
                                                    QStringLiteral(" said nothing for 1 s; killed it")),
                 e.c_str());
    }

private:
    QTemporaryDir m_dir;
    std::string m_file;
};

QTEST_GUILESS_MAIN(TestTestloadHostile)
#include "tst_testload_hostile.moc"
