// The real `ckptscope` binary on s3:// inputs served by moto's S3 server on loopback
// (s3_server.py, Debian's python3-moto in the PyTorch 2.x root): one server that checks every
// request's Signature Version 4 against the key it made, one that checks nothing (unsigned
// requests and folder listings, which moto cannot check: see s3_server.py). check of a file over
// S3 equals check on disk, reading a fraction of it; a set, a folder of one file, a listing over
// three pages; credentials from the environment and from ~/.aws files; a refused key says where it
// came from and never shows its secret. convert -o s3://: the object another client downloads is the
// local file's bytes and real torch loads it; a key already taken needs --force; a run stopped by a
// signal aborts its upload. Without the root or moto the suite is not run (exit 77).
#include "process_run.h"
#include "servers.h"

#include <QCryptographicHash>
#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtEndian>
#include <QtTest>

#include <csignal>
#include <cstdio>

using ckpt::test::LoopbackServer;
using ckpt::test::ProcessResult;
using ckpt::test::runProcess;
using ckpt::test::sameAsOnDisk;

namespace {

const QString kTorch2Python = QStringLiteral(CKPTSCOPE_SOURCE_DIR "/scripts/torch2-python.sh");

ProcessResult cli(const QStringList& args, int timeoutMs = 120000)
{
    std::vector<std::string> argv{CKPTSCOPE_TEST_CLI};
    for (const auto& a : args) {
        argv.push_back(a.toStdString());
    }
    return runProcess(argv, timeoutMs);
}

QJsonObject json(const QByteArray& out)
{
    return QJsonDocument::fromJson(out).object();
}

// check --json's findings with the input's name taken out.
QJsonArray findings(const QByteArray& out, const QString& name)
{
    QByteArray text = out;
    text.replace(name.toUtf8(), "FILE");
    return json(text).value(QStringLiteral("findings")).toArray();
}

QString describe(const ProcessResult& r)
{
    return QStringLiteral("rc %1; stderr: %2").arg(r.rc).arg(QString::fromUtf8(r.err.left(600)));
}

void clearAws()
{
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                          "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                          "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"}) {
        qunsetenv(v);
    }
}

bool writeFile(const QString& path, const QByteArray& text)
{
    QFile f(path);
    return QDir().mkpath(QFileInfo(path).path()) && f.open(QIODevice::WriteOnly) && f.write(text) == text.size();
}

QString sha256Of(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    QCryptographicHash h(QCryptographicHash::Sha256);
    h.addData(&f);
    return QString::fromLatin1(h.result().toHex());
}

}  // namespace

class TestS3Cli : public QObject {
    Q_OBJECT

    QTemporaryDir tmp_;
    LoopbackServer signed_;    // checks signatures
    LoopbackServer unsigned_;  // checks nothing
    QString fixtures_ = QStringLiteral(CKPTSCOPE_FIXTURE_DIR);
    QString set_ = QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/sharded/hf_st");
    QString dcp_ = QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/dcp");

    QString endpoint(const LoopbackServer& s) const { return s.url(QString()); }

    // The environment of a run against the signing server, with its key.
    void useSigned()
    {
        clearAws();
        qputenv("AWS_ENDPOINT_URL", endpoint(signed_).toUtf8());
        qputenv("AWS_ACCESS_KEY_ID", signed_.word(0).toUtf8());
        qputenv("AWS_SECRET_ACCESS_KEY", signed_.word(1).toUtf8());
    }

    // s3_objects.py against the signing server: the bucket's uploads in progress and each key's
    // SHA-256, size and what torch.load made of it, as another S3 client reads them.
    QJsonObject objects(const QStringList& keys, const QString& command = QStringLiteral("report"))
    {
        QProcess p;
        p.setProcessChannelMode(QProcess::ForwardedErrorChannel);
        p.start(kTorch2Python, QStringList{ckpt::test::scriptPath("s3_objects.py"), endpoint(signed_), signed_.word(0),
                                           signed_.word(1), command, QStringLiteral("bkt")} +
                                   keys);
        if (!p.waitForFinished(300000) || p.exitCode() != 0) {
            return {};
        }
        return json(p.readAllStandardOutput());
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(tmp_.isValid());
        QStringList objects;
        for (const char* f : {"ddp_sd.pt", "big40k.pt", "model.safetensors"}) {
            QVERIFY2(QFileInfo::exists(fixtures_ + QLatin1Char('/') + QLatin1String(f)), f);
        }
        // 16 MiB of one tensor: what a read of its header and checks needs is a small part of it.
        const QString big = tmp_.filePath(QStringLiteral("big.safetensors"));
        {
            const QByteArray header = R"({"w":{"dtype":"F32","shape":[4194304],"data_offsets":[0,16777216]}})";
            QByteArray file(8, '\0');
            qToLittleEndian<quint64>(header.size(), file.data());
            file += header + QByteArray(16 << 20, '\0');
            QVERIFY(writeFile(big, file));
        }
        objects << QStringLiteral("--object") << QStringLiteral("bkt/big.safetensors=") + big;
        objects << QStringLiteral("--object")
                << QStringLiteral("bkt/ddp_sd.pt=") + fixtures_ + QStringLiteral("/ddp_sd.pt")
                << QStringLiteral("--object")
                << QStringLiteral("bkt/big40k.pt=") + fixtures_ + QStringLiteral("/big40k.pt")
                << QStringLiteral("--object")
                << QStringLiteral("bkt/one/model.safetensors=") + fixtures_ + QStringLiteral("/model.safetensors");
        for (const auto& f : QDir(set_).entryList(QDir::Files)) {
            objects << QStringLiteral("--object")
                    << QStringLiteral("bkt/hf/") + f + QLatin1Char('=') + set_ + QLatin1Char('/') + f;
        }
        // DCP folders, read through the same folder interface as on disk; a ZeRO folder's names
        // (their bytes do not matter: it is refused by its listing).
        for (const char* name : {"dcp_basic", "dcp_safetensors", "dcp_missing_file"}) {
            const QDir dir(dcp_ + QLatin1Char('/') + QLatin1String(name));
            for (const auto& f : dir.entryList(QDir::Files | QDir::Hidden)) {
                objects << QStringLiteral("--object")
                        << QStringLiteral("bkt/") + QLatin1String(name) + QLatin1Char('/') + f + QLatin1Char('=') +
                               dir.filePath(f);
            }
        }
        // FSDP rank files (ShardedTensor, DTensor), found by the prefix's listing.
        for (const char* name : {"fsdp_st", "fsdp_dtensor", "fsdp_lost_rank"}) {
            const QDir dir(fixtures_ + QStringLiteral("/fsdp/") + QLatin1String(name));
            for (const auto& f : dir.entryList(QDir::Files)) {
                objects << QStringLiteral("--object")
                        << QStringLiteral("bkt/") + QLatin1String(name) + QLatin1Char('/') + f + QLatin1Char('=') +
                               dir.filePath(f);
            }
        }
        // ZeRO save folders (gen_zero.py's torch.save files): `latest` and the tag folder's rank files;
        // one whose `latest` names a folder outside it.
        for (const char* name : {"zero2_w3", "zero3_bf16_w2", "zero2_stale_rank"}) {
            const QDir dir(QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR "/") + QLatin1String(name));
            for (const QString& f : {QStringLiteral("latest"), QStringLiteral("global_step3/*")}) {
                const QFileInfo at(dir.filePath(f));
                for (const auto& g : QDir(at.path()).entryList({at.fileName()}, QDir::Files)) {
                    const QString key = QFileInfo(dir.relativeFilePath(at.path() + QLatin1Char('/') + g)).filePath();
                    objects << QStringLiteral("--object")
                            << QStringLiteral("bkt/") + QLatin1String(name) + QLatin1Char('/') + key +
                                   QLatin1Char('=') + at.path() + QLatin1Char('/') + g;
                }
            }
        }
        QVERIFY(writeFile(tmp_.filePath(QStringLiteral("evil_latest")), "../zero2_w3/global_step3\n"));
        objects << QStringLiteral("--object")
                << QStringLiteral("bkt/zero_evil/latest=") + tmp_.filePath(QStringLiteral("evil_latest"));
        const QString script = ckpt::test::scriptPath("s3_server.py");
        QVERIFY(signed_.launch(kTorch2Python, QStringList{script} + objects));
        QVERIFY(
            unsigned_.launch(kTorch2Python, QStringList{script, QStringLiteral("--no-auth"),
                                                        QStringLiteral("--listing"), QStringLiteral("bkt/many/=2100")} +
                                                objects));
        // moto starts in about 15 s on a busy machine; its setup puts each object.
        QVERIFY2(signed_.waitReady(180000) && unsigned_.waitReady(180000), "moto's S3 server did not start");
        QVERIFY(!signed_.word(1).isEmpty());
        qputenv("HOME", tmp_.filePath(QStringLiteral("home")).toUtf8());
        qputenv("CKPTSCOPE_HTTP_TIMEOUT", "5");
        for (const char* v : {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
            qunsetenv(v);
        }
    }

    // Signed reads: check's findings as on disk (a 40,000-tensor zip among them), reading a small
    // part of a 16 MiB file.
    void signedFilesEqualOnDisk()
    {
        useSigned();
        for (const char* name : {"ddp_sd.pt", "big40k.pt", "big.safetensors"}) {
            const QString local = QLatin1String(name) == QLatin1String("big.safetensors")
                                      ? tmp_.filePath(QLatin1String(name))
                                      : fixtures_ + QLatin1Char('/') + QLatin1String(name);
            const QString remote = QStringLiteral("s3://bkt/") + QLatin1String(name);
            const auto l = cli({QStringLiteral("check"), QStringLiteral("--json"), local});
            const auto r = cli({QStringLiteral("check"), QStringLiteral("--json"), remote});
            QVERIFY2(r.rc == l.rc, qPrintable(describe(r)));
            QCOMPARE(findings(r.out, remote), findings(l.out, local));
            const auto stats = json(r.out).value(QStringLiteral("remote")).toObject();
            const auto read = stats.value(QStringLiteral("bytes_read")).toInteger();
            // A file under the first request's 64 KiB is read whole; the 40,000-tensor zip's directory
            // and pickle are most of it; the 16 MiB file's header is the first 64 KiB.
            const qint64 size = QFileInfo(local).size();
            const qint64 bound = QLatin1String(name) == QLatin1String("big.safetensors") ? 256 << 10
                                 : size < (64 << 10)                                     ? size + 1
                                                                                         : size * 3 / 4;
            QVERIFY2(read > 0 && read < bound, qPrintable(QStringLiteral("%1 read %2 of %3")
                                                              .arg(QLatin1String(name))
                                                              .arg(read)
                                                              .arg(QFileInfo(local).size())));
        }
    }

    // A DCP folder named by its .metadata's key, signed: no listing, the data files it names read
    // by range.
    void signedDcpByMetadata()
    {
        useSigned();
        const QString dir = dcp_ + QStringLiteral("/dcp_basic");
        const auto l = cli({QStringLiteral("check"), QStringLiteral("--json"), dir});
        const auto r =
            cli({QStringLiteral("check"), QStringLiteral("--json"), QStringLiteral("s3://bkt/dcp_basic/.metadata")});
        QVERIFY2(r.rc == l.rc, qPrintable(describe(r)));
        QCOMPARE(findings(r.out, QStringLiteral("s3://bkt/dcp_basic")), findings(l.out, dir));
    }

    // A 16 MiB DCP folder of two ranks, signed, through a proxy that counts the requests in flight
    // (s3_server.py --in-flight): its items' first bytes are asked for several at a time, each request
    // signed on its own connection (moto checks every signature), and the output is what the folder
    // on disk gives.
    void signedDcpRequestsInParallel()
    {
        const QString dir = tmp_.filePath(QStringLiteral("dcp_big"));
        QVERIFY2(runProcess({CKPTSCOPE_PYTHON, "-c", R"(
import sys, torch
sys.path.insert(0, sys.argv[1])
import gen_dcp
torch.manual_seed(0)
sd = {f'layer{i}.weight': gen_dcp.shard_dim(torch.randn(1024, 1024), 0, 2) for i in range(4)}
gen_dcp.write_dcp(sys.argv[2], sd, expected=False)
)",
                             std::string(CKPTSCOPE_SOURCE_DIR) + "/tests/sharded", dir.toStdString()})
                         .rc == 0,
                 "python3 with torch could not write the DCP folder");
        QStringList args{ckpt::test::scriptPath("s3_server.py"), QStringLiteral("--in-flight"),
                         tmp_.filePath(QStringLiteral("in-flight"))};
        for (const auto& f : QDir(dir).entryList(QDir::Files | QDir::Hidden)) {
            args << QStringLiteral("--object")
                 << QStringLiteral("bkt/big/") + f + QLatin1Char('=') + dir + QLatin1Char('/') + f;
        }
        LoopbackServer counted;
        QVERIFY(counted.launch(kTorch2Python, args));
        QVERIFY2(counted.waitReady(180000), "moto's S3 server did not start");
        clearAws();
        qputenv("AWS_ENDPOINT_URL", endpoint(counted).toUtf8());
        qputenv("AWS_ACCESS_KEY_ID", counted.word(0).toUtf8());
        qputenv("AWS_SECRET_ACCESS_KEY", counted.word(1).toUtf8());
        for (const char* command : {"inspect", "check"}) {
            QFile::remove(tmp_.filePath(QStringLiteral("in-flight")));
            const auto r =
                cli({QLatin1String(command), QStringLiteral("--json"), QStringLiteral("s3://bkt/big/.metadata")});
            const auto l = cli({QLatin1String(command), QStringLiteral("--json"), dir});
            QVERIFY2(r.rc == 0 && r.rc == l.rc, qPrintable(describe(r)));
            QFile f(tmp_.filePath(QStringLiteral("in-flight")));
            QVERIFY(f.open(QIODevice::ReadOnly));
            const int most = f.readAll().trimmed().toInt();
            qInfo("%s: at most %d requests in flight at once", command, most);
            QVERIFY2(most > 1, qPrintable(QLatin1String(command) + QStringLiteral(": ") + QString::number(most)));
            // The set and its tensors as on disk (the input's own name aside: a folder, a .metadata).
            auto same = [](QByteArray out, const QString& name) {
                out.replace(name.toUtf8(), "SET");
                const auto o = json(out);
                return QJsonArray{o.value(QStringLiteral("set")), o.value(QStringLiteral("tensors")),
                                  o.value(QStringLiteral("findings"))};
            };
            QCOMPARE(same(r.out, QStringLiteral("s3://bkt/big")), same(l.out, dir));
        }
    }

    void signedSetByIndex()
    {
        useSigned();
        const auto r = cli({QStringLiteral("inspect"), QStringLiteral("s3://bkt/hf/model.safetensors.index.json")});
        QVERIFY2(r.rc == 0, qPrintable(describe(r)));
        QVERIFY(r.out.contains("model-00002-of-00003.safetensors"));
    }

    // A wrong secret: one line naming the key's source and the server's code, never the secret.
    void refusedKeySaysWhere()
    {
        useSigned();
        const QByteArray wrong = "thisIsNotTheSecretAtAllButLooksLikeOne000";
        qputenv("AWS_SECRET_ACCESS_KEY", wrong);
        const auto r = cli({QStringLiteral("inspect"), QStringLiteral("s3://bkt/ddp_sd.pt")});
        QCOMPARE(r.rc, 2);
        QCOMPARE(r.err.trimmed().count('\n'), 0);
        QVERIFY2(r.err.contains("HTTP 403: SignatureDoesNotMatch") && r.err.contains("from AWS_ACCESS_KEY_ID"),
                 qPrintable(describe(r)));
        QVERIFY(!r.err.contains(wrong) && !r.out.contains(wrong));
    }

    // AWS_PROFILE's keys in ~/.aws/credentials, its endpoint and region in ~/.aws/config.
    void profileFiles()
    {
        clearAws();
        const QString home = tmp_.filePath(QStringLiteral("home"));
        QVERIFY(writeFile(home + QStringLiteral("/.aws/config"),
                          "[default]\nregion = eu-west-3\n\n[profile ci]\nregion = us-east-1\nendpoint_url = " +
                              endpoint(signed_).toUtf8() + "\ns3 =\n  addressing_style = path\n"));
        QVERIFY(writeFile(home + QStringLiteral("/.aws/credentials"),
                          "[default]\naws_access_key_id = AKIDWRONG\naws_secret_access_key = wrong\n[ci]\n"
                          "aws_access_key_id = " +
                              signed_.word(0).toUtf8() + "\naws_secret_access_key = " + signed_.word(1).toUtf8() +
                              "\n"));
        qputenv("AWS_PROFILE", "ci");
        const auto r = cli({QStringLiteral("inspect"), QStringLiteral("s3://bkt/ddp_sd.pt")});
        QVERIFY2(r.rc == 0, qPrintable(describe(r)));
        // The default profile's key is refused, and says so.
        qunsetenv("AWS_PROFILE");
        qputenv("AWS_ENDPOINT_URL", endpoint(signed_).toUtf8());
        qputenv("AWS_REGION", "us-east-1");
        const auto d = cli({QStringLiteral("inspect"), QStringLiteral("s3://bkt/ddp_sd.pt")});
        QCOMPARE(d.rc, 2);
        QVERIFY2(d.err.contains("from profile 'default' in ~/.aws/credentials, for region us-east-1 from AWS_REGION"),
                 qPrintable(describe(d)));
        QFile::remove(home + QStringLiteral("/.aws/config"));
        QFile::remove(home + QStringLiteral("/.aws/credentials"));
        clearAws();
    }

    // convert -o s3://: a file of one part and one of three (16 MiB in 8 MiB parts), torch zip and
    // safetensors, from a local file and from an s3:// one. The object another client downloads is
    // the bytes convert writes to a local file of the same name, real torch.load takes it with
    // weights_only=True, and no multipart upload is left in the bucket.
    void convertToS3()
    {
        useSigned();
        const QString big = tmp_.filePath(QStringLiteral("big.safetensors"));
        const QString ddp = fixtures_ + QStringLiteral("/ddp_sd.pt");
        struct Case {
            QString input;
            QString key;
            QStringList args;
            int parts;
            int tensors;  // what torch.load gives for a .pt key
        };
        const QList<Case> cases{
            {ddp, QStringLiteral("out/model.pt"), {QStringLiteral("--single-card")}, 1, 9},
            {big, QStringLiteral("out/big.pt"), {}, 3, 1},
            {big, QStringLiteral("out/big.safetensors"), {}, 3, 0},
            {QStringLiteral("s3://bkt/ddp_sd.pt"),
             QStringLiteral("out/from-s3.pt"),
             {QStringLiteral("--strip-prefix"), QStringLiteral("module.")},
             1,
             9},
        };
        const QString local = tmp_.filePath(QStringLiteral("local"));
        QVERIFY(QDir().mkpath(local));
        QStringList keys;
        QMap<QString, QString> expected;
        for (const auto& c : cases) {
            const QString target = QStringLiteral("s3://bkt/") + c.key;
            const auto r = cli(QStringList{QStringLiteral("convert"), c.input, QStringLiteral("-o"), target} + c.args);
            QVERIFY2(r.rc == 0, qPrintable(describe(r)));
            const QString parts = QStringLiteral("uploaded in %1 part").arg(c.parts);
            QVERIFY2(QString::fromUtf8(r.out).contains(parts), qPrintable(QString::fromUtf8(r.out)));
            const QString file = local + QLatin1Char('/') + QFileInfo(c.key).fileName();
            const auto l = cli(QStringList{QStringLiteral("convert"), c.input, QStringLiteral("-o"), file} + c.args);
            QVERIFY2(l.rc == 0, qPrintable(describe(l)));
            keys << c.key;
            expected[c.key] = sha256Of(file);
        }
        const QJsonObject report = objects(keys);
        QVERIFY2(!report.isEmpty(), "s3_objects.py failed");
        QCOMPARE(report.value(QStringLiteral("uploads")).toInt(-1), 0);
        for (const auto& c : cases) {
            const QJsonObject o = report.value(c.key).toObject();
            QVERIFY2(!o.isEmpty(), qPrintable(c.key + QStringLiteral(": no object")));
            QCOMPARE(o.value(QStringLiteral("sha256")).toString(), expected[c.key]);
            if (c.key.endsWith(QStringLiteral(".pt"))) {
                QVERIFY2(o.value(QStringLiteral("load")).toInt(-1) == c.tensors,
                         qPrintable(c.key + QStringLiteral(": ") +
                                    QString::fromUtf8(QJsonDocument(o).toJson(QJsonDocument::Compact))));
            }
        }
    }

    // Issue 43's progress rule holds for what issue 41 added. Without a terminal, convert -o s3://,
    // check --values of an S3 DCP folder and convert of it print no progress at all (not a CR, not an
    // escape). With the line asked for (CKPTSCOPE_PROGRESS=1, from the start), each shows its own
    // line of bytes done of the total, erased before the command's last words.
    void progressByTheSameRule()
    {
        const QString big = tmp_.filePath(QStringLiteral("big.safetensors"));
        const QStringList upload{QStringLiteral("convert"), big, QStringLiteral("-o"),
                                 QStringLiteral("s3://bkt/progress/big.safetensors"), QStringLiteral("--force")};
        // The folder by its listing, as folders() reads it (the unsigned server).
        const QStringList scan{QStringLiteral("check"), QStringLiteral("--values"), QStringLiteral("--no-sign-request"),
                               QStringLiteral("s3://bkt/dcp_basic/")};
        const QStringList consolidate{QStringLiteral("convert"), QStringLiteral("--no-sign-request"),
                                      QStringLiteral("s3://bkt/dcp_basic/"), QStringLiteral("-o"),
                                      tmp_.filePath(QStringLiteral("progress-dcp.pt"))};
        const auto run = [this](const QStringList& args) {
            if (args.contains(QStringLiteral("--no-sign-request"))) {
                clearAws();
                qputenv("AWS_ENDPOINT_URL", endpoint(unsigned_).toUtf8());
            } else {
                useSigned();
            }
            return cli(args);
        };
        for (const auto& args : {upload, scan, consolidate}) {
            const auto r = run(args);
            QVERIFY2(r.rc == 0 || r.rc == 1, qPrintable(args.join(u' ') + QStringLiteral(": ") + describe(r)));
            QVERIFY2(!r.err.contains('\r') && !r.err.contains('\x1b'), qPrintable(describe(r)));
        }
        qputenv("CKPTSCOPE_PROGRESS", "1");
        qputenv("CKPTSCOPE_PROGRESS_AFTER_MS", "0");
        const auto unset = qScopeGuard([] {
            qunsetenv("CKPTSCOPE_PROGRESS");
            qunsetenv("CKPTSCOPE_PROGRESS_AFTER_MS");
            clearAws();
        });
        const QList<std::pair<QStringList, QByteArray>> shown{
            {upload, "\rconvert: "}, {scan, "\rcheck: "}, {consolidate, "\rconvert: "}};
        for (const auto& [args, line] : shown) {
            const auto r = run(args);
            QVERIFY2(r.rc == 0 || r.rc == 1, qPrintable(args.join(u' ') + QStringLiteral(": ") + describe(r)));
            const auto at = r.err.indexOf(line);
            QVERIFY2(at >= 0 && r.err.indexOf(" of ", at) > at,
                     qPrintable(args.join(u' ') + QStringLiteral(": ") +
                                QString::fromUtf8(r.err.toPercentEncoding(" :,()/"))));
            QVERIFY2(r.err.lastIndexOf("\r\x1b[K") > r.err.lastIndexOf(line), qPrintable(describe(r)));  // erased
        }
    }

    // A key already taken is left alone without --force (one line, before the input is read) and
    // replaced with it; --force is refused for a local output.
    void existingKeyNeedsForce()
    {
        useSigned();
        const QString ddp = fixtures_ + QStringLiteral("/ddp_sd.pt");
        const QString target = QStringLiteral("s3://bkt/force/model.pt");
        const auto first = cli({QStringLiteral("convert"), ddp, QStringLiteral("-o"), target});
        QVERIFY2(first.rc == 0, qPrintable(describe(first)));
        const QString before = objects({QStringLiteral("force/model.pt")})
                                   .value(QStringLiteral("force/model.pt"))
                                   .toObject()
                                   .value(QStringLiteral("sha256"))
                                   .toString();
        QVERIFY(!before.isEmpty());
        const auto again =
            cli({QStringLiteral("convert"), ddp, QStringLiteral("-o"), target, QStringLiteral("--single-card")});
        QCOMPARE(again.rc, 2);
        QCOMPARE(again.err.trimmed().count('\n'), 0);
        QVERIFY2(again.err.contains("an object is already at this key; nothing written: add --force"),
                 qPrintable(describe(again)));
        const QJsonObject kept = objects({QStringLiteral("force/model.pt")});
        QCOMPARE(kept.value(QStringLiteral("force/model.pt")).toObject().value(QStringLiteral("sha256")).toString(),
                 before);
        const auto forced = cli({QStringLiteral("convert"), ddp, QStringLiteral("-o"), target,
                                 QStringLiteral("--single-card"), QStringLiteral("--force")});
        QVERIFY2(forced.rc == 0, qPrintable(describe(forced)));
        const QJsonObject replaced = objects({QStringLiteral("force/model.pt")});
        const QJsonObject o = replaced.value(QStringLiteral("force/model.pt")).toObject();
        QVERIFY(o.value(QStringLiteral("sha256")).toString() != before);
        QCOMPARE(o.value(QStringLiteral("load")).toInt(-1), 9);
        QCOMPARE(replaced.value(QStringLiteral("uploads")).toInt(-1), 0);
        const auto localForce = cli({QStringLiteral("convert"), ddp, QStringLiteral("-o"),
                                     tmp_.filePath(QStringLiteral("f.pt")), QStringLiteral("--force")});
        QCOMPARE(localForce.rc, 2);
        QVERIFY2(localForce.err.contains("--force is for an s3:// output"), qPrintable(describe(localForce)));
    }

    // What is no object key, or not one file, is refused in one line before anything is sent.
    void outputsRefused_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("says");
        QTest::newRow("a prefix") << QStringList{QStringLiteral("-o"), QStringLiteral("s3://bkt/dir/")}
                                  << QStringLiteral("names a folder (a prefix)");
        QTest::newRow("a sharded set") << QStringList{QStringLiteral("-o"), QStringLiteral("s3://bkt/set/"),
                                                      QStringLiteral("--shard-size"), QStringLiteral("1GB")}
                                       << QStringLiteral("is written to a local folder only");
        QTest::newRow("a DCP folder") << QStringList{QStringLiteral("-o"), QStringLiteral("s3://bkt/dcp-out/"),
                                                     QStringLiteral("--format"), QStringLiteral("dcp")}
                                      << QStringLiteral("is written to a local folder only");
        QTest::newRow("another URL") << QStringList{QStringLiteral("-o"), QStringLiteral("https://example.org/m.pt")}
                                     << QStringLiteral("convert writes files and s3:// objects");
    }
    void outputsRefused()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, says);
        useSigned();
        const auto r = cli(QStringList{QStringLiteral("convert"), fixtures_ + QStringLiteral("/ddp_sd.pt")} + args);
        QCOMPARE(r.rc, 2);
        QCOMPARE(r.err.trimmed().count('\n'), 0);
        QVERIFY2(r.err.contains(says.toUtf8()), qPrintable(describe(r)));
        QCOMPARE(objects({}).value(QStringLiteral("uploads")).toInt(-1), 0);
    }

    // Ctrl-C or kill while parts are being sent (1 GiB, sparse): the upload is aborted before the
    // process ends with 128 + the signal, and the bucket holds neither the key nor an upload.
    void interruptedUploadIsAborted_data()
    {
        QTest::addColumn<int>("sig");
        QTest::newRow("SIGINT") << static_cast<int>(SIGINT);
        QTest::newRow("SIGTERM") << static_cast<int>(SIGTERM);
    }
    void interruptedUploadIsAborted()
    {
        QFETCH(int, sig);
        useSigned();
        const QString huge = tmp_.filePath(QStringLiteral("huge.safetensors"));
        if (!QFileInfo::exists(huge)) {
            constexpr qint64 kBytes = qint64{1} << 30;
            const QByteArray header = R"({"w":{"dtype":"U8","shape":[1073741824],"data_offsets":[0,1073741824]}})";
            QByteArray head(8, '\0');
            qToLittleEndian<quint64>(header.size(), head.data());
            QFile f(huge);
            QVERIFY(f.open(QIODevice::WriteOnly));
            QVERIFY(f.write(head + header) == head.size() + header.size());
            QVERIFY(f.resize(head.size() + header.size() + kBytes));
        }
        const QString key = QStringLiteral("killed/huge-%1.pt").arg(sig);
        QProcess waiter;
        waiter.setProcessChannelMode(QProcess::ForwardedChannels);
        waiter.start(kTorch2Python, {ckpt::test::scriptPath("s3_objects.py"), endpoint(signed_), signed_.word(0),
                                     signed_.word(1), QStringLiteral("wait-upload"), QStringLiteral("bkt")});
        QVERIFY(waiter.waitForStarted());
        ckpt::test::Process p;
        QVERIFY(p.start({CKPTSCOPE_TEST_CLI, "convert", huge.toStdString(), "-o",
                         (QStringLiteral("s3://bkt/") + key).toStdString()}));
        QVERIFY2(waiter.waitForFinished(120000) && waiter.exitCode() == 0, "no upload was seen in progress");
        p.signal(sig);
        const auto r = p.wait(60000);
        QCOMPARE(r.rc, 128 + sig);
        QVERIFY2(r.err.contains("the upload was aborted: nothing is at the key"), qPrintable(describe(r)));
        const QJsonObject after = objects({key});
        QVERIFY(!after.isEmpty());
        QCOMPARE(after.value(QStringLiteral("uploads")).toInt(-1), 0);
        QVERIFY(after.value(key).isNull());
    }

    // testload of an object: the engines map local files, so it is downloaded whole into a temporary
    // folder in $TMPDIR, loaded onto the fake driver's cuda:0 and verified against the object's bytes,
    // and the folder is gone afterwards. A set (a Hugging Face index, a DCP .metadata) is downloaded
    // member by member and test-loaded as the same set on disk is. An absent key says so in one line.
    void testloadDownloads()
    {
        useSigned();
        QTemporaryDir tmpdir;
        QTemporaryDir machine;
        qputenv("TMPDIR", tmpdir.path().toUtf8());
        qputenv("CKPTSCOPE_CUDA_LIBRARY", FAKE_CUDA_PATH);
        qputenv("CKPTSCOPE_NVML_LIBRARY", FAKE_NVML_PATH);
        qputenv("CKPTSCOPE_CUDA_ENGINE", CKPTSCOPE_TEST_ENGINE);
        qputenv("FAKE_GPU_STATE", machine.filePath(QStringLiteral("gpu.state")).toUtf8());
        const auto r = cli({QStringLiteral("testload"), QStringLiteral("s3://bkt/big40k.pt"),
                            QStringLiteral("--device"), QStringLiteral("cuda:0"), QStringLiteral("--verify")});
        const auto absent = cli({QStringLiteral("testload"), QStringLiteral("s3://bkt/absent.pt")});
        const auto set = cli({QStringLiteral("testload"), QStringLiteral("s3://bkt/hf/model.safetensors.index.json"),
                              QStringLiteral("--device"), QStringLiteral("cuda:0"), QStringLiteral("--verify")});
        const auto localSet = cli({QStringLiteral("testload"), set_ + QStringLiteral("/model.safetensors.index.json"),
                                   QStringLiteral("--device"), QStringLiteral("cuda:0"), QStringLiteral("--verify")});
        const auto dcp = cli({QStringLiteral("testload"), QStringLiteral("s3://bkt/dcp_basic/.metadata"),
                              QStringLiteral("--device"), QStringLiteral("cuda:0")});
        const auto localDcp = cli({QStringLiteral("testload"), dcp_ + QStringLiteral("/dcp_basic"),
                                   QStringLiteral("--device"), QStringLiteral("cuda:0")});
        for (const char* v : {"TMPDIR", "CKPTSCOPE_CUDA_LIBRARY", "CKPTSCOPE_NVML_LIBRARY", "CKPTSCOPE_CUDA_ENGINE",
                              "FAKE_GPU_STATE"}) {
            qunsetenv(v);
        }
        QVERIFY2(r.rc == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains("s3://bkt/big40k.pt: loaded 40000 tensors") && r.out.contains("verified: ") &&
                     r.out.contains("equal to the file"),
                 qPrintable(QString::fromUtf8(r.out)));
        QVERIFY2(r.err.contains("remote: 1 request"), qPrintable(describe(r)));
        QVERIFY2(QDir(tmpdir.path()).isEmpty(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot),
                 "the download was left in TMPDIR");
        QCOMPARE(absent.rc, 2);
        QVERIFY2(absent.err.contains("NoSuchKey"), qPrintable(describe(absent)));
        for (const auto& [remote, local] : {std::pair{set, localSet}, std::pair{dcp, localDcp}}) {
            QVERIFY2(remote.rc == 0 && local.rc == 0, qPrintable(describe(remote) + describe(local)));
            // The same tensors, storages and device but for the name of the set (the temporary
            // folder's, the local one's) and the time the load took.
            const auto loaded = [](const QByteArray& out) {
                const auto at = out.indexOf(": loaded ");
                return at < 0 ? QByteArray() : out.mid(at, out.indexOf(" in ", at) - at);
            };
            QVERIFY2(!loaded(remote.out).isEmpty() && loaded(remote.out) == loaded(local.out),
                     qPrintable(QString::fromUtf8(remote.out + "\n---\n" + local.out)));
        }
        QVERIFY2(set.out.contains("equal to the file"), qPrintable(QString::fromUtf8(set.out)));
        QVERIFY2(QDir(tmpdir.path()).isEmpty(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot),
                 "a set's download was left in TMPDIR");
    }

    // ZeRO save folders by prefix, and their tag folders: inspect --json and check --json byte for
    // byte as on disk but for the names and the remote figures (a stale rank found by the listing);
    // convert writes the set's tensors; a `latest` that leads out of its folder is one line, exit 2.
    void zeroFolders()
    {
        clearAws();
        qputenv("AWS_ENDPOINT_URL", endpoint(unsigned_).toUtf8());
        const QString zeroDir = QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR);
        for (const char* name : {"zero2_w3", "zero3_bf16_w2", "zero2_stale_rank"}) {
            for (const QString& sub : {QString(), QStringLiteral("/global_step3")}) {
                const QString dir = zeroDir + QLatin1Char('/') + QLatin1String(name) + sub;
                const QString prefix = QStringLiteral("s3://bkt/") + QLatin1String(name) + sub;
                for (const char* command : {"inspect", "check"}) {
                    const auto l = cli({QLatin1String(command), QStringLiteral("--json"), dir});
                    const auto r = cli({QLatin1String(command), QStringLiteral("--json"),
                                        QStringLiteral("--no-sign-request"), prefix + QLatin1Char('/')});
                    QVERIFY2(r.rc == l.rc, qPrintable(prefix + QStringLiteral(": ") + describe(r)));
                    QCOMPARE(sameAsOnDisk(r.out, prefix + QLatin1Char('/'), prefix), sameAsOnDisk(l.out, dir, dir));
                }
            }
        }
        const QString out = tmp_.filePath(QStringLiteral("zero.pt"));
        const auto conv = cli({QStringLiteral("convert"), QStringLiteral("--no-sign-request"),
                               QStringLiteral("s3://bkt/zero3_bf16_w2/"), QStringLiteral("-o"), out});
        QVERIFY2(conv.rc == 0, qPrintable(describe(conv)));
        const auto same = cli({QStringLiteral("diff"), QStringLiteral("--strict"), out,
                               zeroDir + QStringLiteral("/zero3_bf16_w2.expected.pt")});
        QVERIFY2(same.rc == 0, qPrintable(describe(same)));
        const auto evil =
            cli({QStringLiteral("check"), QStringLiteral("--no-sign-request"), QStringLiteral("s3://bkt/zero_evil/")});
        QCOMPARE(evil.rc, 2);
        QCOMPARE(evil.err.trimmed().count('\n'), 0);
        QVERIFY2(evil.err.contains("latest names '../zero2_w3/global_step3', not a tag folder inside"),
                 qPrintable(describe(evil)));
        clearAws();
    }

    // Folders (unsigned, on the server that checks nothing): one file, a set, a DCP folder, a
    // listing of 2100 keys over three pages; a set's folder converts to what the set on disk holds.
    void folders()
    {
        clearAws();
        qputenv("AWS_ENDPOINT_URL", endpoint(unsigned_).toUtf8());
        const auto one =
            cli({QStringLiteral("check"), QStringLiteral("--no-sign-request"), QStringLiteral("s3://bkt/one/")});
        QVERIFY2(one.rc == 0 && one.out.contains("s3://bkt/one/"), qPrintable(describe(one)));
        const QString out = tmp_.filePath(QStringLiteral("consolidated.safetensors"));
        const auto conv = cli({QStringLiteral("convert"), QStringLiteral("--no-sign-request"),
                               QStringLiteral("s3://bkt/hf/"), QStringLiteral("-o"), out});
        QVERIFY2(conv.rc == 0, qPrintable(describe(conv)));
        const auto same = cli({QStringLiteral("diff"), out, set_ + QStringLiteral("/model.safetensors.index.json")});
        QVERIFY2(same.rc == 0, qPrintable(describe(same)));
        // DCP folders and FSDP rank folders by their prefix (listed: their files known without
        // probing): check's findings as on disk; a missing data file or rank is the same finding.
        const QList<std::pair<QString, const char*>> folders{{dcp_, "dcp_basic"},
                                                             {dcp_, "dcp_safetensors"},
                                                             {dcp_, "dcp_missing_file"},
                                                             {fixtures_ + QStringLiteral("/fsdp"), "fsdp_st"},
                                                             {fixtures_ + QStringLiteral("/fsdp"), "fsdp_dtensor"},
                                                             {fixtures_ + QStringLiteral("/fsdp"), "fsdp_lost_rank"}};
        for (const auto& [parent, name] : folders) {
            const QString dir = parent + QLatin1Char('/') + QLatin1String(name);
            const QString prefix = QStringLiteral("s3://bkt/") + QLatin1String(name);
            const auto l = cli({QStringLiteral("check"), QStringLiteral("--json"), dir});
            const auto r = cli({QStringLiteral("check"), QStringLiteral("--json"), QStringLiteral("--no-sign-request"),
                                prefix + QLatin1Char('/')});
            QVERIFY2(r.rc == l.rc, qPrintable(QLatin1String(name) + QStringLiteral(": ") + describe(r)));
            QCOMPARE(findings(r.out, prefix), findings(l.out, dir));
        }
        const QString fsdpOut = tmp_.filePath(QStringLiteral("fsdp.pt"));
        const auto fsdpConv = cli({QStringLiteral("convert"), QStringLiteral("--no-sign-request"),
                                   QStringLiteral("s3://bkt/fsdp_st/"), QStringLiteral("-o"), fsdpOut});
        QVERIFY2(fsdpConv.rc == 0, qPrintable(describe(fsdpConv)));
        const auto fsdpSame = cli(
            {QStringLiteral("diff"), QStringLiteral("--strict"), fsdpOut, fixtures_ + QStringLiteral("/fsdp/fsdp_st")});
        QVERIFY2(fsdpSame.rc == 0, qPrintable(describe(fsdpSame)));
        const QString dcpOut = tmp_.filePath(QStringLiteral("dcp.pt"));
        const auto dcpConv = cli({QStringLiteral("convert"), QStringLiteral("--no-sign-request"),
                                  QStringLiteral("s3://bkt/dcp_basic/"), QStringLiteral("-o"), dcpOut});
        QVERIFY2(dcpConv.rc == 0, qPrintable(describe(dcpConv)));
        const auto dcpSame =
            cli({QStringLiteral("diff"), QStringLiteral("--strict"), dcpOut, dcp_ + QStringLiteral("/dcp_basic")});
        QVERIFY2(dcpSame.rc == 0, qPrintable(describe(dcpSame)));
        const auto many =
            cli({QStringLiteral("inspect"), QStringLiteral("--no-sign-request"), QStringLiteral("s3://bkt/many/")});
        QCOMPARE(many.rc, 2);
        QVERIFY2(many.err.contains("holds no checkpoint file (2100 files)"), qPrintable(describe(many)));
        const auto absent =
            cli({QStringLiteral("inspect"), QStringLiteral("--no-sign-request"), QStringLiteral("s3://bkt/absent.pt")});
        QCOMPARE(absent.rc, 2);
        QVERIFY2(absent.err.contains("NoSuchKey"), qPrintable(describe(absent)));
        clearAws();
    }
};

// Without the PyTorch 2.x root and its moto the suite is "not run" (exit 77), never passed.
int main(int argc, char** argv)
{
    QProcess probe;
    probe.start(kTorch2Python, {QStringLiteral("-c"), QStringLiteral("import moto.server, boto3")});
    if (!probe.waitForFinished(120000) || probe.exitCode() != 0) {
        std::fputs("moto's S3 server is not in the PyTorch 2.x root (scripts/modern-torch.sh adds python3-moto): "
                   "the s3:// tests need it\n",
                   stderr);
        return 77;  // NOLINT(readability-magic-numbers): ctest's skip code
    }
    QCoreApplication app(argc, argv);
    TestS3Cli t;
    return QTest::qExec(&t, argc, argv);
}
#include "tst_s3_cli.moc"
