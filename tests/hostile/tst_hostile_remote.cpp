// Hostile servers and hostile files over HTTP through the real `ckptscope` binary (issue 38, third
// pass): the readers issue 28 added (the remote legacy walk, the Hub API's listing, a sharded set's
// member names, every reply a transfer checks) against tests/remote/hostile_server.py on loopback,
// serving what tests/hostile/gen/remote_files.py writes. Each case ends in one line and exit 2 (or
// reads what a local read gives), within a time and memory bound; nothing but a named output is
// written, and no request leaves the repository or set that was named. The forged legacy count, the
// listing's traversal, percent-encoded and flooding names, and the set's "." and encoded ".."
// members failed on the code before (run with CKPTSCOPE_HOSTILE_CLI=<old binary>).
#include "hostile_cli.h"
#include "process_run.h"
#include "remote/servers.h"
#include "time_bound.h"

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cstdlib>
#include <memory>

using ckpt::test::cli;
using ckpt::test::LoopbackServer;
using ckpt::test::nginxPath;
using ckpt::test::ProcessResult;
using ckpt::test::runProcess;

namespace {

QString describe(const ProcessResult& r)
{
    return QStringLiteral("rc %1 in %2 ms, %3 KiB%4; stderr: %5")
        .arg(r.rc)
        .arg(r.ms)
        .arg(r.maxRssKiB)
        .arg(r.timedOut ? QStringLiteral(" (killed: timed out)") : QString())
        .arg(QString::fromUtf8(r.err.left(600)));
}

// Every command here runs within this, and within this much memory: the files served are 1.5 MiB,
// a listing at most 16 MiB.
constexpr int kBoundMs = 30000;
constexpr long kBoundKiB = 256 * 1024;

ProcessResult run(std::vector<std::string> args)
{
    args.insert(args.begin(), cli());
    return runProcess(args, static_cast<int>(ckpt::test::timeBoundMs(kBoundMs)));
}

// Bad input: exit 2, one line on stderr, no signal, no hang, bounded memory.
void checkRefused(const ProcessResult& r)
{
    QVERIFY2(!r.timedOut && r.rc == 2 && r.err.count('\n') == 1, qPrintable(describe(r)));
    QVERIFY2(r.ms < ckpt::test::timeBoundMs(kBoundMs), qPrintable(describe(r)));
    QVERIFY2(!ckpt::test::kRssIsTheProgramsOwn || r.maxRssKiB < kBoundKiB, qPrintable(describe(r)));
}

bool rawControls(const QByteArray& b)
{
    return b.contains('\x1b') || b.contains('\x07') || b.contains("\xc2\x9b");
}

// A listing's outcome: refused as bad input (rc 2) or exit `rc`, saying `says` in a short line,
// with no raw terminal control in anything printed.
void checkOutcome(const ProcessResult& r, int rc, const QString& says)
{
    if (rc == 2) {
        checkRefused(r);
    } else {
        QVERIFY2(r.rc == rc && !r.timedOut, qPrintable(describe(r)));
    }
    QVERIFY2(r.err.contains(says.toUtf8()), qPrintable(describe(r)));
    QVERIFY2(r.err.size() < 1000, qPrintable(describe(r)));
    QVERIFY2(!rawControls(r.out) && !rawControls(r.err), r.out.toPercentEncoding().left(600).constData());
}

std::string s(const QString& q)
{
    return q.toStdString();
}

}  // namespace

class TestHostileRemote : public QObject {
    Q_OBJECT

    QTemporaryDir m_gen;
    QTemporaryDir m_work;
    QString m_paths;                            // hostile_server.py's log of the paths asked for
    std::unique_ptr<LoopbackServer> m_layouts;  // nginx serving the DCP layout sets (dcpLayoutsByUrl)

    QString gen(const QString& name) const { return m_gen.filePath(name); }

    // A server of `file`, logging the paths asked for to m_paths.
    bool serve(LoopbackServer& server, const QString& file)
    {
        qputenv("HOSTILE_PATH_LOG", m_paths.toUtf8());
        return server.start(ckpt::test::scriptPath("hostile_server.py"), {gen(file)});
    }

    // The paths asked for since the last call that do not start with one of `allowed`.
    QStringList pathsOutside(const QStringList& allowed)
    {
        QFile log(m_paths);
        QStringList outside;
        if (log.open(QIODevice::ReadOnly)) {
            for (const auto& line : QString::fromUtf8(log.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts)) {
                if (std::none_of(allowed.begin(), allowed.end(),
                                 [&](const QString& a) { return line.startsWith(a); })) {
                    outside << line;
                }
            }
        }
        QFile::remove(m_paths);
        return outside;
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_gen.isValid() && m_work.isValid());
        QProcess p;
        p.start(QStringLiteral(CKPTSCOPE_PYTHON),
                {QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/hostile/gen/remote_files.py"), m_gen.path()});
        QVERIFY(p.waitForFinished(120000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        m_paths = m_work.filePath(QStringLiteral("paths.log"));
        // A stalled reply ends after 3 s rather than the default's minute; no token, no proxy.
        qputenv("CKPTSCOPE_HTTP_TIMEOUT", "3");
        qputenv("HF_HOME", m_work.filePath(QStringLiteral("hf-home")).toUtf8());
        qunsetenv("HF_TOKEN");
        for (const char* v : {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
            qunsetenv(v);
        }
        qInfo("ckptscope under test: %s", cli().c_str());
    }

    void init() { QFile::remove(m_paths); }  // a case that failed left its paths

    // ---- the legacy walk ------------------------------------------------------------------------

    // The second record holds more elements than its pickle declares, and where the pickle puts the
    // third record lie the bytes its check expects: a remote read took the third tensor from the
    // wrong place, with exit 0. Every count before a record is checked before its bytes are given
    // out, so the read is refused; the same file unforged reads as it does from disk.
    void legacyCountForgedFurtherAlong()
    {
        QFile victimFile(gen(QStringLiteral("legacy_forged_count.victim")));
        QVERIFY(victimFile.open(QIODevice::ReadOnly));
        const std::string victim = victimFile.readAll().toStdString();
        LoopbackServer server;
        QVERIFY(serve(server, QStringLiteral("legacy_forged_count.pt")));
        const QString url = server.url(QStringLiteral("/good/legacy_forged_count.pt"));
        const QString out = m_work.filePath(QStringLiteral("forged.pt"));
        const auto r = run({"convert", s(url), "--select", victim, "-o", s(out)});
        checkRefused(r);
        QVERIFY2(r.err.contains("not laid out as torch.save writes it"), qPrintable(describe(r)));
        QVERIFY(!QFile::exists(out));
        const auto values = run({"check", "--values", s(url)});
        QVERIFY2(values.rc == 1 && values.out.contains("values-unscanned"), qPrintable(describe(values)));
        // diff reads every storage too: the tensors it cannot read make it a bad input, said in its
        // one line (the transfer's "remote: N requests" line came before it, a second line).
        const auto diffed = run({"diff", s(url), s(gen(QStringLiteral("legacy_forged_count.pt")))});
        checkRefused(diffed);
        QVERIFY2(diffed.err.contains("could not be read"), qPrintable(describe(diffed)));
        // Read from disk the file is valid, and the tensor is what was saved.
        const QString local = m_work.filePath(QStringLiteral("forged-local.pt"));
        QCOMPARE(
            run({"convert", s(gen(QStringLiteral("legacy_forged_count.pt"))), "--select", victim, "-o", s(local)}).rc,
            0);

        LoopbackServer plain;
        QVERIFY(serve(plain, QStringLiteral("legacy.pt")));
        const QString plainOut = m_work.filePath(QStringLiteral("plain.pt"));
        const auto ok = run({"convert", s(plain.url(QStringLiteral("/good/legacy.pt"))), "-o", s(plainOut)});
        QVERIFY2(ok.rc == 0, qPrintable(describe(ok)));
        const auto same = run({"diff", s(plainOut), s(gen(QStringLiteral("legacy.pt")))});
        QVERIFY2(same.rc == 0, qPrintable(describe(same) + QString::fromUtf8(same.out.left(600))));
    }

    // ---- the Hub API's listing ------------------------------------------------------------------

    // What `hf://hub/CASE` makes of a listing bent per case (hostile_server.py's LISTINGS): refused
    // in one line, or, where one file is left, that file of that repository. No request leaves it.
    void hubListings_data()
    {
        QTest::addColumn<QString>("listing");
        QTest::addColumn<int>("rc");
        QTest::addColumn<QString>("says");
        // 100,000 levels of brackets: refused as JSON files are (kMaxJsonDepth).
        QTest::newRow("deep") << "deep" << 2 << "lists no files";
        // 300,000 names: the message named every one of them (3.4 MB on one line).
        QTest::newRow("many") << "many" << 2 << "(300000 in all)";
        // `../../../hub/other/...`: the URL's dot segments took the request to another repository.
        QTest::newRow("traversal") << "traversal" << 2 << "no checkpoint file";
        QTest::newRow("absolute") << "absolute" << 2 << "no checkpoint file";
        // `..%2F..%2F...`: '%' kept as typed, so the server decoded the name into a path elsewhere.
        QTest::newRow("percent-encoded") << "percent" << 0 << "";
        QTest::newRow("query") << "query" << 2 << "no checkpoint file";
        // Names with terminal escapes: those with C0 controls are no repository path; the one left
        // opens, its name printed escaped.
        QTest::newRow("escapes") << "escapes" << 0 << "";
        QTest::newRow("not JSON") << "not-json" << 2 << "lists no files";
        QTest::newRow("siblings not a list") << "no-siblings" << 2 << "lists no files";
        // A reply without end stops at 16 MiB.
        QTest::newRow("endless") << "endless" << 2 << "larger than";
    }
    void hubListings()
    {
        QFETCH(QString, listing);
        QFETCH(int, rc);
        QFETCH(QString, says);
        LoopbackServer server;
        QVERIFY(serve(server, QStringLiteral("zip.pt")));
        qputenv("HF_ENDPOINT", server.url(QString()).toUtf8());
        const auto r = run({"inspect", "hf://hub/" + s(listing)});
        qunsetenv("HF_ENDPOINT");
        checkOutcome(r, rc, says);
        if (QTest::currentTestFailed()) {
            return;
        }
        const auto outside = pathsOutside({QStringLiteral("/api/models/hub/") + listing + QLatin1Char('/'),
                                           QStringLiteral("/hub/") + listing + QStringLiteral("/resolve/")});
        QVERIFY2(outside.isEmpty(), qPrintable(outside.join(QLatin1Char(' '))));
    }

    // ---- S3-compatible stores (issue 41) --------------------------------------------------------

    // What `s3://CASE/dir/` makes of a store whose replies are bent per CASE (hostile_server.py's
    // S3_CASES): a listing without end, in a loop, not XML, with entities or nesting that would
    // blow up a naive parser, or past its size bound, ends in one line and exit 2; a 503 SlowDown
    // is waited out; a wrong region, an expired token say what to do and which credentials were
    // sent. The secret never shows.
    void s3Replies_data()
    {
        QTest::addColumn<QString>("input");
        QTest::addColumn<int>("rc");
        QTest::addColumn<QString>("says");
        QTest::newRow("endless listing") << "s3://s3-endless/dir/" << 2 << "goes on past 100 pages";
        QTest::newRow("token loop") << "s3://s3-loop/dir/" << 2 << "continuation token it gave before";
        QTest::newRow("truncated, no token") << "s3://s3-no-token/dir/" << 2 << "no NextContinuationToken";
        QTest::newRow("billion laughs") << "s3://s3-laughs/dir/" << 2 << "not a ListObjectsV2 reply";
        QTest::newRow("deep nesting") << "s3://s3-deep/dir/" << 2 << "not a ListObjectsV2 reply";
        QTest::newRow("not xml") << "s3://s3-not-xml/dir/" << 2 << "not a ListObjectsV2 reply";
        QTest::newRow("huge page") << "s3://s3-huge/dir/" << 2 << "larger than";
        QTest::newRow("size not a number") << "s3://s3-bad-size/dir/" << 2 << "no number";
        QTest::newRow("wrong region") << "s3://s3-region/dir/model.pt" << 2 << "set AWS_REGION=eu-west-1";
        QTest::newRow("expired token") << "s3://s3-expired/dir/model.pt" << 2
                                       << "ExpiredToken: The provided token has expired. (signed with the key "
                                          "...MPLE from AWS_ACCESS_KEY_ID, with its session token";
        QTest::newRow("503 SlowDown, then good") << "s3://s3-slowdown/dir/" << 0 << "remote: ";
    }
    void s3Replies()
    {
        QFETCH(QString, input);
        QFETCH(int, rc);
        QFETCH(QString, says);
        LoopbackServer server;
        QVERIFY(serve(server, QStringLiteral("zip.pt")));
        const QByteArray secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
        qputenv("AWS_ENDPOINT_URL", server.url(QString()).toUtf8());
        qputenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE");
        qputenv("AWS_SECRET_ACCESS_KEY", secret);
        qputenv("AWS_SESSION_TOKEN", "session-token-secret");
        const auto r = run({"inspect", s(input)});
        for (const char* v : {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}) {
            qunsetenv(v);
        }
        checkOutcome(r, rc, says);
        if (QTest::currentTestFailed()) {
            return;
        }
        QVERIFY2(!r.err.contains(secret) && !r.out.contains(secret), qPrintable(describe(r)));
        QVERIFY2(!r.err.contains("session-token-secret"), qPrintable(describe(r)));
        const QString bucket = input.section(QLatin1Char('/'), 2, 2);
        const auto outside = pathsOutside({QLatin1Char('/') + bucket + QLatin1Char('/')});
        QVERIFY2(outside.isEmpty(), qPrintable(outside.join(QLatin1Char(' '))));
    }

    // What `convert -o s3://CASE/dir/out.pt` makes of a store whose replies to a multipart upload are
    // bent per CASE (hostile_server.py's S3_WRITES): a completion answered 200 with an <Error> body,
    // parts refused or without an ETag, a start without an UploadId or with entities, an object
    // already there or appearing meanwhile, another region. Each ends in one short line; once an
    // upload was started it is aborted (DELETE ?uploadId), and a 503 SlowDown on a part is waited
    // out. The secret never shows.
    void s3Writes_data()
    {
        QTest::addColumn<QString>("bucket");
        QTest::addColumn<int>("rc");
        QTest::addColumn<QString>("says");
        QTest::addColumn<bool>("aborted");  // DELETE ?uploadId was sent
        QTest::newRow("complete: 200 with an <Error>")
            << "s3w-complete-error" << 1 << "the upload did not complete: CompleteMultipartUpload: InternalError"
            << true;
        QTest::newRow("part: 503 SlowDown, then good") << "s3w-part-slowdown" << 0 << "uploaded in 1 part" << false;
        QTest::newRow("part: 500") << "s3w-part-500" << 1
                                   << "cannot upload part 1 (UploadPart): HTTP 500: InternalError" << true;
        QTest::newRow("part: no ETag") << "s3w-no-etag" << 1 << "the server's reply has no ETag" << true;
        QTest::newRow("start: no UploadId") << "s3w-no-upload-id" << 1 << "gives no UploadId" << false;
        QTest::newRow("start: billion laughs") << "s3w-laughs" << 1 << "not the XML document S3 answers with" << false;
        QTest::newRow("key taken") << "s3w-exists" << 2 << "an object is already at this key; nothing written" << false;
        QTest::newRow("key taken meanwhile") << "s3w-precondition" << 2 << "an object appeared at the key" << true;
        QTest::newRow("wrong region") << "s3w-region" << 2 << "set AWS_REGION=eu-west-1" << false;
        QTest::newRow("good") << "s3w-good" << 0 << "uploaded in 1 part" << false;
    }
    void s3Writes()
    {
        QFETCH(QString, bucket);
        QFETCH(int, rc);
        QFETCH(QString, says);
        QFETCH(bool, aborted);
        LoopbackServer server;
        const QString methods = m_work.filePath(QStringLiteral("methods.log"));
        QFile::remove(methods);
        qputenv("HOSTILE_METHOD_LOG", methods.toUtf8());
        QVERIFY(serve(server, QStringLiteral("zip.pt")));
        const QByteArray secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
        qputenv("AWS_ENDPOINT_URL", server.url(QString()).toUtf8());
        qputenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE");
        qputenv("AWS_SECRET_ACCESS_KEY", secret);
        const auto r = run({"convert", s(gen(QStringLiteral("zip.pt"))), "-o",
                            s(QStringLiteral("s3://") + bucket + QStringLiteral("/dir/out.pt"))});
        for (const char* v : {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "HOSTILE_METHOD_LOG"}) {
            qunsetenv(v);
        }
        QVERIFY2(r.rc == rc && !r.timedOut, qPrintable(describe(r)));
        const QByteArray said = rc == 0 ? r.out : r.err;
        QVERIFY2(said.contains(says.toUtf8()),
                 qPrintable(describe(r) + QStringLiteral("; stdout: ") + QString::fromUtf8(r.out.right(300))));
        if (rc != 0) {
            QVERIFY2(r.err.count('\n') == 1 && r.err.size() < 1000, qPrintable(describe(r)));
        }
        QVERIFY2(!r.err.contains(secret) && !r.out.contains(secret), qPrintable(describe(r)));
        QFile log(methods);
        QVERIFY(log.open(QIODevice::ReadOnly));
        const QString sent = QString::fromUtf8(log.readAll());
        const bool deleted =
            sent.contains(QStringLiteral("DELETE /") + bucket + QStringLiteral("/dir/out.pt?uploadId=up-1"));
        QVERIFY2(deleted == aborted, qPrintable(sent));
        if (bucket == QStringLiteral("s3w-part-slowdown")) {
            QCOMPARE(sent.count(QStringLiteral("PUT /s3w-part-slowdown/dir/out.pt?partNumber=1")), 3);
        }
        if (bucket == QStringLiteral("s3w-exists")) {
            QVERIFY2(!sent.contains(QStringLiteral("POST")), qPrintable(sent));  // refused before any upload
        }
    }

    // ---- DCP's newer layouts by folder URL (issues 37 and 40) --------------------------------------

    // The zstd and safetensors DCP sets of hostile_sets.py (dcp_layout_sets) served by nginx: read by
    // range, not mapped, they go through dcp.cpp's other path (a zstd frame fetched, then inflated; a
    // safetensors header read at the file's end through SourceStorages). A bomb, a frame that claims
    // 1 TiB, one cut short: convert and diff end in one line and exit 2, bounded, writing nothing. A
    // safetensors file that lies about its chunk: check names it (dcp-item-unreadable, exit 1) and
    // convert refuses the set in one line, as on disk (tst_hostile_sets).
    void dcpLayoutsByUrl_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QString>("says");
        QTest::newRow("zstd: claims 1 TiB") << "dcp_zstd_claims_tib"
                                            << "says it holds 1.0 TiB";
        QTest::newRow("zstd: inflates past its chunk") << "dcp_zstd_bomb"
                                                       << "inflates past";
        QTest::newRow("zstd: a value inflating to 16 GiB") << "dcp_zstd_value_bomb"
                                                           << "inflates past";
        QTest::newRow("zstd: cut short") << "dcp_zstd_truncated"
                                         << "ends early";
        QTest::newRow("safetensors: moved") << "dcp_safetensors_moved"
                                            << "places it at [1, 0]";
        QTest::newRow("safetensors: reshaped") << "dcp_safetensors_reshaped"
                                               << "holds it as F32 [4, 3]";
        QTest::newRow("safetensors: no sharding info") << "dcp_safetensors_no_info"
                                                       << "without a readable DCP_SHARDING_INFO";
        QTest::newRow("safetensors: offsets past the end") << "dcp_safetensors_past_end"
                                                           << "cannot be read";
    }
    void dcpLayoutsByUrl()
    {
        QFETCH(QString, set);
        QFETCH(QString, says);
        if (nginxPath().isEmpty()) {
            QSKIP("no nginx here");
        }
        if (!m_layouts) {  // written and served once, for every row
            const QString files = m_work.filePath(QStringLiteral("www/files"));
            QVERIFY(QDir().mkpath(files));
            QProcess p;
            p.start(QStringLiteral(CKPTSCOPE_PYTHON),
                    {QStringLiteral("-c"),
                     QStringLiteral("import sys; sys.path.insert(0, sys.argv[1]); import hostile_sets; "
                                    "hostile_sets.dcp_layout_sets(sys.argv[2])"),
                     QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/hostile/gen"), files});
            QVERIFY(p.waitForFinished(120000));
            QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
            m_layouts = std::make_unique<LoopbackServer>();
            QVERIFY(
                m_layouts->start(ckpt::test::scriptPath("nginx_server.py"), {m_work.filePath(QStringLiteral("www"))}));
        }
        const std::string url = s(m_layouts->url(QStringLiteral("/files/") + set + QLatin1Char('/')));
        const QString out = m_work.filePath(set + QStringLiteral(".pt"));
        if (set.startsWith(QStringLiteral("dcp_zstd"))) {
            for (const auto& args :
                 {std::vector<std::string>{"convert", url, "-o", s(out)}, std::vector<std::string>{"diff", url, url}}) {
                const auto r = run(args);
                checkRefused(r);
                // diff's one line says a tensor could not be read; its report says why.
                QVERIFY2((r.err + r.out).contains(says.toUtf8()), qPrintable(describe(r)));
            }
        } else {
            const auto checked = run({"check", url});
            QVERIFY2(checked.rc == 1 && checked.out.contains("dcp-item-unreadable") &&
                         checked.out.contains(says.toUtf8()),
                     qPrintable(describe(checked) + QString::fromUtf8(checked.out.left(600))));
            const auto converted = run({"convert", url, "-o", s(out)});
            checkRefused(converted);
            QVERIFY2(converted.err.contains("dcp-item-unreadable"), qPrintable(describe(converted)));
        }
        QVERIFY(!QFile::exists(out));
    }

    // ---- a sharded set's member names -----------------------------------------------------------

    // An index over HTTP whose weight_map names no file beside it: nothing outside the set's folder
    // is asked for. "." was requested before the set was read (the shards are fetched ahead), and
    // "%2e%2e%2f..." went out as it was, for the server to decode into the parent folder.
    void setMembersStayBesideTheIndex_data()
    {
        QTest::addColumn<QString>("set");
        for (const char* c : {"dotdot", "slash", "dot", "encoded", "query"}) {
            QTest::newRow(c) << QString::fromLatin1(c);
        }
    }
    void setMembersStayBesideTheIndex()
    {
        QFETCH(QString, set);
        LoopbackServer server;
        QVERIFY(serve(server, QStringLiteral("zip.pt")));
        const auto r =
            run({"inspect",
                 s(server.url(QStringLiteral("/set/") + set + QStringLiteral("/model.safetensors.index.json")))});
        QVERIFY2(!r.timedOut && (r.rc == 0 || r.rc == 2) && r.err.count('\n') <= 1, qPrintable(describe(r)));
        const auto outside = pathsOutside({QStringLiteral("/set/") + set + QLatin1Char('/')});
        QVERIFY2(outside.isEmpty(), qPrintable(outside.join(QLatin1Char(' '))));
    }

    // ---- every reply a transfer checks ----------------------------------------------------------

    // Each way hostile_server.py breaks a reply, through check --values (every storage read) and
    // convert: exit 2 in one line, bounded, no output and no temporary file left; nothing is
    // written in the working folder.
    void transportReplies_data()
    {
        QTest::addColumn<QString>("kind");
        for (const char* k : {"ignore-range", "no-ranges", "endless", "redirect-loop", "wrong-range", "etag", "grow",
                              "stall", "truncated", "status-500", "retry-after-long", "need-token"}) {
            QTest::newRow(k) << QString::fromLatin1(k);
        }
    }
    void transportReplies()
    {
        QFETCH(QString, kind);
        LoopbackServer server;
        QVERIFY(serve(server, QStringLiteral("zip.pt")));
        const QString url = server.url(QLatin1Char('/') + kind + QStringLiteral("/zip.pt"));
        QTemporaryDir cwd;
        QTemporaryDir outDir;
        const QString before = QDir::currentPath();
        QVERIFY(QDir::setCurrent(cwd.path()));
        const auto values = run({"check", "--values", s(url)});
        const auto convert = run({"convert", s(url), "-o", s(outDir.filePath(QStringLiteral("out.pt")))});
        QVERIFY(QDir::setCurrent(before));
        checkRefused(values);
        checkRefused(convert);
        QVERIFY2(QDir(cwd.path()).isEmpty(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot),
                 "something was written in the working folder");
        QVERIFY2(QDir(outDir.path()).isEmpty(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot),
                 "an output or a temporary file was left");
    }
};

QTEST_GUILESS_MAIN(TestHostileRemote)
#include "tst_hostile_remote.moc"
