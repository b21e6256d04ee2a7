// core/remote against real servers on loopback: Debian's nginx under a temporary config (ranges,
// a Hub-shaped redirect to another port, a token check, the Hub API) and the tests' own
// misbehaving server. Every fixture read over HTTP must give what reading it from disk gives,
// storage bytes included, with the request counts issue 28 sets.
#include "checkpoint/checkpoint.h"
#include "remote/credentials.h"
#include "remote/location.h"
#include "remote/open_remote.h"
#include "remote/remote_folder.h"
#include "servers.h"

#include <QDir>
#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <stop_token>
#include <thread>

using ckpt::test::LoopbackServer;

namespace {

std::vector<std::byte> storageBytes(const ckpt::Checkpoint& c, ckpt::StorageIndex s)
{
    std::vector<std::byte> out;
    auto r = c.streamStorage(s, 0, c.storages[s].nbytes, [&](ckpt::Bytes b) {
        out.insert(out.end(), b.begin(), b.end());
        return true;
    });
    if (!r) {
        qWarning("%s", r.error().describe().c_str());
        return {};
    }
    return out;
}

struct Opened {
    ckpt::Expected<ckpt::CheckpointPtr> checkpoint;
    std::uint64_t requests = 0;
    std::uint64_t bytes = 0;
    std::shared_ptr<ckpt::remote::TransferStats> stats;
};

Opened openUrl(const QString& url, const std::vector<std::string>& headers = {})
{
    ckpt::remote::RemoteOptions o;
    o.stats = std::make_shared<ckpt::remote::TransferStats>();
    auto c = ckpt::remote::openRemoteInput(url.toStdString(), headers, o);
    return Opened{std::move(c), o.stats->requests.load(), o.stats->bytesRead.load(), o.stats};
}

}  // namespace

class TestRemote : public QObject {
    Q_OBJECT

    QTemporaryDir tmp_;
    LoopbackServer nginx_;
    QStringList fixtures_;

    QString url(const QString& path) const { return nginx_.url(path); }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(tmp_.isValid());
        const QString big = tmp_.filePath(QStringLiteral("big"));
        QVERIFY(QDir().mkpath(big));
        QVERIFY2(ckpt::test::makeBigFiles(big), "python3 with torch could not write the big files");
        QDir fx(QStringLiteral(CKPTSCOPE_FIXTURE_DIR));
        for (const auto& f : fx.entryList({QStringLiteral("*.pt"), QStringLiteral("*.safetensors")}, QDir::Files)) {
            fixtures_ << fx.filePath(f);
        }
        QVERIFY2(fixtures_.size() > 10, "the fixtures were not generated");
        QStringList served = fixtures_;
        served << big + QStringLiteral("/big.pt") << big + QStringLiteral("/big.safetensors")
               << big + QStringLiteral("/big_rezipped.pt") << big + QStringLiteral("/big_zip64.pt")
               << big + QStringLiteral("/big_legacy.pt") << big + QStringLiteral("/big_legacy_short.pt");
        QVERIFY(ckpt::test::makeServedTree(tmp_.filePath(QStringLiteral("root")), served));
        QVERIFY(nginx_.start(ckpt::test::scriptPath("nginx_server.py"), {tmp_.filePath(QStringLiteral("root"))}));
        qputenv("HF_ENDPOINT", url(QString()).toUtf8());
        qunsetenv("HF_TOKEN");
        qputenv("HF_HOME", tmp_.filePath(QStringLiteral("hf-home")).toUtf8());  // no login token
        qputenv("CKPTSCOPE_HTTP_TIMEOUT", "3");
        // A proxy from the environment would take loopback requests elsewhere.
        for (const char* v : {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
            qunsetenv(v);
        }
    }

    // A folder over HTTP (remote_folder.h): a member is the URL beside the folder's; a name that is
    // no plain file name is refused with no request at all; exists() answers with one byte.
    void urlFolderMembers()
    {
        using ckpt::remote::UrlFolder;
        auto stats = std::make_shared<ckpt::remote::TransferStats>();
        auto client =
            std::make_shared<ckpt::remote::HttpClient>(ckpt::remote::Credentials{}, ckpt::remote::HttpOptions{}, stats);
        const UrlFolder folder(client, url(QStringLiteral("/files/")).toStdString(), "FOLDER/", std::nullopt);
        QCOMPARE(folder.shown(), std::string("FOLDER"));
        QCOMPARE(folder.pathOf("a.pt"), std::string("FOLDER/a.pt"));
        for (const char* bad : {"../big.pt", "sub/big.pt", "", "..", "/etc/passwd"}) {
            auto r = folder.open(bad, "the test's index");
            QVERIFY2(!r && r.error().code == ckpt::ErrorCode::Corrupt, bad);
            QVERIFY(r.error().message.find("the test's index names") != std::string::npos);
        }
        QCOMPARE(stats->requests.load(), std::uint64_t{0});
        auto present = folder.exists("big.pt");
        QVERIFY(present && *present);
        QCOMPARE(stats->bytesRead.load(), std::uint64_t{1});
        auto absent = folder.exists("absent.pt");
        QVERIFY(absent && !*absent);
        auto opened = folder.open("big.pt", "the test");
        QVERIFY(opened);
        QCOMPARE((*opened)->size(),
                 static_cast<std::uint64_t>(QFileInfo(tmp_.filePath(QStringLiteral("big/big.pt"))).size()));
        auto missing = folder.open("absent.pt", "the test");
        QVERIFY(!missing && folder.missing(missing.error()));
        QCOMPARE(folder.list().value(), std::optional<std::vector<std::string>>());
    }

    void locations()
    {
        using ckpt::remote::parseLocation;
        using ckpt::remote::Scheme;
        auto a = parseLocation("hf://openai-community/gpt2/model.safetensors", "https://huggingface.co");
        QVERIFY(a);
        QCOMPARE(a->scheme, Scheme::HubFile);
        QCOMPARE(a->url, std::string("https://huggingface.co/openai-community/gpt2/resolve/main/model.safetensors"));
        auto b = parseLocation("hf://org/repo@refs%2Fpr%2F1/w.bin", "http://mirror:8080");  // as HfFileSystem writes it
        QVERIFY(b);
        QCOMPARE(b->url, std::string("http://mirror:8080/org/repo/resolve/refs%2Fpr%2F1/w.bin"));
        auto c = parseLocation("hf://org/repo@v1.0/sub dir/w.bin", "http://m");
        QVERIFY(c);
        QCOMPARE(c->revision, std::string("v1.0"));
        QCOMPARE(c->url, std::string("http://m/org/repo/resolve/v1.0/sub%20dir/w.bin"));
        auto d = parseLocation("hf://org/repo", "http://m");
        QVERIFY(d);
        QCOMPARE(d->scheme, Scheme::HubRepo);
        QCOMPARE(d->revision, std::string("main"));
        QVERIFY(!parseLocation("hf://justone", "http://m"));
        QVERIFY(!parseLocation("http:///nohost", "http://m"));
        QVERIFY(ckpt::remote::isRemote("HTTPS://x/y"));
        QVERIFY(!ckpt::remote::isRemote("model.pt"));
        QCOMPARE(ckpt::remote::originOf("http://user:pw@Host:8080/a?b"), std::string("http://host:8080"));
    }

    void credentials()
    {
        ckpt::remote::Redactor r;
        r.add("hf_abcdef");
        QCOMPARE(r.apply("token hf_abcdef and hf_abcdef"), std::string("token *** and ***"));
        QVERIFY(!ckpt::remote::parseHeader("nocolon"));
        auto h = ckpt::remote::parseHeader("Authorization:  Bearer x1 ");
        QVERIFY(h);
        QCOMPARE(h->value, std::string("Bearer x1"));
        ckpt::remote::Credentials c;
        c.hubOrigin = "https://huggingface.co";
        c.hubToken = "hf_t";
        c.headers.push_back(*h);
        c.headerOrigins.push_back("http://a:1");
        QCOMPARE(c.headersFor("https://cdn.example").size(), std::size_t{0});  // a redirect's host gets nothing
        QCOMPARE(c.headersFor("https://huggingface.co").size(), std::size_t{1});
        QCOMPARE(c.headersFor("http://a:1").size(), std::size_t{1});
        QTemporaryDir home;
        QFile token(home.filePath(QStringLiteral("token")));
        QVERIFY(token.open(QIODevice::WriteOnly) && token.write("hf_fromfile\n") > 0);
        token.close();
        const QByteArray old = qgetenv("HF_HOME");
        qputenv("HF_HOME", home.path().toUtf8());
        QCOMPARE(ckpt::remote::findHubToken().value_or(""), std::string("hf_fromfile"));
        qputenv("HF_TOKEN", "hf_env");
        QCOMPARE(ckpt::remote::findHubToken().value_or(""), std::string("hf_env"));
        qunsetenv("HF_TOKEN");
        qputenv("HF_HOME", old);
    }

    // Every fixture: the same tree, storage table and storage bytes as from disk.
    void fixturesAsOnDisk()
    {
        for (const auto& f : std::as_const(fixtures_)) {
            const QString name = QFileInfo(f).fileName();
            auto local = ckpt::openCheckpoint(f.toStdString());
            auto remote = openUrl(url(QStringLiteral("/files/") + name));
            QCOMPARE(remote.checkpoint.ok(), local.ok());
            if (!local) {
                QCOMPARE(remote.checkpoint.error().code, local.error().code);
                continue;
            }
            const auto& l = **local;
            const auto& r = **remote.checkpoint;
            QCOMPARE(r.format, l.format);
            QCOMPARE(r.fileSize, l.fileSize);
            QCOMPARE(r.nodes.size(), l.nodes.size());
            QCOMPARE(r.tensors.size(), l.tensors.size());
            QCOMPARE(r.storages.size(), l.storages.size());
            QCOMPARE(r.warnings, l.warnings);
            for (std::uint32_t i = 0; i < l.tensors.size(); ++i) {
                const ckpt::TensorIndex t{i};
                QCOMPARE(r.tensors[t].path.str(), l.tensors[t].path.str());
            }
            for (std::uint32_t i = 0; i < l.storages.size(); ++i) {
                const ckpt::StorageIndex s{i};
                QCOMPARE(r.storages[s].nbytes, l.storages[s].nbytes);
                QCOMPARE(r.storages[s].fileOffset, l.storages[s].fileOffset);
                if (l.storages[s].present) {
                    QVERIFY2(storageBytes(r, s) == storageBytes(l, s), qPrintable(name));
                }
            }
        }
    }

    // Issue 28's targets: a torch zip's metadata in at most 4 requests and 1 MiB plus the pickle;
    // a safetensors header in at most 2; the storages fetched when read, and equal to the file's.
    void partialReads_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<int>("maxRequests");
        QTest::newRow("torch zip") << QStringLiteral("big.pt") << 4;
        QTest::newRow("safetensors") << QStringLiteral("big.safetensors") << 2;
        QTest::newRow("zip from Python's zipfile") << QStringLiteral("big_rezipped.pt") << 4;
        // The last storage's header too: assumed where torch puts it, it would end in the directory.
        QTest::newRow("zip with ZIP64 extras") << QStringLiteral("big_zip64.pt") << 5;
        // The tail (taken for a zip's), then the head with the pickles: no storage record is read.
        QTest::newRow("legacy stream") << QStringLiteral("big_legacy.pt") << 2;
    }
    void partialReads()
    {
        QFETCH(QString, name);
        QFETCH(int, maxRequests);
        auto o = openUrl(url(QStringLiteral("/files/") + name));
        QVERIFY2(o.checkpoint, o.checkpoint ? "" : o.checkpoint.error().describe().c_str());
        QVERIFY2(o.requests <= static_cast<std::uint64_t>(maxRequests), qPrintable(QString::number(o.requests)));
        QVERIFY2(o.bytes < (1U << 20) + (64U << 10), qPrintable(QString::number(o.bytes)));
        auto local = ckpt::openCheckpoint(tmp_.filePath(QStringLiteral("big/") + name).toStdString());
        QVERIFY(local);
        const auto& c = **o.checkpoint;
        for (std::uint32_t i = 0; i < c.storages.size(); ++i) {
            QVERIFY(storageBytes(c, ckpt::StorageIndex{i}) == storageBytes(**local, ckpt::StorageIndex{i}));
        }
        QVERIFY(c.checkUnchanged());
        // The whole file once, give or take the metadata and a header per storage.
        QVERIFY(o.stats->bytesRead.load() < c.fileSize + (2U << 20));
    }

    // A legacy stream's record counts are assumed as its pickle declares them: a record of another
    // size is refused when its bytes are read, never read from the wrong offset.
    void legacyRecordOfAnotherSize()
    {
        auto o = openUrl(url(QStringLiteral("/files/big_legacy_short.pt")));
        QVERIFY2(o.checkpoint, o.checkpoint ? "" : o.checkpoint.error().describe().c_str());
        QVERIFY(!ckpt::openCheckpoint(tmp_.filePath(QStringLiteral("big/big_legacy_short.pt")).toStdString()));
        const auto& c = **o.checkpoint;
        // The second record in the file (records follow the key list, not the storage table).
        std::vector<std::uint32_t> byOffset(c.storages.size());
        std::iota(byOffset.begin(), byOffset.end(), 0);
        std::sort(byOffset.begin(), byOffset.end(), [&](std::uint32_t a, std::uint32_t b) {
            return c.storages[ckpt::StorageIndex{a}].fileOffset < c.storages[ckpt::StorageIndex{b}].fileOffset;
        });
        QVERIFY(storageBytes(c, ckpt::StorageIndex{byOffset[0]}).size() ==
                c.storages[ckpt::StorageIndex{byOffset[0]}].nbytes);
        auto r = c.streamStorage(ckpt::StorageIndex{byOffset[1]}, 0, 16, [](ckpt::Bytes) { return true; });
        QVERIFY(!r);
        QCOMPARE(r.error().code, ckpt::ErrorCode::Corrupt);
        QVERIFY2(r.error().message.find("not laid out as torch.save writes it") != std::string::npos,
                 r.error().message.c_str());
    }

    void hub()
    {
        // A file, through the Hub's redirect to its CDN on another port.
        auto f = openUrl(QStringLiteral("hf://org/model/big.safetensors"));
        QVERIFY2(f.checkpoint, f.checkpoint ? "" : f.checkpoint.error().describe().c_str());
        QCOMPARE((*f.checkpoint)->tensors.size(), std::size_t{12});
        QVERIFY(f.requests <= 3);  // the redirect hop, the head, maybe the rest of the header
        // A whole repository: its one weights file, found through the Hub API.
        for (const char* repo : {"hf://org/repo", "hf://org/repo@v1"}) {
            auto r = openUrl(QString::fromLatin1(repo));
            QVERIFY2(r.checkpoint, r.checkpoint ? "" : r.checkpoint.error().describe().c_str());
            QCOMPARE((*r.checkpoint)->format, ckpt::Format::Safetensors);
        }
        // Gated: the Hub's reason and the login command; a refused token is never shown.
        auto g = openUrl(QStringLiteral("hf://gated/model/big.pt"));
        QVERIFY(!g.checkpoint);
        const std::string m = g.checkpoint.error().describe();
        QVERIFY2(m.find("restricted") != std::string::npos && m.find("huggingface-cli login") != std::string::npos,
                 m.c_str());
        qputenv("HF_TOKEN", "hf_wrongtoken");
        auto w = openUrl(QStringLiteral("hf://gated/model/big.pt"));
        QVERIFY(!w.checkpoint);
        QVERIFY(w.checkpoint.error().describe().find("hf_wrongtoken") == std::string::npos);
        qputenv("HF_TOKEN", "hf_secret");
        auto ok = openUrl(QStringLiteral("hf://gated/model/big.pt"));
        QVERIFY2(ok.checkpoint, ok.checkpoint ? "" : ok.checkpoint.error().describe().c_str());
        qunsetenv("HF_TOKEN");
    }

    void headerToken()
    {
        auto none = openUrl(url(QStringLiteral("/private/big.pt")));
        QVERIFY(!none.checkpoint);
        QVERIFY(none.checkpoint.error().message.find("401") != std::string::npos);
        auto wrong = openUrl(url(QStringLiteral("/private/big.pt")), {"Authorization: Bearer notit"});
        QVERIFY(!wrong.checkpoint);
        QVERIFY(wrong.checkpoint.error().describe().find("notit") == std::string::npos);
        auto ok = openUrl(url(QStringLiteral("/private/big.pt")), {"Authorization: Bearer secret"});
        QVERIFY2(ok.checkpoint, ok.checkpoint ? "" : ok.checkpoint.error().describe().c_str());
        QVERIFY(!openUrl(url(QStringLiteral("/files/big.pt")), {"no colon"}).checkpoint);
    }

    void hostile_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("says");
        QTest::newRow("ignores Range") << QStringLiteral("ignore-range") << QStringLiteral("does not support range");
        QTest::newRow("endless body") << QStringLiteral("endless") << QStringLiteral("more bytes than");
        QTest::newRow("redirect loop") << QStringLiteral("redirect-loop") << QStringLiteral("redirect loop");
        QTest::newRow("wrong Content-Range") << QStringLiteral("wrong-range") << QStringLiteral("wrong Content-Range");
        QTest::newRow("ETag changes") << QStringLiteral("etag") << QStringLiteral("changed on the server");
        QTest::newRow("size changes") << QStringLiteral("grow") << QStringLiteral("changed on the server");
        QTest::newRow("stalls") << QStringLiteral("stall") << QStringLiteral("stalled");
        QTest::newRow("truncated") << QStringLiteral("truncated") << QStringLiteral("truncated");
        QTest::newRow("500") << QStringLiteral("status-500") << QStringLiteral("HTTP 500");
        QTest::newRow("401") << QStringLiteral("need-token") << QStringLiteral("HTTP 401");
    }
    void hostile()
    {
        QFETCH(QString, kind);
        QFETCH(QString, says);
        LoopbackServer bad;
        QVERIFY(bad.start(ckpt::test::scriptPath("hostile_server.py"), {tmp_.filePath(QStringLiteral("big/big.pt"))}));
        auto o = openUrl(bad.url(QStringLiteral("/") + kind + QStringLiteral("/big.pt")));
        ckpt::Expected<void> read;
        if (o.checkpoint) {  // metadata survived (the misbehaviour starts later): read the tensors
            const auto& c = **o.checkpoint;
            for (std::uint32_t i = 0; i < c.storages.size() && read; ++i) {
                read = c.streamStorage(ckpt::StorageIndex{i}, 0, c.storages[ckpt::StorageIndex{i}].nbytes,
                                       [](ckpt::Bytes) { return true; });
            }
            if (read) {
                read = c.checkUnchanged();
            }
        }
        const std::string message =
            o.checkpoint ? (read ? std::string() : read.error().describe()) : o.checkpoint.error().describe();
        QVERIFY2(message.find(says.toStdString()) != std::string::npos, message.c_str());
        QVERIFY(message.find('\n') == std::string::npos);
        // Bounded: an endless body costs at most what was asked for.
        QVERIFY2(o.stats->bytesRead.load() < (64U << 20), qPrintable(QString::number(o.stats->bytesRead.load())));
    }

    // A stop request (the window's Cancel) ends a stalled transfer at once with Cancelled.
    void cancel()
    {
        LoopbackServer bad;
        QVERIFY(bad.start(ckpt::test::scriptPath("hostile_server.py"), {tmp_.filePath(QStringLiteral("big/big.pt"))}));
        std::stop_source stop;
        ckpt::remote::RemoteOptions o;
        o.http.lowSpeedTimeS = 60;
        o.http.stop = stop.get_token();
        QElapsedTimer t;
        t.start();
        std::thread canceller([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            stop.request_stop();
        });
        auto c = ckpt::remote::openRemoteInput(bad.url(QStringLiteral("/stall/big.pt")).toStdString(), {}, o);
        canceller.join();
        QVERIFY(!c);
        QCOMPARE(c.error().code, ckpt::ErrorCode::Cancelled);
        QVERIFY2(t.elapsed() < 5000, qPrintable(QString::number(t.elapsed())));
    }

    void retriesOn429()
    {
        LoopbackServer bad;
        QVERIFY(bad.start(ckpt::test::scriptPath("hostile_server.py"), {tmp_.filePath(QStringLiteral("big/big.pt"))}));
        auto o = openUrl(bad.url(QStringLiteral("/status-429/big.pt")));
        QVERIFY2(o.checkpoint, o.checkpoint ? "" : o.checkpoint.error().describe().c_str());
    }

    // --download of a body without end stops at the limit (the free space of $TMPDIR, less some, by
    // default), and leaves nothing behind.
    void downloadOfEndlessBody()
    {
        LoopbackServer bad;
        QVERIFY(bad.start(ckpt::test::scriptPath("hostile_server.py"), {tmp_.filePath(QStringLiteral("big/big.pt"))}));
        QTemporaryDir dir;
        qputenv("TMPDIR", dir.path().toUtf8());
        ckpt::remote::RemoteOptions o;
        o.download = true;
        o.downloadLimit = std::uint64_t{40} << 20;  // more than the file, which the zeros then pass
        auto c = ckpt::remote::openRemoteInput(bad.url(QStringLiteral("/ignore-range/big.pt")).toStdString(), {}, o);
        qunsetenv("TMPDIR");
        QVERIFY(!c);
        QVERIFY2(c.error().code == ckpt::ErrorCode::Limit, c.error().describe().c_str());
        QVERIFY(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).isEmpty());
    }

    // The server's Retry-After is waited for: the backoff alone (0.25 + 0.5 + 1 s) asks again
    // too early for this server, which keeps answering 429 until its 2 s have passed. One that
    // asks for an hour gets its answer said, at once.
    void retryAfter()
    {
        LoopbackServer bad;
        QVERIFY(bad.start(ckpt::test::scriptPath("hostile_server.py"), {tmp_.filePath(QStringLiteral("big/big.pt"))}));
        auto o = openUrl(bad.url(QStringLiteral("/retry-after/big.pt")));
        QVERIFY2(o.checkpoint, o.checkpoint ? "" : o.checkpoint.error().describe().c_str());
        QElapsedTimer t;
        t.start();
        auto longer = openUrl(bad.url(QStringLiteral("/retry-after-long/big.pt")));
        QVERIFY(!longer.checkpoint);
        QVERIFY2(longer.checkpoint.error().message.find("asks to be asked again in 3600 s (Retry-After)") !=
                     std::string::npos,
                 longer.checkpoint.error().message.c_str());
        QCOMPARE(longer.requests, std::uint64_t{1});
        QVERIFY(t.elapsed() < 10000);
    }
};

// Without nginx the suite is "not run" (exit 77, SKIP_RETURN_CODE in CMake), never passed.
int main(int argc, char** argv)
{
    if (ckpt::test::nginxPath().isEmpty()) {
        std::fputs("nginx is not installed (apt-get install nginx-light): the remote tests need it\n", stderr);
        return 77;  // NOLINT(readability-magic-numbers): ctest's skip code
    }
    QCoreApplication app(argc, argv);
    TestRemote t;
    return QTest::qExec(&t, argc, argv);
}
#include "tst_remote.moc"
