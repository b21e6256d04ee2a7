// `inspect --json` of a set of every kind ckptscope reads speaks one dialect, the file's: each
// tensor's `path`, `dtype`, `shape`, `location` and `nbytes` as a file's tensors carry them, plus
// `stored_in`; one `set` object with the kind, files and findings; `totals` as a file's. The
// key paths and types of all of them together are tests/cli/golden/inspect-set.schema, and every
// field a set shares with a file has the file's type (tests/cli/golden/inspect.schema).
#include "cli_json.h"
#include "cli_run.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonObject>
#include <QStringList>
#include <QTest>

#include <set>

namespace {

using ckpt::test::ckptscope;
using ckpt::test::jsonOf;
using ckpt::test::schemaLines;

QStringList goldenLines(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    return QString::fromUtf8(f.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
}

}  // namespace

class TestSetJson : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void everyKindSpeaksOneDialect_data()
    {
        QTest::addColumn<QString>("path");
        QTest::addColumn<QString>("kind");
        QTest::newRow("Hugging Face, safetensors")
            << QStringLiteral(CKPTSCOPE_SHARDED_FIXTURE_DIR "/hf_st") << QStringLiteral("huggingface");
        QTest::newRow("Hugging Face, tied head")
            << QStringLiteral(CKPTSCOPE_SHARDED_FIXTURE_DIR "/hf_tied_hub") << QStringLiteral("huggingface");
        QTest::newRow("DCP") << QStringLiteral(CKPTSCOPE_DCP_FIXTURE_DIR "/dcp_basic") << QStringLiteral("dcp");
        QTest::newRow("FSDP DTensor ranks")
            << QStringLiteral(CKPTSCOPE_FSDP_FIXTURE_DIR "/fsdp_dtensor") << QStringLiteral("fsdp-ranks");
        QTest::newRow("ZeRO-3") << QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR "/zero3_w2")
                                << QStringLiteral("deepspeed-zero");
        QTest::newRow("ZeRO, missing ranks")
            << QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR "/zero3_no_optim") << QStringLiteral("deepspeed-zero");
    }
    void everyKindSpeaksOneDialect()
    {
        QFETCH(QString, path);
        QFETCH(QString, kind);
        const auto r = ckptscope({"inspect", "--json", path.toStdString()});
        QVERIFY2(r.rc == 0, r.err.c_str());
        const QJsonObject doc = jsonOf(r);
        QCOMPARE(doc.value(QStringLiteral("schema")).toInt(), 2);
        QCOMPARE(doc.value(QStringLiteral("format")).toString(), QStringLiteral("set"));
        const QJsonObject set = doc.value(QStringLiteral("set")).toObject();
        QCOMPARE(set.value(QStringLiteral("kind")).toString(), kind);
        const QJsonArray files = set.value(QStringLiteral("files")).toArray();
        QVERIFY(!files.isEmpty());
        QStringList names;
        for (const auto& f : files) {
            names << f.toObject().value(QStringLiteral("path")).toString();
        }

        // Every tensor names files of the set, and the totals add up as a file's do.
        const QJsonArray tensors = doc.value(QStringLiteral("tensors")).toArray();
        QVERIFY(!tensors.isEmpty());
        double tensorBytes = 0;
        for (const auto& v : tensors) {
            const QJsonObject t = v.toObject();
            QVERIFY(!t.value(QStringLiteral("path")).toString().isEmpty());
            QVERIFY(!t.value(QStringLiteral("location")).toString().isEmpty());
            for (const auto& f : t.value(QStringLiteral("stored_in")).toArray()) {
                QVERIFY2(names.contains(f.toString()), qPrintable(f.toString()));
            }
            tensorBytes += t.value(QStringLiteral("nbytes")).toDouble();
        }
        const QJsonObject totals = doc.value(QStringLiteral("totals")).toObject();
        QCOMPARE(totals.value(QStringLiteral("tensors")).toInt(), tensors.size());
        QCOMPARE(totals.value(QStringLiteral("tensor_bytes")).toDouble(), tensorBytes);
        double byLocation = 0;
        for (const auto& n : totals.value(QStringLiteral("by_location")).toObject()) {
            byLocation += n.toDouble();
        }
        QCOMPARE(byLocation, totals.value(QStringLiteral("storage_bytes")).toDouble());

        // No field of the old per-format dialects is left.
        const QStringList got = schemaLines(r.out);
        for (const char* gone : {"$.finding_codes: array", "$.tensors[].key: string", "$.tensors[].device: string",
                                 "$.tensors[].bytes: number", "$.tensors[].file: string", "$.set.shards: array"}) {
            QVERIFY2(!got.contains(QLatin1String(gone)), gone);
        }

        // Every line is in the set golden file; a line a file's document has too has its type.
        const QStringList golden =
            goldenLines(QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/cli/golden/inspect-set.schema"));
        QVERIFY2(!golden.isEmpty(), "tests/cli/golden/inspect-set.schema is missing");
        const QStringList fileGolden =
            goldenLines(QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/cli/golden/inspect.schema"));
        for (const auto& line : got) {
            QVERIFY2(golden.contains(line),
                     qPrintable(QStringLiteral("JSON gained (update the golden file): ") + line));
            const QString key = line.section(QLatin1Char(':'), 0, 0);
            for (const auto& f : fileGolden) {
                if (f.section(QLatin1Char(':'), 0, 0) == key) {
                    QVERIFY2(f == line, qPrintable(line + QStringLiteral(" differs from a file's ") + f));
                }
            }
        }
        m_seen.insert(got.begin(), got.end());
    }

    // The golden file holds nothing that no kind printed.
    void goldenHoldsOnlyWhatIsPrinted()
    {
        const QStringList golden =
            goldenLines(QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/cli/golden/inspect-set.schema"));
        for (const auto& line : golden) {
            QVERIFY2(m_seen.count(line) == 1, qPrintable(QStringLiteral("JSON lost: ") + line));
        }
    }

private:
    std::set<QString> m_seen;
};

QTEST_GUILESS_MAIN(TestSetJson)
#include "tst_set_json.moc"
