// The real `ckptscope` binary on URLs served from loopback: `check` of every fixture over HTTP
// equals its `check` on disk, finding for finding; inspect's request count; convert from a URL
// writes what the file holds (diff exits 0) and leaves nothing behind when the server misbehaves;
// every failure is one line on stderr and exit 2; credentials never appear in any output.
#include "process_run.h"
#include "servers.h"

#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cstdio>

using ckpt::test::LoopbackServer;
using ckpt::test::ProcessResult;
using ckpt::test::runProcess;
using ckpt::test::sameAsOnDisk;

namespace {

ProcessResult cli(const QStringList& args, int timeoutMs = 120000)
{
    std::vector<std::string> argv{CKPTSCOPE_TEST_CLI};
    for (const auto& a : args) {
        argv.push_back(a.toStdString());
    }
    return runProcess(argv, timeoutMs);
}

// check --json's findings with the file's name taken out.
QJsonArray findings(const QByteArray& json, const QString& name)
{
    QByteArray text = json;
    text.replace(name.toUtf8(), "FILE");
    const auto doc = QJsonDocument::fromJson(text);
    return doc.object().value(QStringLiteral("findings")).toArray();
}

int lines(const QByteArray& text)
{
    return static_cast<int>(text.trimmed().split('\n').size());
}

}  // namespace

class TestRemoteCli : public QObject {
    Q_OBJECT

    QTemporaryDir tmp_;
    LoopbackServer nginx_;
    QStringList fixtures_;
    QString big_;
    QString dcpBig_;
    QString zeroBig_;

    QString url(const QString& path) const { return nginx_.url(path); }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(tmp_.isValid());
        big_ = tmp_.filePath(QStringLiteral("big"));
        QVERIFY(QDir().mkpath(big_));
        QVERIFY2(ckpt::test::makeBigFiles(big_), "python3 with torch could not write the big files");
        QDir fx(QStringLiteral(CKPTSCOPE_FIXTURE_DIR));
        for (const auto& f : fx.entryList({QStringLiteral("*.pt"), QStringLiteral("*.safetensors")}, QDir::Files)) {
            fixtures_ << fx.filePath(f);
        }
        QVERIFY2(fixtures_.size() > 10, "the fixtures were not generated");
        QStringList served = fixtures_;
        served << big_ + QStringLiteral("/big.pt") << big_ + QStringLiteral("/big.safetensors")
               << big_ + QStringLiteral("/big_rezipped.pt") << big_ + QStringLiteral("/big_zip64.pt");
        QVERIFY(ckpt::test::makeServedTree(tmp_.filePath(QStringLiteral("root")), served));
        // The DCP fixtures under files/dcp/NAME/, and a 16 MiB set of two ranks as files/dcp/big/.
        dcpBig_ = tmp_.filePath(QStringLiteral("dcp_big"));
        QVERIFY2(ckpt::test::runProcess({CKPTSCOPE_PYTHON, "-c", R"(
import sys, torch
sys.path.insert(0, sys.argv[1])
import gen_dcp
torch.manual_seed(0)
sd = {f'layer{i}.weight': gen_dcp.shard_dim(torch.randn(1024, 1024), 0, 2) for i in range(4)}
sd['step'] = 7
gen_dcp.write_dcp(sys.argv[2], sd, expected=False)
# A copy whose .metadata names a data file outside the folder.
import pickle, shutil
evil = sys.argv[2] + '_evil'
shutil.copytree(sys.argv[2], evil)
md = pickle.load(open(evil + '/.metadata', 'rb'))
for v in md.storage_data.values():
    if v.relative_path == '__1_0.distcp':
        v.relative_path = '../secret.distcp'
pickle.dump(md, open(evil + '/.metadata', 'wb'))
)",
                                         std::string(CKPTSCOPE_SOURCE_DIR) + "/tests/sharded", dcpBig_.toStdString()})
                         .rc == 0,
                 "python3 with torch could not write the big DCP set");
        QVERIFY(QDir().mkpath(tmp_.filePath(QStringLiteral("root/files/dcp"))));
        const QDir dcp(QStringLiteral(CKPTSCOPE_DCP_FIXTURE_DIR));
        for (const auto& name : dcp.entryList({QStringLiteral("dcp_*")}, QDir::Dirs | QDir::NoDotAndDotDot)) {
            QVERIFY(QFile::link(dcp.filePath(name), tmp_.filePath(QStringLiteral("root/files/dcp/") + name)));
        }
        QVERIFY(QFile::link(dcpBig_, tmp_.filePath(QStringLiteral("root/files/dcp/big"))));
        QVERIFY(QFile::link(dcpBig_ + QStringLiteral("_evil"), tmp_.filePath(QStringLiteral("root/files/dcp/evil"))));
        // A Megatron torch_dist folder: a DCP folder beside common.pt and metadata.json.
        {
            const QString meg = tmp_.filePath(QStringLiteral("dcp_megatron"));
            QVERIFY(QDir().mkpath(meg));
            const QDir basic(dcp.filePath(QStringLiteral("dcp_basic")));
            for (const auto& f : basic.entryList(QDir::Files | QDir::Hidden)) {
                QVERIFY(QFile::copy(basic.filePath(f), meg + QLatin1Char('/') + f));
            }
            QVERIFY(QFile::copy(QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/train_ckpt.pt"),
                                meg + QStringLiteral("/common.pt")));
            QFile json(meg + QStringLiteral("/metadata.json"));
            QVERIFY(json.open(QIODevice::WriteOnly));
            json.write(R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1})");
            json.close();
            QVERIFY(QFile::link(meg, tmp_.filePath(QStringLiteral("root/files/dcp/megatron"))));
        }
        // An accelerate folder under files/acc/ and as the repository org/acc; a PEFT adapter folder.
        for (const QString& at : {QStringLiteral("root/files/acc/"), QStringLiteral("root/cdn/org/acc/main/")}) {
            QVERIFY(QDir().mkpath(tmp_.filePath(at)));
            QVERIFY(QFile::copy(QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/model.safetensors"),
                                tmp_.filePath(at + QStringLiteral("model.safetensors"))));
            QVERIFY(QFile::copy(QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/ddp_sd.pt"),
                                tmp_.filePath(at + QStringLiteral("optimizer.bin"))));
        }
        QVERIFY(QDir().mkpath(tmp_.filePath(QStringLiteral("root/files/peft"))));
        QVERIFY(QFile::copy(QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/model.safetensors"),
                            tmp_.filePath(QStringLiteral("root/files/peft/adapter_model.safetensors"))));
        {
            QVERIFY(QDir().mkpath(tmp_.filePath(QStringLiteral("root/api/models/org/acc/revision"))));
            QFile api(tmp_.filePath(QStringLiteral("root/api/models/org/acc/revision/main")));
            QVERIFY(api.open(QIODevice::WriteOnly));
            api.write(R"({"id": "org/acc", "siblings": [{"rfilename": "model.safetensors"}, )"
                      R"({"rfilename": "optimizer.bin"}]})");
        }
        // FSDP rank files as the repository org/fsdp (the API's listing names them).
        {
            const QDir fsdp(QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/fsdp/fsdp_st"));
            QVERIFY(QDir().mkpath(tmp_.filePath(QStringLiteral("root/cdn/org/fsdp_repo"))));
            QVERIFY(QFile::link(fsdp.path(), tmp_.filePath(QStringLiteral("root/cdn/org/fsdp_repo/main"))));
            QVERIFY(QDir().mkpath(tmp_.filePath(QStringLiteral("root/api/models/org/fsdp_repo/revision"))));
            QFile api(tmp_.filePath(QStringLiteral("root/api/models/org/fsdp_repo/revision/main")));
            QVERIFY(api.open(QIODevice::WriteOnly));
            QByteArray listing = R"({"id": "org/fsdp_repo", "siblings": [)";
            const auto names = fsdp.entryList(QDir::Files);
            for (int i = 0; i < names.size(); ++i) {
                listing += (i ? ", " : "") + QByteArray(R"({"rfilename": ")") + names[i].toUtf8() + "\"}";
            }
            api.write(listing + "]}");
        }
        // A repository folder: hf://org/model/dcp_basic/ through the Hub's redirect to its CDN.
        QVERIFY(QFile::link(dcp.filePath(QStringLiteral("dcp_basic")),
                            tmp_.filePath(QStringLiteral("root/cdn/org/model/main/dcp_basic"))));
        // The ZeRO fixtures under files/zero/NAME/; zero2_w3 as the repository org/zero_repo (the API
        // listing `latest` and the tag folder's files) and zero3_w2 as its folder hf://org/model/zero3_w2/;
        // save folders whose `latest` leads out of them.
        {
            const QDir zero(QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR));
            QVERIFY(QFile::link(zero.path(), tmp_.filePath(QStringLiteral("root/files/zero"))));
            zeroBig_ = tmp_.filePath(QStringLiteral("zero_big"));
            QVERIFY2(ckpt::test::runProcess({CKPTSCOPE_PYTHON,
                                             std::string(CKPTSCOPE_SOURCE_DIR) + "/tests/sharded/gen_zero.py", "--big",
                                             zeroBig_.toStdString(), "16"})
                             .rc == 0,
                     "python3 with torch could not write the big ZeRO set");
            QVERIFY(QFile::link(zeroBig_ + QStringLiteral("/zero3_big"),
                                tmp_.filePath(QStringLiteral("root/files/zero_big"))));
            QVERIFY(QDir().mkpath(tmp_.filePath(QStringLiteral("root/cdn/org/zero_repo"))));
            QVERIFY(QFile::link(zero.filePath(QStringLiteral("zero2_w3")),
                                tmp_.filePath(QStringLiteral("root/cdn/org/zero_repo/main"))));
            QVERIFY(QFile::link(zero.filePath(QStringLiteral("zero3_w2")),
                                tmp_.filePath(QStringLiteral("root/cdn/org/model/main/zero3_w2"))));
            QVERIFY(QDir().mkpath(tmp_.filePath(QStringLiteral("root/api/models/org/zero_repo/revision"))));
            QFile api(tmp_.filePath(QStringLiteral("root/api/models/org/zero_repo/revision/main")));
            QVERIFY(api.open(QIODevice::WriteOnly));
            QJsonArray siblings{QJsonObject{{QStringLiteral("rfilename"), QStringLiteral("latest")}}};
            for (const auto& f : QDir(zero.filePath(QStringLiteral("zero2_w3/global_step3"))).entryList(QDir::Files)) {
                siblings.append(QJsonObject{{QStringLiteral("rfilename"), QStringLiteral("global_step3/") + f}});
            }
            api.write(QJsonDocument(QJsonObject{{QStringLiteral("id"), QStringLiteral("org/zero_repo")},
                                                {QStringLiteral("siblings"), siblings}})
                          .toJson());
            for (const auto& [name, tag] :
                 {std::pair{"dotdot", "../zero/zero2_w3/global_step3"}, std::pair{"absolute", "/etc"},
                  std::pair{"up", ".."}, std::pair{"empty", ""}}) {
                const QString dir = tmp_.filePath(QStringLiteral("root/files/zero_evil/") + QLatin1String(name));
                QVERIFY(QDir().mkpath(dir + QStringLiteral("/global_step3")));
                QFile latest(dir + QStringLiteral("/latest"));
                QVERIFY(latest.open(QIODevice::WriteOnly));
                latest.write(QByteArray(tag) + "\n");
            }
        }
        QVERIFY(nginx_.start(ckpt::test::scriptPath("nginx_server.py"), {tmp_.filePath(QStringLiteral("root"))}));
        qputenv("HF_ENDPOINT", url(QString()).toUtf8());
        qunsetenv("HF_TOKEN");
        qputenv("HF_HOME", tmp_.filePath(QStringLiteral("hf-home")).toUtf8());
        qputenv("CKPTSCOPE_HTTP_TIMEOUT", "3");
        // A proxy from the environment would take loopback requests elsewhere.
        for (const char* v : {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
            qunsetenv(v);
        }
    }

    void checkEqualsOnDisk()
    {
        QStringList files = fixtures_;
        files << big_ + QStringLiteral("/big.pt") << big_ + QStringLiteral("/big.safetensors")
              << big_ + QStringLiteral("/big_rezipped.pt") << big_ + QStringLiteral("/big_zip64.pt");
        for (const auto& f : std::as_const(files)) {
            const QString name = QFileInfo(f).fileName();
            const QString u = url(QStringLiteral("/files/") + name);
            for (const QStringList& extra : {QStringList{}, QStringList{QStringLiteral("--values")}}) {
                const auto local =
                    cli(QStringList{QStringLiteral("check"), QStringLiteral("--json")} + extra + QStringList{f});
                const auto remote =
                    cli(QStringList{QStringLiteral("check"), QStringLiteral("--json")} + extra + QStringList{u});
                QVERIFY2(remote.rc == local.rc,
                         qPrintable(name + QStringLiteral(": ") + QString::fromUtf8(remote.err)));
                QCOMPARE(findings(remote.out, u), findings(local.out, f));
                if (remote.rc != 2) {
                    const auto r =
                        QJsonDocument::fromJson(remote.out).object().value(QStringLiteral("remote")).toObject();
                    QVERIFY2(r.value(QStringLiteral("requests")).toInt() >= 1, qPrintable(name));
                }
            }
        }
    }

    // Every Hugging Face sharded set of the fixtures, named by its index's URL: check's findings
    // (the set's own and the consolidated model's) as for the set on disk, at most 2 requests per
    // shard plus the index and config.json.
    void setsEqualOnDisk()
    {
        const QDir sets(QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/sharded"));
        const auto names = sets.entryList({QStringLiteral("hf_*")}, QDir::Dirs | QDir::NoDotAndDotDot);
        QVERIFY(names.size() >= 5);
        for (const auto& name : names) {
            const QDir dir(sets.filePath(name));
            const auto index = dir.entryList({QStringLiteral("*.index.json")}, QDir::Files).value(0);
            const auto shards = dir.entryList({QStringLiteral("*.bin"), QStringLiteral("*.safetensors")}, QDir::Files);
            const QString u = url(QStringLiteral("/files/sets/") + name + QStringLiteral("/") + index);
            const auto local = cli({QStringLiteral("check"), QStringLiteral("--json"), dir.filePath(index)});
            const auto remote = cli({QStringLiteral("check"), QStringLiteral("--json"), u});
            QVERIFY2(remote.rc == local.rc, qPrintable(name + QStringLiteral(": ") + QString::fromUtf8(remote.err)));
            QByteArray l = local.out;
            l.replace(dir.filePath(index).toUtf8(), "INDEX").replace(dir.path().toUtf8(), "SET");
            QByteArray r = remote.out;
            r.replace(u.toUtf8(), "INDEX").replace(url(QStringLiteral("/files/sets/") + name).toUtf8(), "SET");
            const auto lf = QJsonDocument::fromJson(l).object().value(QStringLiteral("findings")).toArray();
            const auto rf = QJsonDocument::fromJson(r).object().value(QStringLiteral("findings")).toArray();
            QVERIFY2(rf == lf, qPrintable(name + QStringLiteral("\n") + QString::fromUtf8(r)));
            if (remote.rc != 2) {
                const auto requests = QJsonDocument::fromJson(remote.out)
                                          .object()
                                          .value(QStringLiteral("remote"))
                                          .toObject()
                                          .value(QStringLiteral("requests"))
                                          .toInt();
                QVERIFY2(requests <= 2 * static_cast<int>(shards.size()) + 2, qPrintable(name));
            }
        }
        // A repository whose weights are sharded opens as its set, through the Hub API.
        const auto repo = cli({QStringLiteral("inspect"), QStringLiteral("hf://org/sharded")});
        QVERIFY2(repo.rc == 0, repo.err.constData());
        QVERIFY(repo.out.contains("sharded checkpoint"));
        QTemporaryDir out;
        const auto w = cli({QStringLiteral("convert"), QStringLiteral("hf://org/sharded"), QStringLiteral("-o"),
                            out.filePath(QStringLiteral("o.pt"))});
        QVERIFY2(w.rc == 0, w.err.constData());
        const auto d = cli({QStringLiteral("diff"), QStringLiteral("--strict"), out.filePath(QStringLiteral("o.pt")),
                            sets.filePath(QStringLiteral("hf_st"))});
        QVERIFY2(d.rc == 0, d.out.constData());
    }

    // Every DCP fixture folder, named by its URL (ending in '/') or its .metadata's: check's
    // findings and exit code as for the folder on disk, read through the same folder interface.
    void dcpFoldersEqualOnDisk()
    {
        const QDir sets(QStringLiteral(CKPTSCOPE_DCP_FIXTURE_DIR));
        auto names = sets.entryList({QStringLiteral("dcp_*")}, QDir::Dirs | QDir::NoDotAndDotDot);
        QVERIFY(names.size() >= 10);
        names << QStringLiteral("megatron");  // tmp_'s, beside common.pt and metadata.json
        for (const auto& name : names) {
            const QString dir = name == QStringLiteral("megatron") ? tmp_.filePath(QStringLiteral("dcp_megatron"))
                                                                   : sets.filePath(name);
            const QString base = url(QStringLiteral("/files/dcp/") + name);
            const auto local = cli({QStringLiteral("check"), QStringLiteral("--json"), dir});
            for (const QString& u : {base + QStringLiteral("/"), base + QStringLiteral("/.metadata")}) {
                const auto remote = cli({QStringLiteral("check"), QStringLiteral("--json"), u});
                QVERIFY2(remote.rc == local.rc, qPrintable(name + QStringLiteral(": ") + QString::number(remote.rc) +
                                                           QStringLiteral(" ") + QString::fromUtf8(remote.err)));
                QByteArray l = local.out;
                l.replace(dir.toUtf8(), "SET");
                QByteArray r = remote.out;
                r.replace(base.toUtf8(), "SET");
                const auto lf = QJsonDocument::fromJson(l).object().value(QStringLiteral("findings")).toArray();
                const auto rf = QJsonDocument::fromJson(r).object().value(QStringLiteral("findings")).toArray();
                QVERIFY2(rf == lf, qPrintable(name + QStringLiteral("\n") + QString::fromUtf8(r) +
                                              QStringLiteral("\nlocal:\n") + QString::fromUtf8(l)));
                if (remote.rc == 2) {
                    QCOMPARE(lines(remote.err), 1);
                }
                if (name == QStringLiteral("megatron")) {  // the backend read from metadata.json over HTTP
                    QVERIFY2(remote.out.contains("torch_dist version 1"), remote.out.constData());
                }
            }
            // inspect lists the same tensors and values.
            const auto li = cli({QStringLiteral("inspect"), QStringLiteral("--json"), dir});
            const auto ri = cli({QStringLiteral("inspect"), QStringLiteral("--json"), base + QStringLiteral("/")});
            QCOMPARE(ri.rc, li.rc);
            if (li.rc == 0) {
                const auto rows = [](const QByteArray& out) {
                    return QJsonDocument::fromJson(out).object().value(QStringLiteral("tensors")).toArray();
                };
                QVERIFY2(!rows(li.out).isEmpty(), li.out.left(400).constData());
                QCOMPARE(rows(ri.out).size(), rows(li.out).size());
            }
        }
        // A folder of a Hub repository, every member through the redirect to the CDN.
        {
            const QString dir = sets.filePath(QStringLiteral("dcp_basic"));
            const auto local = cli({QStringLiteral("check"), QStringLiteral("--json"), dir});
            const auto hub =
                cli({QStringLiteral("check"), QStringLiteral("--json"), QStringLiteral("hf://org/model/dcp_basic/")});
            QVERIFY2(hub.rc == local.rc, hub.err.constData());
            QCOMPARE(findings(hub.out, QStringLiteral("hf://org/model/dcp_basic")), findings(local.out, dir));
        }
        // A .metadata naming a data file outside its folder: refused in one line, nothing requested
        // for it (nginx's access log).
        {
            const auto evil = cli({QStringLiteral("check"), url(QStringLiteral("/files/dcp/evil/"))});
            QCOMPARE(evil.rc, 2);
            QCOMPARE(lines(evil.err), 1);
            QVERIFY2(evil.err.contains("'../secret.distcp'"), evil.err.constData());
            QFile log(QFileInfo(nginx_.certificate()).dir().filePath(QStringLiteral("access.log")));
            QVERIFY(log.open(QIODevice::ReadOnly));
            const QByteArray requests = log.readAll();
            QVERIFY(requests.contains("/files/dcp/evil/.metadata"));
            QVERIFY(!requests.contains("secret"));
        }
        // convert from the URL writes what the folder holds.
        QTemporaryDir out;
        for (const char* name : {"dcp_basic", "dcp_zstd", "dcp_safetensors", "dcp_extra_state"}) {
            const QString o = out.filePath(QLatin1String(name) + QStringLiteral(".pt"));
            const auto w = cli({QStringLiteral("convert"),
                                url(QStringLiteral("/files/dcp/") + QLatin1String(name) + QStringLiteral("/")),
                                QStringLiteral("-o"), o});
            QVERIFY2(w.rc == 0, qPrintable(QLatin1String(name) + QStringLiteral(": ") + QString::fromUtf8(w.err)));
            const auto d = cli({QStringLiteral("diff"), QStringLiteral("--strict"), o,
                                QStringLiteral(CKPTSCOPE_DCP_FIXTURE_DIR "/") + QLatin1String(name)});
            QVERIFY2(d.rc == 0, qPrintable(QLatin1String(name) + QStringLiteral(": ") + QString::fromUtf8(d.out)));
        }
    }

    // Every ZeRO fixture folder by URL, the save folder (with `latest`) and its tag folder alike:
    // inspect --json and check --json byte for byte as on disk but for the name and the remote
    // figures, a refusal in one line with the local exit code; check reads the rank files' heads only.
    void zeroFoldersEqualOnDisk()
    {
        const QDir sets(QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR));
        const auto names = sets.entryList(QDir::Dirs | QDir::NoDotAndDotDot);
        QVERIFY(names.size() >= 10);
        for (const auto& name : names) {
            for (const QString& sub : {QString(), QStringLiteral("/global_step3")}) {
                const QString dir = sets.filePath(name) + sub;
                const QString base = url(QStringLiteral("/files/zero/") + name + sub);
                for (const char* command : {"inspect", "check"}) {
                    const auto local = cli({QLatin1String(command), QStringLiteral("--json"), dir});
                    const auto remote =
                        cli({QLatin1String(command), QStringLiteral("--json"), base + QStringLiteral("/")});
                    const QString what = name + sub + QLatin1Char(' ') + QLatin1String(command);
                    QVERIFY2(remote.rc == local.rc,
                             qPrintable(what + QStringLiteral(": ") + QString::number(remote.rc) + QLatin1Char(' ') +
                                        QString::fromUtf8(remote.err)));
                    if (local.rc == 2) {
                        QCOMPARE(lines(remote.err), 1);
                        continue;
                    }
                    QCOMPARE(sameAsOnDisk(remote.out, base + QStringLiteral("/"), base),
                             sameAsOnDisk(local.out, dir, dir));
                }
            }
        }
        // What inspect and check read of a 16 MiB stage-3 folder of 4 ranks over plain HTTP (nothing
        // lists it): `latest`, the names probed, each model-states file (5 KiB) and each optimizer
        // file's head and tail (its zip directory and pickle), never the partitions' bytes.
        {
            const QString dir = zeroBig_ + QStringLiteral("/zero3_big");
            std::uint64_t total = 0;
            for (const auto& f : QDir(dir + QStringLiteral("/global_step1")).entryInfoList(QDir::Files)) {
                total += static_cast<std::uint64_t>(f.size());
            }
            QVERIFY(total > (16U << 20));
            const QString u = url(QStringLiteral("/files/zero_big/"));
            for (const char* command : {"inspect", "check"}) {
                const auto r = cli({QLatin1String(command), QStringLiteral("--json"), u});
                QCOMPARE(r.rc, 0);
                QCOMPARE(sameAsOnDisk(r.out, u, url(QStringLiteral("/files/zero_big"))),
                         sameAsOnDisk(cli({QLatin1String(command), QStringLiteral("--json"), dir}).out, dir, dir));
                const auto remote = QJsonDocument::fromJson(r.out).object().value(QStringLiteral("remote")).toObject();
                const auto requests = remote.value(QStringLiteral("requests")).toInt();
                const auto bytes = static_cast<std::uint64_t>(remote.value(QStringLiteral("bytes_read")).toDouble());
                qInfo("%s zero3_big/: %d requests, %llu bytes of the folder's %llu", command, requests,
                      static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(total));
                QVERIFY2(requests <= 24, qPrintable(QString::number(requests)));
                QVERIFY2(bytes < (1U << 20), qPrintable(QString::number(bytes)));
            }
        }
        // A Hub repository holding a save folder (listed by the API), and a repository's folder.
        for (const auto& [input, dir] :
             {std::pair{QStringLiteral("hf://org/zero_repo"), sets.filePath(QStringLiteral("zero2_w3"))},
              std::pair{QStringLiteral("hf://org/model/zero3_w2/"), sets.filePath(QStringLiteral("zero3_w2"))}}) {
            for (const char* command : {"inspect", "check"}) {
                const auto local = cli({QLatin1String(command), QStringLiteral("--json"), dir});
                const auto hub = cli({QLatin1String(command), QStringLiteral("--json"), input});
                QVERIFY2(hub.rc == local.rc, qPrintable(input + QStringLiteral(": ") + QString::fromUtf8(hub.err)));
                QByteArray h = hub.out;
                h.replace((input.endsWith(QLatin1Char('/')) ? input.chopped(1) : input).toUtf8() + "/latest", "SET");
                QCOMPARE(sameAsOnDisk(h, input, input.endsWith(QLatin1Char('/')) ? input.chopped(1) : input),
                         sameAsOnDisk(local.out, dir, dir));
            }
        }
        // convert from the URL writes the tensors the folder holds (as zero_to_fp32.py would).
        QTemporaryDir out;
        for (const char* name : {"zero2_w3", "zero3_bf16_w2"}) {
            for (const QString& sub : {QString(), QStringLiteral("/global_step3")}) {
                const QString o = out.filePath(QLatin1String(name) +
                                               (sub.isEmpty() ? QStringLiteral(".pt") : QStringLiteral("_tag.pt")));
                const auto w =
                    cli({QStringLiteral("convert"),
                         url(QStringLiteral("/files/zero/") + QLatin1String(name) + sub + QStringLiteral("/")),
                         QStringLiteral("-o"), o});
                QVERIFY2(w.rc == 0, qPrintable(QLatin1String(name) + QStringLiteral(": ") + QString::fromUtf8(w.err)));
                const auto d = cli({QStringLiteral("diff"), QStringLiteral("--strict"), o,
                                    sets.filePath(QLatin1String(name) + QStringLiteral(".expected.pt"))});
                QVERIFY2(d.rc == 0, qPrintable(QLatin1String(name) + QStringLiteral(": ") + QString::fromUtf8(d.out)));
            }
        }
    }

    // ZeRO's options over the network: refused in one line, nothing written, rather than ignored.
    void zeroOptionsRefused()
    {
        QTemporaryDir out;
        for (const char* option : {"--keep-optimizer", "--zero-weights=module"}) {
            const auto r =
                cli({QStringLiteral("convert"), QLatin1String(option), url(QStringLiteral("/files/zero/zero2_w3/")),
                     QStringLiteral("-o"), out.filePath(QStringLiteral("o.pt"))});
            QCOMPARE(r.rc, 2);
            QCOMPARE(lines(r.err), 1);
            QVERIFY2(r.err.contains("read a local DeepSpeed ZeRO folder"), r.err.constData());
            QVERIFY(QDir(out.path()).entryList(QDir::Files | QDir::Hidden).isEmpty());
        }
        // testload downloads what it loads, and a ZeRO folder's members lie in the tag folder
        // `latest` names: refused in one line, by the folder's URL and by its `latest`.
        QTemporaryDir tmpdir;
        qputenv("TMPDIR", tmpdir.path().toUtf8());
        for (const QString& path :
             {QStringLiteral("/files/zero/zero2_w3/"), QStringLiteral("/files/zero/zero2_w3/latest")}) {
            const auto r = cli({QStringLiteral("testload"), url(path)});
            QCOMPARE(r.rc, 2);
            QCOMPARE(lines(r.err), 1);
            QVERIFY2(r.err.contains("is a DeepSpeed ZeRO folder over the network"), r.err.constData());
        }
        qunsetenv("TMPDIR");
        QVERIFY(QDir(tmpdir.path()).isEmpty(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot));
    }

    // A remote `latest` that names no child of its folder ('../x', an absolute path, '..', nothing):
    // one line, exit 2, as on disk, and nothing requested but `latest` itself (nginx's access log).
    void zeroLatestLeadsOut()
    {
        for (const char* name : {"dotdot", "absolute", "up", "empty"}) {
            const QString u = url(QStringLiteral("/files/zero_evil/") + QLatin1String(name) + QStringLiteral("/"));
            const auto r = cli({QStringLiteral("check"), u});
            QVERIFY2(r.rc == 2, qPrintable(QLatin1String(name) + QStringLiteral(": ") + QString::fromUtf8(r.err)));
            QCOMPARE(lines(r.err), 1);
            QVERIFY2(r.err.contains("not a tag folder inside"), r.err.constData());
            const auto local = cli({QStringLiteral("check"),
                                    tmp_.filePath(QStringLiteral("root/files/zero_evil/") + QLatin1String(name))});
            QCOMPARE(local.rc, 2);
        }
        QFile log(QFileInfo(nginx_.certificate()).dir().filePath(QStringLiteral("access.log")));
        QVERIFY(log.open(QIODevice::ReadOnly));
        for (const auto& line : log.readAll().split('\n')) {
            if (line.contains("zero_evil")) {
                QVERIFY2(line.contains("/.metadata ") || line.contains("/latest "), line.constData());  // the probes
            }
            QVERIFY2(!line.contains("/etc") && !line.contains("zero_evil/global_step3"), line.constData());
        }
    }

    // A DCP folder of 16 MiB over plain HTTP (no listing): inspect and check read .metadata and, of
    // the data files, only what the findings need (each item's first bytes, the values' pickles),
    // counted in requests and bytes; check --values reads the tensors too.
    void dcpCheckReadsLittle()
    {
        const QString u = url(QStringLiteral("/files/dcp/big/"));
        std::uint64_t total = 0;
        for (const auto& f : QDir(dcpBig_).entryInfoList(QDir::Files | QDir::Hidden)) {
            total += static_cast<std::uint64_t>(f.size());
        }
        QVERIFY(total > (16U << 20));
        for (const char* command : {"inspect", "check"}) {
            const auto r = cli({QLatin1String(command), QStringLiteral("--json"), u});
            QVERIFY2(r.rc == 0, r.err.constData());
            const auto remote = QJsonDocument::fromJson(r.out).object().value(QStringLiteral("remote")).toObject();
            const auto requests = remote.value(QStringLiteral("requests")).toInt();
            const auto bytes = static_cast<std::uint64_t>(remote.value(QStringLiteral("bytes_read")).toDouble());
            qInfo("%s: %d requests, %llu of %llu bytes", command, requests, static_cast<unsigned long long>(bytes),
                  static_cast<unsigned long long>(total));
            // .metadata (and its check), each data file's first request, the chunks' first bytes
            // (4 MiB apart: one request each), the Megatron files probed.
            QVERIFY2(requests <= 16, qPrintable(QString::number(requests)));
            QVERIFY2(bytes < (1U << 20), qPrintable(QString::number(bytes)));
        }
        const auto values = cli({QStringLiteral("check"), QStringLiteral("--json"), QStringLiteral("--values"), u});
        const auto local =
            cli({QStringLiteral("check"), QStringLiteral("--json"), QStringLiteral("--values"), dcpBig_});
        QCOMPARE(values.rc, local.rc);
        const auto read = QJsonDocument::fromJson(values.out)
                              .object()
                              .value(QStringLiteral("remote"))
                              .toObject()
                              .value(QStringLiteral("bytes_read"))
                              .toDouble();
        QVERIFY2(read >= 16U << 20, qPrintable(QString::number(read)));
    }

    // A DCP folder's prefetched ranges (each item's first bytes, 2 MiB apart: one request each) are
    // asked for several at a time, across the ranges of a file and across its data files
    // (remote/connections.h). A proxy in front of nginx holds each request until another is in flight
    // beside it (or 1 s passes) and writes the most in flight at once: 1 when they are made one after
    // another. The output is byte for byte what nginx gives without the proxy, requests counted too.
    void dcpRequestsInParallel()
    {
        const QString counted = tmp_.filePath(QStringLiteral("in-flight"));
        LoopbackServer proxied;
        QVERIFY(proxied.start(ckpt::test::scriptPath("nginx_server.py"),
                              {tmp_.filePath(QStringLiteral("root")), QStringLiteral("--in-flight"), counted}));
        const QString path = QStringLiteral("/files/dcp/big/");
        for (const char* command : {"inspect", "check"}) {
            QFile::remove(counted);
            const auto r = cli({QLatin1String(command), QStringLiteral("--json"), proxied.url(path)});
            QVERIFY2(r.rc == 0, r.err.constData());
            QFile f(counted);
            QVERIFY(f.open(QIODevice::ReadOnly));
            const int most = f.readAll().trimmed().toInt();
            qInfo("%s: at most %d requests in flight at once", command, most);
            QVERIFY2(most > 1, qPrintable(QLatin1String(command) + QStringLiteral(": ") + QString::number(most)));
            const auto direct = cli({QLatin1String(command), QStringLiteral("--json"), url(path)});
            QCOMPARE(QString::fromUtf8(r.out).replace(proxied.url(QString()), QStringLiteral("HOST")),
                     QString::fromUtf8(direct.out).replace(url(QString()), QStringLiteral("HOST")));
        }
    }

    // Model folders (model_folder.h) by URL: a folder URL ending in '/' opens the first model file
    // it holds (probed: nothing lists a folder over HTTP), a Hub repository holding an accelerate
    // folder opens its model with the model-folder finding, as the folder on disk does.
    void modelFolders()
    {
        const QString acc = tmp_.filePath(QStringLiteral("root/files/acc"));
        const auto local = cli({QStringLiteral("check"), QStringLiteral("--json"), acc});
        QVERIFY2(local.rc == 0 && local.out.contains("model-folder"), local.out.constData());
        const auto hub = cli({QStringLiteral("check"), QStringLiteral("--json"), QStringLiteral("hf://org/acc")});
        QVERIFY2(hub.rc == 0, hub.err.constData());
        QCOMPARE(findings(hub.out, QStringLiteral("hf://org/acc")), findings(local.out, acc));
        const auto rows = [](const QByteArray& out) {
            return QJsonDocument::fromJson(out).object().value(QStringLiteral("tensors")).toArray();
        };
        const auto model =
            cli({QStringLiteral("inspect"), QStringLiteral("--json"), acc + QStringLiteral("/model.safetensors")});
        for (const QString& folder : {QStringLiteral("acc"), QStringLiteral("peft")}) {
            const auto r = cli({QStringLiteral("inspect"), QStringLiteral("--json"),
                                url(QStringLiteral("/files/") + folder + QStringLiteral("/"))});
            QVERIFY2(r.rc == 0, r.err.constData());
            QCOMPARE(rows(r.out), rows(model.out));
        }
        // A repository of FSDP rank files opens as their set.
        const QString fsdp = QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/fsdp/fsdp_st");
        const auto fl = cli({QStringLiteral("check"), QStringLiteral("--json"), fsdp});
        const auto fr = cli({QStringLiteral("check"), QStringLiteral("--json"), QStringLiteral("hf://org/fsdp_repo")});
        QVERIFY2(fr.rc == fl.rc, fr.err.constData());
        QCOMPARE(findings(fr.out, QStringLiteral("hf://org/fsdp_repo")), findings(fl.out, fsdp));
        const auto none = cli({QStringLiteral("inspect"), url(QStringLiteral("/files/dcp/"))});
        QCOMPARE(none.rc, 2);
        QCOMPARE(lines(none.err), 1);
        QVERIFY2(none.err.contains("holds none of .metadata, latest, mp_rank_00_model_states.pt, "
                                   "zero_pp_rank_0_mp_rank_00_model_states.pt, model.safetensors"),
                 none.err.constData());
    }

    void inspectRequests()
    {
        const auto r = cli({QStringLiteral("inspect"), QStringLiteral("--json"), url(QStringLiteral("/files/big.pt"))});
        QCOMPARE(r.rc, 0);
        const auto remote = QJsonDocument::fromJson(r.out).object().value(QStringLiteral("remote")).toObject();
        QVERIFY(remote.value(QStringLiteral("requests")).toInt() <= 4);
        QVERIFY(remote.value(QStringLiteral("bytes_read")).toDouble() < (1U << 20) + (64U << 10));
        // Text: the counts are one line on stderr.
        const auto t = cli({QStringLiteral("inspect"), url(QStringLiteral("/files/big.pt"))});
        QCOMPARE(t.rc, 0);
        QVERIFY2(t.err.startsWith("remote: ") && lines(t.err) == 1, t.err.constData());
    }

    void convertThenDiff_data()
    {
        QTest::addColumn<QString>("input");
        QTest::addColumn<QString>("local");
        QTest::newRow("torch zip") << url(QStringLiteral("/files/big.pt")) << big_ + QStringLiteral("/big.pt");
        QTest::newRow("safetensors") << url(QStringLiteral("/files/big.safetensors"))
                                     << big_ + QStringLiteral("/big.safetensors");
        QTest::newRow("zip from Python's zipfile")
            << url(QStringLiteral("/files/big_rezipped.pt")) << big_ + QStringLiteral("/big_rezipped.pt");
        QTest::newRow("hf:// through the redirect")
            << QStringLiteral("hf://org/model/big.pt") << big_ + QStringLiteral("/big.pt");
        QTest::newRow("legacy fixture") << url(QStringLiteral("/files/legacy_sd.pt"))
                                        << QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/legacy_sd.pt");
    }
    void convertThenDiff()
    {
        QFETCH(QString, input);
        QFETCH(QString, local);
        QTemporaryDir out;
        const QString o = out.filePath(QStringLiteral("out.pt"));
        const auto w = cli({QStringLiteral("convert"), input, QStringLiteral("-o"), o});
        QVERIFY2(w.rc == 0, w.err.constData());
        const auto d = cli({QStringLiteral("diff"), QStringLiteral("--strict"), o, local});
        QVERIFY2(d.rc == 0, d.out.constData());
        QCOMPARE(QDir(out.path()).entryList(QDir::Files | QDir::Hidden), QStringList{QStringLiteral("out.pt")});
        // diff over HTTP on both sides, by value.
        const auto both = cli({QStringLiteral("diff"), QStringLiteral("--strict"), input, input});
        QVERIFY2(both.rc == 0, both.err.constData());
    }

    void checkAgainstUrl()
    {
        const auto r = cli({QStringLiteral("check"), url(QStringLiteral("/files/ddp_sd.pt")),
                            QStringLiteral("--against"), url(QStringLiteral("/files/plain_sd.pt"))});
        const auto l = cli({QStringLiteral("check"), QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/ddp_sd.pt"),
                            QStringLiteral("--against"), QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/plain_sd.pt")});
        QCOMPARE(r.rc, l.rc);
        QVERIFY(r.out.contains("module."));
    }

    void hostile_data()
    {
        QTest::addColumn<QString>("kind");
        for (const char* k : {"ignore-range", "endless", "redirect-loop", "wrong-range", "etag", "grow", "stall",
                              "truncated", "status-500", "need-token"}) {
            QTest::newRow(k) << QString::fromLatin1(k);
        }
    }
    // One line, exit 2, and for convert no output and no temporary file left.
    void hostile()
    {
        QFETCH(QString, kind);
        LoopbackServer bad;
        QVERIFY(bad.start(ckpt::test::scriptPath("hostile_server.py"), {big_ + QStringLiteral("/big.pt")}));
        const QString u = bad.url(QStringLiteral("/") + kind + QStringLiteral("/big.pt"));
        QTemporaryDir out;
        const auto c = cli({QStringLiteral("convert"), u, QStringLiteral("-o"), out.filePath(QStringLiteral("o.pt"))});
        QVERIFY2(c.rc == 2, qPrintable(QString::number(c.rc) + QStringLiteral(" ") + QString::fromUtf8(c.err)));
        QVERIFY2(lines(c.err) == 1, c.err.constData());
        QVERIFY(QDir(out.path()).entryList(QDir::Files | QDir::Hidden).isEmpty());
        QVERIFY2(c.maxRssKiB < 400 * 1024, qPrintable(QString::number(c.maxRssKiB)));
    }

    // A server without range requests: refused, or with --download read whole from an unlinked
    // temporary file, which nothing outlives.
    void download()
    {
        LoopbackServer plain;
        QVERIFY(plain.start(ckpt::test::scriptPath("hostile_server.py"), {big_ + QStringLiteral("/big.pt")}));
        const QString u = plain.url(QStringLiteral("/no-ranges/big.pt"));
        const auto refused = cli({QStringLiteral("inspect"), u});
        QCOMPARE(refused.rc, 2);
        QVERIFY(refused.err.contains("does not support range requests") && refused.err.contains("--download"));
        QTemporaryDir tmp;
        qputenv("TMPDIR", tmp.path().toUtf8());
        QTemporaryDir out;
        const QString o = out.filePath(QStringLiteral("o.pt"));
        const auto w = cli({QStringLiteral("convert"), QStringLiteral("--download"), u, QStringLiteral("-o"), o});
        qunsetenv("TMPDIR");
        QVERIFY2(w.rc == 0, w.err.constData());
        QVERIFY(QDir(tmp.path()).entryList(QDir::Files | QDir::Hidden).isEmpty());
        const auto d = cli({QStringLiteral("diff"), QStringLiteral("--strict"), o, big_ + QStringLiteral("/big.pt")});
        QVERIFY2(d.rc == 0, d.out.constData());
        const auto c = cli({QStringLiteral("check"), QStringLiteral("--json"), QStringLiteral("--download"), u});
        const auto l = cli({QStringLiteral("check"), QStringLiteral("--json"), big_ + QStringLiteral("/big.pt")});
        QCOMPARE(c.rc, l.rc);
        QCOMPARE(findings(c.out, u), findings(l.out, big_ + QStringLiteral("/big.pt")));
    }

    // A whole download, testload's and --download's alike, stops while its filesystem keeps a tenth
    // free: in a mount namespace of its own with a 16 MiB tmpfs as TMPDIR, the 24 MiB big.pt stops
    // at 14.4 MiB with one line naming the room, exit 2, and nothing is left in the tmpfs. (Before
    // there was one download, testload's filled the tmpfs and failed on the full disk.)
    void downloadsLeaveRoom()
    {
        const auto probe = runProcess({"/usr/bin/unshare", "--mount", "--propagation", "private", "true"}, 10000);
        if (probe.rc != 0) {
            QSKIP(qPrintable(QStringLiteral("no mount namespace here (unshare --mount): ") +
                             QString::fromUtf8(probe.err).trimmed()));
        }
        LoopbackServer plain;
        QVERIFY(plain.start(ckpt::test::scriptPath("hostile_server.py"), {big_ + QStringLiteral("/big.pt")}));
        QTemporaryDir small;
        // The command's own stdout, then what the tmpfs holds once it has ended ("left: NAMES").
        const std::string inSmallTmp = R"sh(mount -t tmpfs -o size=16m ckpt-room "$0" || exit 99
TMPDIR="$0" "$@"; rc=$?; printf 'left: %s' "$(ls -A "$0")"; exit $rc)sh";
        const std::vector<std::vector<std::string>> commands{
            {CKPTSCOPE_TEST_CLI, "testload", url(QStringLiteral("/files/big.pt")).toStdString()},
            {CKPTSCOPE_TEST_CLI, "inspect", "--download", plain.url(QStringLiteral("/no-ranges/big.pt")).toStdString()},
        };
        for (const auto& command : commands) {
            std::vector<std::string> argv{"/usr/bin/unshare", "--mount", "--propagation", "private",
                                          "/bin/sh",          "-c",      inSmallTmp,      small.path().toStdString()};
            argv.insert(argv.end(), command.begin(), command.end());
            const auto r = runProcess(argv);
            QVERIFY2(r.rc == 2, (command[1] + ": " + r.err.toStdString() + r.out.toStdString()).c_str());
            QVERIFY2(r.err.contains("the download stopped: the file is larger than the 14.4 MiB") &&
                         r.err.contains("has room for (a tenth of its free space"),
                     r.err.constData());
            QCOMPARE(lines(r.err), 1);
            QCOMPARE(r.out, QByteArray("left: "));
        }
    }

    // Ctrl-C while a transfer hangs: exit 130 at once, and the temporary output is gone.
    void interrupted()
    {
        LoopbackServer bad;
        QVERIFY(bad.start(ckpt::test::scriptPath("hostile_server.py"), {big_ + QStringLiteral("/big.pt")}));
        QTemporaryDir out;
        ckpt::test::Process p;
        QVERIFY(p.start({CKPTSCOPE_TEST_CLI, "convert", bad.url(QStringLiteral("/stall-big/big.pt")).toStdString(),
                         "-o", out.filePath(QStringLiteral("o.pt")).toStdString()}));
        QTest::qSleep(1500);  // past the metadata, the output begun, into the first storage's stalled read
        QVERIFY(!QDir(out.path()).entryList(QDir::Files | QDir::Hidden).isEmpty());  // the temporary output
        p.signal(SIGINT);
        const auto r = p.wait(10000);
        QCOMPARE(r.rc, 130);
        QVERIFY(QDir(out.path()).entryList(QDir::Files | QDir::Hidden).isEmpty());
    }

    void credentialsNeverShown()
    {
        qputenv("HF_TOKEN", "hf_supersecret_value");
        const auto g = cli({QStringLiteral("inspect"), QStringLiteral("hf://gated/model/big.pt")});
        QCOMPARE(g.rc, 2);
        QVERIFY(!g.err.contains("hf_supersecret_value") && !g.out.contains("hf_supersecret_value"));
        qputenv("HF_TOKEN", "hf_secret");
        const auto ok =
            cli({QStringLiteral("check"), QStringLiteral("--json"), QStringLiteral("hf://gated/model/big.pt")});
        QVERIFY2(ok.rc != 2, ok.err.constData());
        QVERIFY(!ok.out.contains("hf_secret") && !ok.err.contains("hf_secret"));
        qunsetenv("HF_TOKEN");
        const auto gated = cli({QStringLiteral("check"), QStringLiteral("hf://gated/model/big.pt")});
        QVERIFY(gated.err.contains("huggingface-cli login") && gated.err.contains("restricted"));

        const auto h =
            cli({QStringLiteral("inspect"), QStringLiteral("--header"),
                 QStringLiteral("Authorization: Bearer wrongsecret"), url(QStringLiteral("/private/big.pt"))});
        QCOMPARE(h.rc, 2);
        QVERIFY(!h.err.contains("wrongsecret"));
        const auto hok = cli({QStringLiteral("inspect"), QStringLiteral("--header"),
                              QStringLiteral("Authorization: Bearer secret"), url(QStringLiteral("/private/big.pt"))});
        QCOMPARE(hok.rc, 0);
    }

    // https with HTTP/2 (nginx's self-signed certificate): refused as a TLS error, in one line,
    // until the certificate is trusted through CURL_CA_BUNDLE.
    void tls()
    {
        const QString u = QStringLiteral("https://127.0.0.1:%1/files/big.pt").arg(nginx_.port(2));
        const auto refused = cli({QStringLiteral("inspect"), u});
        QCOMPARE(refused.rc, 2);
        QVERIFY2(refused.err.contains("TLS error") && lines(refused.err) == 1, refused.err.constData());
        qputenv("CURL_CA_BUNDLE", nginx_.certificate().toUtf8());
        const auto ok = cli({QStringLiteral("inspect"), QStringLiteral("--json"), u});
        qunsetenv("CURL_CA_BUNDLE");
        QVERIFY2(ok.rc == 0, ok.err.constData());
        const auto remote = QJsonDocument::fromJson(ok.out).object().value(QStringLiteral("remote")).toObject();
        QVERIFY(remote.value(QStringLiteral("requests")).toInt() <= 4);
        // libcurl negotiated HTTP/2 with nginx (ALPN): its access log says so.
        QFile log(QFileInfo(nginx_.certificate()).dir().filePath(QStringLiteral("access.log")));
        QVERIFY(log.open(QIODevice::ReadOnly));
        QVERIFY(log.readAll().contains("\"GET /files/big.pt HTTP/2.0\""));
    }

    // http_proxy is honoured as curl honours it: every request goes through the proxy.
    void proxyFromEnvironment()
    {
        LoopbackServer proxy;
        const QString log = tmp_.filePath(QStringLiteral("proxy.log"));
        qputenv("HOSTILE_PROXY_LOG", log.toUtf8());
        QVERIFY(proxy.start(ckpt::test::scriptPath("hostile_server.py"), {big_ + QStringLiteral("/big.pt")}));
        qputenv("http_proxy", proxy.url(QString()).toUtf8());
        const auto r = cli({QStringLiteral("check"), url(QStringLiteral("/files/big.pt"))});
        qunsetenv("http_proxy");
        qunsetenv("HOSTILE_PROXY_LOG");
        QVERIFY2(r.rc == 0, r.err.constData());
        QFile f(log);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QVERIFY(f.readAll().contains(url(QStringLiteral("/files/big.pt")).toUtf8()));
    }

    // A value scan that fetches for more than a second shows a progress line (forced here: stderr
    // is no terminal), the scan's own, whose rate is the transfer's; it is erased before the
    // summary (cli/progress.h; tst_progress_tty checks it on a terminal).
    void progressLine()
    {
        qputenv("CKPTSCOPE_PROGRESS", "1");
        const auto r = cli({QStringLiteral("check"), QStringLiteral("--values"), url(QStringLiteral("/slow/big.pt"))});
        qunsetenv("CKPTSCOPE_PROGRESS");
        QCOMPARE(r.rc, 1);  // the NaN
        QVERIFY2(r.err.contains("\rcheck: ") && r.err.contains(" of 24.0 MiB (") && r.err.contains("B/s"),
                 r.err.constData());
        QVERIFY(r.err.contains("\r\x1b[Kremote: ") && r.err.count('\n') == 1);  // one line in the end
        const auto quiet =
            cli({QStringLiteral("check"), QStringLiteral("--values"), url(QStringLiteral("/files/big.pt"))});
        QVERIFY(!quiet.err.contains('\r'));  // not a terminal, not asked for
    }

    void wholeRepository()
    {
        const auto r = cli({QStringLiteral("inspect"), QStringLiteral("hf://org/repo")});
        QVERIFY2(r.rc == 0, r.err.constData());
        QVERIFY(r.out.contains("safetensors"));
        const auto missing = cli({QStringLiteral("inspect"), QStringLiteral("hf://org/absent")});
        QCOMPARE(missing.rc, 2);
        QCOMPARE(lines(missing.err), 1);
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
    TestRemoteCli t;
    return QTest::qExec(&t, argc, argv);
}
#include "tst_remote_cli.moc"
