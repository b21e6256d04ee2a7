// `ckptscope check` in-process: exit codes (0 clean, 1 warnings/errors, 2 unreadable or bad usage),
// text sorted by severity with the fix as a convert command, and the JSON document.
#include "cli_run.h"
#include "oracle.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

namespace {

ckpt::test::CliRun run(std::vector<std::string> args)
{
    args.insert(args.begin(), "check");
    return ckpt::test::ckptscope(args);
}

using diagtest::fixture;

}  // namespace

class TestCheckCli : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void exitCodes_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("rc");
        QTest::newRow("clean") << QStringLiteral("plain_sd.pt") << 0;
        QTest::newRow("info only (tied)") << QStringLiteral("tied_clean.pt") << 0;
        QTest::newRow("lightning near miss") << QStringLiteral("lightning.pt") << 0;
        QTest::newRow("warning") << QStringLiteral("ddp_sd.pt") << 1;
        QTest::newRow("error") << QStringLiteral("unsafe_os_system.pt") << 1;
        QTest::newRow("missing file") << QStringLiteral("no_such_file.pt") << 2;
    }

    void exitCodes()
    {
        QFETCH(QString, file);
        QFETCH(int, rc);
        const auto r = run({fixture(file.toStdString().c_str())});
        QCOMPARE(r.rc, rc);
        if (rc == 2) {
            QVERIFY(r.out.empty());
            QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), 1);  // one line naming the problem
            QVERIFY(r.err.find("no_such_file.pt") != std::string::npos);
        } else {
            QVERIFY(r.err.empty());
        }
    }

    // Every unreadable file of the bad/ corpus exits 2 with one line (or opens and is checked).
    void unreadableCorpus()
    {
        QFile f(QString::fromStdString(fixture("bad/manifest.json")));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const auto entries = QJsonDocument::fromJson(f.readAll()).array();
        QVERIFY(!entries.isEmpty());
        for (const auto& e : entries) {
            const auto o = e.toObject();
            const auto name = o.value(QStringLiteral("file")).toString().toStdString();
            const auto r = run({fixture(("bad/" + name).c_str())});
            if (o.value(QStringLiteral("may_succeed")).toBool() && r.rc != 2) {
                QVERIFY(r.rc == 0 || r.rc == 1);
                continue;
            }
            QVERIFY2(r.rc == 2, name.c_str());
            QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), 1);
        }
    }

    // A size is never wrapped in a second pair of parentheses ("(65.0 KiB (66,568 bytes))"): the
    // bundled sample and every fixture, each finding's text.
    void noDoubledParentheses()
    {
        QStringList files{QStringLiteral(CKPTSCOPE_SOURCE_DIR "/resources/sample/ddp_checkpoint.pt")};
        for (const auto& name : QDir(QStringLiteral(CKPTSCOPE_FIXTURE_DIR)).entryList({QStringLiteral("*.pt")})) {
            files << QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/") + name;
        }
        int findings = 0;
        for (const auto& file : files) {
            const auto r = run({file.toStdString(), "--json"});
            for (const auto& f : QJsonDocument::fromJson(QByteArray::fromStdString(r.out))
                                     .object()
                                     .value(QStringLiteral("findings"))
                                     .toArray()) {
                const QString text = f.toObject().value(QStringLiteral("detail")).toString();
                QVERIFY2(!text.contains(QStringLiteral("bytes))")), qPrintable(file + QStringLiteral(": ") + text));
                ++findings;
            }
        }
        QVERIFY(findings > 20);
    }

    void textOutput()
    {
        const auto r = run({fixture("train_ckpt.pt")});
        QCOMPARE(r.rc, 1);
        QVERIFY(r.out.find("WARNING [module-prefix]") != std::string::npos);
        QVERIFY(r.out.find("fix: ckptscope convert") != std::string::npos);
        QVERIFY(r.out.find("--strip-prefix module.") != std::string::npos);
        QVERIFY(r.out.find("--map-location cpu") != std::string::npos);
        // Errors before warnings before info.
        const auto u = run({fixture("unsafe_os_system.pt")});
        const auto e = u.out.find("ERROR [unsafe-callable]");
        const auto w = u.out.find("WARNING [");
        QVERIFY(e != std::string::npos && w != std::string::npos && e < w);
        const auto clean = run({fixture("plain_sd.pt")});
        QVERIFY(clean.out.find("no findings") != std::string::npos);
    }

    void jsonOutput()
    {
        const auto r = run({fixture("ddp_sd_cuda0.pt"), "--json"});
        QCOMPARE(r.rc, 1);
        QJsonParseError pe;
        const auto doc = QJsonDocument::fromJson(QByteArray::fromStdString(r.out), &pe);
        QVERIFY2(pe.error == QJsonParseError::NoError, qPrintable(pe.errorString()));
        const auto o = doc.object();
        QCOMPARE(o.value(QStringLiteral("schema")).toInt(), 2);
        QCOMPARE(o.value(QStringLiteral("file")).toString().toStdString(), fixture("ddp_sd_cuda0.pt"));
        QStringList codes;
        for (const auto& f : o.value(QStringLiteral("findings")).toArray()) {
            codes << f.toObject().value(QStringLiteral("code")).toString();
        }
        QVERIFY(codes.contains(QStringLiteral("device-pinned")));
        QVERIFY(codes.contains(QStringLiteral("module-prefix")));
    }

    void valuesFlag()
    {
        QCOMPARE(run({fixture("nonfinite.pt")}).rc, 0);
        const auto r = run({fixture("nonfinite.pt"), "--values"});
        QCOMPARE(r.rc, 1);
        QVERIFY(r.out.find("[nonfinite-values]") != std::string::npos);
    }

    void against()
    {
        QTemporaryDir tmp;
        const auto txt = tmp.filePath(QStringLiteral("keys.txt")).toStdString();
        {
            QFile f(QString::fromStdString(txt));
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("layer.weight [3, 4]\nlayer.bias 3\n");
        }
        const auto r = run({fixture("lightning.pt"), "--against", txt});
        QCOMPARE(r.rc, 1);
        QVERIFY2(r.out.find("fix: ckptscope convert " + fixture("lightning.pt")) != std::string::npos, r.out.c_str());
        QVERIFY(r.out.find("--select state_dict --strip-prefix model.") != std::string::npos);
        const auto j = run({fixture("lightning.pt"), "--against", txt, "--select", "state_dict", "--json"});
        QCOMPARE(j.rc, 1);
        const auto doc = QJsonDocument::fromJson(QByteArray::fromStdString(j.out)).object();
        const auto first = doc.value(QStringLiteral("findings")).toArray().first().toObject();
        QCOMPARE(first.value(QStringLiteral("code")).toString(), QStringLiteral("missing-keys"));
        QVERIFY(first.value(QStringLiteral("detail"))
                    .toString()
                    .contains(QStringLiteral("Missing key(s) in state_dict: \"layer.weight\", \"layer.bias\".")));
        const auto fix = first.value(QStringLiteral("fix")).toObject();
        QCOMPARE(fix.value(QStringLiteral("select")).toString(), QStringLiteral("state_dict"));
        QCOMPARE(run({fixture("plain_sd.pt"), "--against", fixture("plain_sd.pt")}).rc, 0);
        // Usage errors and unreadable references exit 2.
        QCOMPARE(run({fixture("ddp_sd.pt"), "--select", "model"}).rc, 2);
        QCOMPARE(run({fixture("ddp_sd.pt"), "--against", "/nonexistent.txt"}).rc, 2);
        QCOMPARE(run({fixture("lightning.pt"), "--against", txt, "--select", "nope"}).rc, 2);
        QCOMPARE(run({}).rc, 2);
    }
};

QTEST_GUILESS_MAIN(TestCheckCli)
#include "tst_check_cli.moc"
