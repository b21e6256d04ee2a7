// The loopback servers the remote tests read from: Debian's nginx under a temporary config
// (nginx_server.py) and the tests' own misbehaving server (hostile_server.py). Each is a child
// process whose stdin stays open while the test runs; closing it stops the server, which removes
// its temporary files. Nothing listens beyond 127.0.0.1.
#pragma once

#include <QByteArray>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QStandardPaths>
#include <QString>
#include <QStringList>
#include <QTemporaryDir>

#include <memory>

namespace ckpt::test {

inline QString nginxPath()
{
    for (const char* p : {"/usr/sbin/nginx", "/usr/bin/nginx"}) {
        if (QFileInfo(QString::fromLatin1(p)).isExecutable()) {
            return QString::fromLatin1(p);
        }
    }
    return QStandardPaths::findExecutable(QStringLiteral("nginx"));
}

class LoopbackServer {
public:
    // Starts `script` with `args`; ports() holds what it printed once it listens.
    bool start(const QString& script, const QStringList& args)
    {
        return launch(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{script} + args) && waitReady(20000);
    }
    // Starts `program` with `args` (a server that prints its line when it listens) without waiting
    // for it, so several start at once; waitReady() then reads that line.
    bool launch(const QString& program, const QStringList& args)
    {
        proc_ = std::make_unique<QProcess>();
        proc_->setProcessChannelMode(QProcess::ForwardedErrorChannel);
        proc_->start(program, args);
        return proc_->waitForStarted(10000);
    }
    bool waitReady(int timeoutMs)
    {
        for (int waited = 0; waited < timeoutMs && !proc_->canReadLine(); waited += 200) {
            if (!proc_->waitForReadyRead(200) && proc_->state() != QProcess::Running) {
                return false;
            }
        }
        const QByteArray line = proc_->readLine().trimmed();
        for (const auto& p : line.split(' ')) {
            // nginx_server.py's certificate path; not an S3 secret that happens to start with '/'
            // (moto's secrets are base64: one in 64 does).
            if (p.startsWith('/') && p.endsWith(".pem")) {
                certificate_ = QString::fromUtf8(p);
                continue;
            }
            bool number = false;
            const int port = p.toInt(&number);
            if (number) {
                ports_.push_back(port);
            } else {
                words_.push_back(QString::fromUtf8(p));
            }
        }
        return !ports_.empty() && ports_.front() > 0;
    }
    LoopbackServer() = default;
    LoopbackServer(const LoopbackServer&) = delete;
    LoopbackServer& operator=(const LoopbackServer&) = delete;
    ~LoopbackServer()
    {
        if (proc_) {
            proc_->closeWriteChannel();
            if (!proc_->waitForFinished(10000)) {
                proc_->kill();
                proc_->waitForFinished(2000);
            }
        }
    }
    [[nodiscard]] int port(int i = 0) const { return ports_.value(i); }
    // What it printed beside its ports (s3_server.py: the access key and its secret).
    [[nodiscard]] QString word(int i) const { return words_.value(i); }
    // nginx's self-signed certificate for its TLS port (port(2)).
    [[nodiscard]] const QString& certificate() const { return certificate_; }
    [[nodiscard]] QString url(const QString& path, int i = 0) const
    {
        return QStringLiteral("http://127.0.0.1:%1%2").arg(port(i)).arg(path);
    }

private:
    std::unique_ptr<QProcess> proc_;
    QList<int> ports_;
    QStringList words_;
    QString certificate_;
};

// The files nginx serves: every fixture under files/, the same under a Hub layout (cdn/ORG/REPO/
// REV/PATH, behind /ORG/REPO/resolve/REV/PATH), and the Hub API's answer for whole repositories.
inline bool makeServedTree(const QString& root, const QStringList& files)
{
    QDir d(root);
    bool ok = d.mkpath(QStringLiteral("files")) && d.mkpath(QStringLiteral("cdn/org/model/main")) &&
              d.mkpath(QStringLiteral("cdn/gated/model/main")) && d.mkpath(QStringLiteral("cdn/org/repo/main")) &&
              d.mkpath(QStringLiteral("api/models/org/repo/revision")) && d.mkpath(QStringLiteral("cdn/org/repo/v1"));
    for (const auto& f : files) {
        const QString name = QFileInfo(f).fileName();
        ok = ok && QFile::link(f, root + QStringLiteral("/files/") + name) &&
             QFile::link(f, root + QStringLiteral("/cdn/org/model/main/") + name) &&
             QFile::link(f, root + QStringLiteral("/cdn/gated/model/main/") + name);
        if (name == QStringLiteral("big.safetensors")) {
            ok = ok && QFile::link(f, root + QStringLiteral("/cdn/org/repo/main/model.safetensors")) &&
                 QFile::link(f, root + QStringLiteral("/cdn/org/repo/v1/model.safetensors"));
        }
    }
    // Every Hugging Face sharded set of the fixtures under files/sets/NAME/, and hf_st as the
    // repository org/sharded (whose API listing names its index and shards).
    const QDir sets(QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/sharded"));
    ok = ok && d.mkpath(QStringLiteral("files/sets")) && d.mkpath(QStringLiteral("cdn/org/sharded")) &&
         d.mkpath(QStringLiteral("api/models/org/sharded/revision"));
    for (const auto& name : sets.entryList({QStringLiteral("hf_*")}, QDir::Dirs | QDir::NoDotAndDotDot)) {
        ok = ok && QFile::link(sets.filePath(name), root + QStringLiteral("/files/sets/") + name);
    }
    ok = ok && QFile::link(sets.filePath(QStringLiteral("hf_st")), root + QStringLiteral("/cdn/org/sharded/main"));
    {
        QByteArray listing = R"({"id": "org/sharded", "siblings": [)";
        const auto names = QDir(sets.filePath(QStringLiteral("hf_st"))).entryList(QDir::Files);
        for (int i = 0; i < names.size(); ++i) {
            listing += (i ? ", " : "") + QByteArray(R"({"rfilename": ")") + names[i].toUtf8() + "\"}";
        }
        QFile api(root + QStringLiteral("/api/models/org/sharded/revision/main"));
        ok = ok && api.open(QIODevice::WriteOnly) && api.write(listing + "]}") > 0;
    }
    for (const char* rev : {"main", "v1"}) {
        QFile api(root + QStringLiteral("/api/models/org/repo/revision/") + QString::fromLatin1(rev));
        ok = ok && api.open(QIODevice::WriteOnly) &&
             api.write(
                 R"({"id": "org/repo", "siblings": [{"rfilename": ".gitattributes"}, {"rfilename": "config.json"},)"
                 R"( {"rfilename": "model.safetensors"}]})") > 0;
    }
    return ok;
}

// A 24 MiB torch zip (12 tensors of 2 MiB, one NaN) and a safetensors file of the same size,
// written by real PyTorch, so that reads are partial (the fixtures are mostly under 64 KiB); and
// the zip rewritten by Python's zipfile (big_rezipped.pt: no 64-byte alignment, so no payload is
// where a torch writer would put it; big_zip64.pt: with ZIP64 extras too, so a payload assumed where
// torch puts it would run into the next header, and the last into the central directory).
inline bool makeBigFiles(const QString& dir)
{
    const QString script = QStringLiteral(R"(
import collections, json, struct, sys, torch
torch.manual_seed(0)
sd = collections.OrderedDict((f'layer{i}.weight', torch.randn(512, 1024)) for i in range(12))
sd['layer3.weight'][0, 0] = float('nan')
torch.save(sd, sys.argv[1] + '/big.pt')
hdr, blobs, off = {}, [], 0
for k, v in sd.items():
    b = v.numpy().tobytes()
    hdr[k] = {'dtype': 'F32', 'shape': list(v.shape), 'data_offsets': [off, off + len(b)]}
    off += len(b)
    blobs.append(b)
h = json.dumps(hdr).encode()
h += b' ' * ((8 - len(h) % 8) % 8)
open(sys.argv[1] + '/big.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(blobs))
import zipfile
with zipfile.ZipFile(sys.argv[1] + '/big.pt') as zin, \
        zipfile.ZipFile(sys.argv[1] + '/big_rezipped.pt', 'w', zipfile.ZIP_STORED) as zout:
    for info in zin.infolist():
        zout.writestr(info.filename, zin.read(info.filename))
with zipfile.ZipFile(sys.argv[1] + '/big.pt') as zin, \
        zipfile.ZipFile(sys.argv[1] + '/big_zip64.pt', 'w', zipfile.ZIP_STORED) as zout:
    for info in zin.infolist():
        with zout.open(zipfile.ZipInfo(info.filename), 'w', force_zip64=True) as out:
            out.write(zin.read(info.filename))
torch.save(sd, sys.argv[1] + '/big_legacy.pt', _use_new_zipfile_serialization=False)
# The same stream with the second record's element count one short of what its pickle declares
# (the first one's lies in the head that is fetched with the pickles).
import pickle
data = bytearray(open(sys.argv[1] + '/big_legacy.pt', 'rb').read())
with open(sys.argv[1] + '/big_legacy.pt', 'rb') as f:
    for _ in range(3):
        pickle.load(f)
    class Skip(pickle.Unpickler):
        def find_class(self, module, name):
            return (lambda *a: None) if name.startswith('_rebuild') else super().find_class(module, name)
        def persistent_load(self, pid):
            return None
    Skip(f).load()
    pickle.load(f)
    at = f.tell()
at += 8 + struct.unpack_from('<q', data, at)[0] * 4
count = struct.unpack_from('<q', data, at)[0]
struct.pack_into('<q', data, at, count - 1)
open(sys.argv[1] + '/big_legacy_short.pt', 'wb').write(bytes(data))
)");
    QProcess p;
    p.start(QStringLiteral(CKPTSCOPE_PYTHON), {QStringLiteral("-c"), script, dir});
    return p.waitForFinished(120000) && p.exitCode() == 0;
}

// --json output with `shown` (how the input was named, and the folder's prefix in every member's
// path) as SET and the remote figures taken out (with the blanks before the last brace, which
// RemoteSession::withJson sets): byte for byte what the same folder gives on disk.
inline QByteArray sameAsOnDisk(QByteArray json, const QString& input, const QString& shown)
{
    json.replace("\"" + input.toUtf8() + "\"", "\"SET\"").replace(shown.toUtf8(), "SET");
    if (const auto at = json.lastIndexOf(",\n \"remote\": {"); at >= 0) {
        json.remove(at, json.indexOf('}', at) + 1 - at);
    }
    auto close = json.lastIndexOf('}');
    while (close > 0 && (json[close - 1] == '\n' || json[close - 1] == ' ')) {
        json.remove(--close, 1);
    }
    return json;
}

inline QString scriptPath(const char* name)
{
    return QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/remote/") + QString::fromLatin1(name);
}

}  // namespace ckpt::test
