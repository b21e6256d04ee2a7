// The zip reader and writer against the two oracles that matter: files written by real torch.save
// and Python's zipfile (plus `unzip -t`), and hostile input that must give an Error, never a crash.
#include "archive/zip.h"
#include "archive_test_util.h"

#include <QCryptographicHash>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QTest>

#include <cstring>
#include <fcntl.h>
#include <unistd.h>

using namespace ckpt;
using namespace ckpt::archive;
using namespace archive_test;

namespace {

// torch.save of a state dict with more than 10 storages (so torch's string-sorted record order
// 0,1,10,11,2,... shows up), an empty tensor and a float16 one.
const QString kTorchSave = QStringLiteral(R"(
import sys, torch
torch.manual_seed(0)
sd = {'w': torch.randn(3, 4), 'b': torch.arange(5, dtype=torch.int64), 'e': torch.zeros(0),
      'h': torch.ones(2, dtype=torch.float16)}
sd.update({'k%d' % i: torch.full((i + 1,), float(i)) for i in range(12)})
torch.save(sd, sys.argv[1])
)");

// Every record as Python's zipfile sees it, with the payload offset computed from the local header.
const QString kDescribe = QStringLiteral(R"(
import sys, zipfile, json, struct
p = sys.argv[1]
out = []
with zipfile.ZipFile(p) as z, open(p, 'rb') as f:
    for i in z.infolist():
        f.seek(i.header_offset)
        n, m = struct.unpack('<HH', f.read(30)[26:30])
        out.append(dict(name=i.filename, offset=i.header_offset, data=i.header_offset + 30 + n + m,
                        size=i.file_size, csize=i.compress_size, crc=i.CRC, method=i.compress_type,
                        hex=z.read(i.filename).hex()))
print(json.dumps(out))
)");

// Re-zips a torch archive with Python's zipfile: stored or deflated, another folder, reversed order.
const QString kRezip = QStringLiteral(R"(
import sys, zipfile
src, dst, mode, folder = sys.argv[1:5]
comp = zipfile.ZIP_DEFLATED if mode == 'deflated' else zipfile.ZIP_STORED
with zipfile.ZipFile(src) as z:
    infos = z.infolist()
    if mode == 'reversed':
        infos = infos[::-1]
    with zipfile.ZipFile(dst, 'w', compression=comp) as o:
        for i in infos:
            o.writestr(folder + '/' + i.filename.split('/', 1)[1], z.read(i.filename))
)");

const QString kTestzipHashes = QStringLiteral(R"(
import sys, zipfile, json, hashlib
with zipfile.ZipFile(sys.argv[1]) as z:
    bad = z.testzip()
    assert bad is None, bad
    print(json.dumps({i.filename: hashlib.sha256(z.read(i)).hexdigest() for i in z.infolist()}))
)");

QString sha256(Bytes b)
{
    return QString::fromLatin1(
        QCryptographicHash::hash(QByteArrayView(reinterpret_cast<const char*>(b.data()), qsizetype(b.size())),
                                 QCryptographicHash::Sha256)
            .toHex());
}

QByteArray hexOf(Bytes b)
{
    return QByteArray(reinterpret_cast<const char*>(b.data()), qsizetype(b.size())).toHex();
}

bool savedByTorch(const QString& path)
{
    const PyResult r = runPython(kTorchSave, {path});
    if (r.exitCode != 0) {
        qWarning("%s", r.err.constData());
    }
    return r.exitCode == 0;
}

// The reader's view of `path` equals Python zipfile's, record by record.
void compareWithZipfile(const QString& path, const std::string& folder)
{
    const QByteArray file = readAll(path);
    auto z = ZipReader::parse(bytesOf(file));
    QVERIFY2(z.ok(), z.ok() ? "" : z.error().describe().c_str());
    const PyResult py = runPython(kDescribe, {path});
    QVERIFY2(py.exitCode == 0, py.err.constData());
    const QJsonArray expected = QJsonDocument::fromJson(py.out).array();
    QCOMPARE(z->records().size(), std::size_t(expected.size()));
    QCOMPARE(z->folder(), folder);
    std::vector<std::byte> scratch;
    for (qsizetype i = 0; i < expected.size(); ++i) {
        const QJsonObject e = expected[i].toObject();
        const ZipRecord& r = z->records()[std::size_t(i)];
        QCOMPARE(QString::fromStdString(r.name), e[QStringLiteral("name")].toString());
        QCOMPARE(r.localHeaderOffset, std::uint64_t(e[QStringLiteral("offset")].toInteger()));
        QCOMPARE(r.dataOffset, std::uint64_t(e[QStringLiteral("data")].toInteger()));
        QCOMPARE(r.size, std::uint64_t(e[QStringLiteral("size")].toInteger()));
        QCOMPARE(r.compressedSize, std::uint64_t(e[QStringLiteral("csize")].toInteger()));
        QCOMPARE(r.crc32, std::uint32_t(e[QStringLiteral("crc")].toInteger()));
        QCOMPARE(int(r.method), e[QStringLiteral("method")].toInt());
        auto d = z->data(r, scratch);
        QVERIFY2(d.ok(), d.ok() ? "" : d.error().describe().c_str());
        QCOMPARE(hexOf(*d), e[QStringLiteral("hex")].toString().toLatin1());
        QCOMPARE(crc32(*d), r.crc32);
        const std::string rel = r.name.substr(folder.size() + 1);
        QCOMPARE(z->find(rel), &r);
    }
}

void put32(QByteArray& a, qsizetype at, std::uint32_t v)
{
    for (int i = 0; i < 4; ++i) {
        a[at + i] = char((v >> (8 * i)) & 0xFF);
    }
}

void put64(QByteArray& a, qsizetype at, std::uint64_t v)
{
    for (int i = 0; i < 8; ++i) {
        a[at + i] = char((v >> (8 * i)) & 0xFF);
    }
}

// A successful parse of hostile input must still only hand out spans inside the input.
void readEveryRecord(const QByteArray& file)
{
    auto z = ZipReader::parse(bytesOf(file));
    if (!z) {
        QVERIFY(!z.error().message.empty());
        return;
    }
    std::vector<std::byte> scratch;
    for (const ZipRecord& r : z->records()) {
        auto d = z->data(r, scratch);
        if (d && r.method == 0) {
            QVERIFY(d->data() >= bytesOf(file).data());
            QVERIFY(d->data() + d->size() <= bytesOf(file).data() + file.size());
        }
    }
}

struct Fd {
    int fd = -1;
    explicit Fd(int f) : fd(f) {}
    ~Fd()
    {
        if (fd >= 0) {
            ::close(fd);
        }
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
};

int createFile(const QString& path)
{
    return ::open(path.toLocal8Bit().constData(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);  // NOLINT
}

}  // namespace

class TestZip : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void crc32KnownValues();
    void readsTorchSave();
    void readsPythonZipfile_data();
    void readsPythonZipfile();
    void readsZip64ExtrasInCentralDirectory();
    void writerReproducesTorchBytes();
    void writerOutputAcceptedByZipfileAndUnzip_data();
    void writerOutputAcceptedByZipfileAndUnzip();
    void torchLoadsWrittenArchive();
    void sharedCopyRunsKeepSourceDistances();
    void sharedCopyCancels();
    void sharedCopyPlacement_data();
    void sharedCopyPlacement();
    void localHeadersByPreadMatchTheMapping();
    void zip64ManyRecords();
    void bigRecordZip64();
    void writerReportsWriteErrors();
    void writerUsageErrors();
    void everyTruncationIsAnError();
    void garbageDirectoryFieldsAreErrors();
    void bitFlipsNeverEscapeTheFile();
    void randomBytesAreErrors();
    void deflateSizeLiesAreErrors();
    void hugeDeflatedRecordIsALimit();

private:
    QTemporaryDir dir_;
};

void TestZip::crc32KnownValues()
{
    QCOMPARE(crc32(asBytes("123456789")), 0xCBF43926U);
    QCOMPARE(crc32(asBytes("")), 0U);
    QCOMPARE(crc32(asBytes("56789"), crc32(asBytes("1234"))), 0xCBF43926U);

    std::vector<std::byte> big(64U << 20, std::byte{0x5A});
    QElapsedTimer t;
    t.start();
    const std::uint32_t c = crc32({big.data(), big.size()});
    const double secs = std::max<qint64>(t.nsecsElapsed(), 1) / 1e9;
    qInfo("crc32: %.2f GB/s", double(big.size()) / secs / 1e9);
    QCOMPARE(c, crc32({big.data() + 1000, big.size() - 1000}, crc32({big.data(), 1000})));
}

void TestZip::readsTorchSave()
{
    const QString path = dir_.filePath(QStringLiteral("model.pt"));
    QVERIFY(savedByTorch(path));
    compareWithZipfile(path, "model");
    if (QTest::currentTestFailed()) {
        return;
    }
    const QByteArray file = readAll(path);
    auto z = ZipReader::parse(bytesOf(file));
    QVERIFY(z.ok());
    std::vector<std::byte> scratch;
    const ZipRecord* v = z->find("version");
    QVERIFY(v != nullptr);
    QCOMPARE(asText(*z->data(*v, scratch)), std::string_view("3\n"));
    QCOMPARE(z->find("VERSION"), v);  // miniz looks names up case-insensitively
    QVERIFY(z->find("data.pkl") != nullptr);
    QVERIFY(z->find("constants.pkl") == nullptr);
    for (const ZipRecord& r : z->records()) {
        QCOMPARE(r.dataOffset % 64, 0U);  // torch aligns every payload
    }
}

void TestZip::readsPythonZipfile_data()
{
    QTest::addColumn<QString>("mode");
    QTest::addColumn<QString>("folder");
    QTest::newRow("stored") << QStringLiteral("stored") << QStringLiteral("archive");
    QTest::newRow("deflated") << QStringLiteral("deflated") << QStringLiteral("best model");
    QTest::newRow("reversed") << QStringLiteral("reversed") << QStringLiteral("x");
}

void TestZip::readsPythonZipfile()
{
    QFETCH(QString, mode);
    QFETCH(QString, folder);
    const QString src = dir_.filePath(QStringLiteral("src-%1.pt").arg(mode));
    const QString dst = dir_.filePath(QStringLiteral("rezipped-%1.pt").arg(mode));
    QVERIFY(savedByTorch(src));
    const PyResult r = runPython(kRezip, {src, dst, mode, folder});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    compareWithZipfile(dst, folder.toStdString());
}

void TestZip::readsZip64ExtrasInCentralDirectory()
{
    // Small records whose central entries nevertheless say 0xFFFFFFFF and carry the real sizes
    // and offsets in ZIP64 extras: the reader's ZIP64 path without writing 4 GiB. zipfile agrees.
    const QString script = QStringLiteral(R"(
import sys, struct, zlib, zipfile
recs = [(b'f/rec', b'hello zip64'), (b'f/two', b'second')]
body, cd, offs = b'', b'', []
for nm, d in recs:
    offs.append(len(body))
    body += struct.pack('<IHHHHHIIIHH', 0x04034b50, 45, 0, 0, 0, 0, zlib.crc32(d), len(d), len(d), len(nm), 0) + nm + d
for (nm, d), off in zip(recs, offs):
    extra = struct.pack('<HHQQQ', 1, 24, len(d), len(d), off)
    cd += struct.pack('<IHHHHHHIIIHHHHHII', 0x02014b50, 45, 45, 0, 0, 0, 0, zlib.crc32(d), 0xffffffff,
                      0xffffffff, len(nm), len(extra), 0, 0, 0, 0, 0xffffffff) + nm + extra
eocd = struct.pack('<IHHHHIIH', 0x06054b50, 0, 0, 2, 2, len(cd), len(body), 0)
open(sys.argv[1], 'wb').write(body + cd + eocd)
with zipfile.ZipFile(sys.argv[1]) as z:
    assert z.testzip() is None
    assert [z.read(n.decode()) for n, _ in recs] == [d for _, d in recs]
)");
    const QString path = dir_.filePath(QStringLiteral("z64extra.zip"));
    const PyResult r = runPython(script, {path});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    compareWithZipfile(path, "f");
}

void TestZip::writerReproducesTorchBytes()
{
    // Same records, same order: the writer must lay them out byte for byte as torch's miniz does.
    const QString src = dir_.filePath(QStringLiteral("bytes.pt"));
    QVERIFY(savedByTorch(src));
    const QByteArray in = readAll(src);
    auto z = ZipReader::parse(bytesOf(in));
    QVERIFY(z.ok());
    const QString dst = dir_.filePath(QStringLiteral("bytes-copy.pt"));
    {
        Fd out(createFile(dst));
        QVERIFY(out.fd >= 0);
        ZipWriter w(out.fd);
        std::vector<std::byte> scratch;
        for (const ZipRecord& r : z->records()) {
            auto ok = w.addRecord(r.name, *z->data(r, scratch));
            QVERIFY2(ok.ok(), ok.ok() ? "" : ok.error().describe().c_str());
        }
        QVERIFY(w.finish().ok());
        QCOMPARE(w.bytesWritten(), std::uint64_t(in.size()));
    }
    const QByteArray out = readAll(dst);
    QCOMPARE(out.size(), in.size());
    for (qsizetype i = 0; i < in.size(); ++i) {
        if (in[i] != out[i]) {
            QFAIL(qPrintable(QStringLiteral("first difference at byte %1").arg(i)));
        }
    }
}

void TestZip::writerOutputAcceptedByZipfileAndUnzip_data()
{
    QTest::addColumn<int>("alignment");
    QTest::newRow("64") << 64;
    QTest::newRow("4096") << 4096;
    QTest::newRow("1") << 1;
}

void TestZip::writerOutputAcceptedByZipfileAndUnzip()
{
    QFETCH(int, alignment);
    // Sizes around the alignment and past the 1 MiB write buffer; names of many lengths.
    const std::vector<std::size_t> sizes{0, 1, 63, 64, 65, 1000, 100000, (2U << 20) + 3, 0, 7};
    QByteArray source(4 << 20, '\0');
    for (qsizetype i = 0; i < source.size(); ++i) {
        source[i] = char((i * 131 + i / 7) & 0xFF);
    }
    const QString srcPath = dir_.filePath(QStringLiteral("source.bin"));
    QVERIFY(writeAll(srcPath, source));
    Fd src(::open(srcPath.toLocal8Bit().constData(), O_RDONLY | O_CLOEXEC));  // NOLINT
    QVERIFY(src.fd >= 0);

    const QString path = dir_.filePath(QStringLiteral("written-%1.zip").arg(alignment));
    std::vector<std::pair<std::string, Bytes>> expected;
    {
        Fd out(createFile(path));
        QVERIFY(out.fd >= 0);
        ZipWriter w(out.fd, std::uint32_t(alignment));
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            const std::string name = "arch/" + std::string(i * 3, 'n') + "rec" + std::to_string(i);
            const Bytes payload = bytesOf(source).subspan(i * 17, sizes[i]);
            Expected<void> ok;
            switch (i % 4) {
            case 0:
                ok = w.addRecord(name, payload);
                break;
            case 1: {
                ok = w.beginRecord(name, payload.size());
                for (std::size_t at = 0; ok && at < payload.size(); at += 4099) {
                    ok = w.writeChunk(payload.subspan(at, std::min<std::size_t>(4099, payload.size() - at)));
                }
                if (ok) {
                    ok = w.endRecord();
                }
                break;
            }
            case 2:
                ok = w.addRecordFromFile(name, src.fd, i * 17, payload.size(), std::nullopt);
                break;
            default:
                ok = w.addRecordFromFile(name, src.fd, i * 17, payload.size(), crc32(payload));
                break;
            }
            QVERIFY2(ok.ok(), ok.ok() ? "" : ok.error().describe().c_str());
            expected.emplace_back(name, payload);
        }
        QVERIFY(w.finish().ok());
    }

    const PyResult py = runPython(kTestzipHashes, {path});
    QVERIFY2(py.exitCode == 0, py.err.constData());
    const QJsonObject hashes = QJsonDocument::fromJson(py.out).object();
    QCOMPARE(hashes.size(), qsizetype(expected.size()));
    for (const auto& [name, payload] : expected) {
        QCOMPARE(hashes[QString::fromStdString(name)].toString(), sha256(payload));
    }

    QProcess unzip;
    unzip.start(QStringLiteral("unzip"), {QStringLiteral("-tq"), path});
    QVERIFY(unzip.waitForFinished(60000));
    QVERIFY2(unzip.exitCode() == 0, unzip.readAllStandardOutput().constData());

    const QByteArray file = readAll(path);
    auto z = ZipReader::parse(bytesOf(file));
    QVERIFY(z.ok());
    QCOMPARE(z->records().size(), expected.size());
    std::vector<std::byte> scratch;
    for (std::size_t i = 0; i < expected.size(); ++i) {
        const ZipRecord& r = z->records()[i];
        QCOMPARE(r.name, expected[i].first);
        QCOMPARE(r.dataOffset % std::uint64_t(alignment), 0U);
        QCOMPARE(sha256(*z->data(r, scratch)), sha256(expected[i].second));
    }
}

// addRecordsFromFile copies a stretch of source records in one go and overwrites the gaps with
// its own headers. The source's gaps hold a marker that must not survive, every record must read
// back with the right bytes and CRC in Python's zipfile and `unzip -t`, and each run ends exactly
// where the rules say: a gap too narrow for the next header, an empty record, a gap wider than a
// page of padding, an offset off torch's alignment relative to the run's first record, a
// duplicate name.
void TestZip::sharedCopyRunsKeepSourceDistances()
{
    const QByteArray marker = QByteArrayLiteral("LEAK");
    QByteArray source;
    std::vector<FileRecord> records;
    auto place = [&](const std::string& name, qsizetype gap, qsizetype size) {
        source.append(marker.repeated(gap / 4 + 1).left(gap));
        FileRecord r{"out/" + name, std::uint64_t(source.size()), std::uint64_t(size), std::nullopt};
        for (qsizetype i = 0; i < size; ++i) {
            source.append(char('a' + (i * 7 + source.size()) % 26));
        }
        records.push_back(std::move(r));
    };
    place("big", 4096 * 3 + 64, (3 << 20) / 2);  // run 1 (phased: 1.5 MiB)
    place("b", 192, 1000);                       // ...fits the gap
    place("c", 128 + 24, 640);                   // ...fits (gap keeps the relative alignment of 64)
    place(std::string(200, 'L'), 64, 64);        // run 2: the gap cannot hold a 200-byte name
    place("zero", 64, 0);                        // run 3: empty record
    place("after-zero", 0, 128);                 // run 4
    place("far", 8192, 256);                     // run 5: the gap is wider than a page
    place("odd", 72, 100);                       // run 6: off alignment relative to "far"
    place("d1", 128 + 28, 300);                  // ...(run 6 starts at "odd", so "d1" may follow it)
    records.push_back(records[1]);               // run 7: "b" again is refused when it starts a run
    source.append(marker.repeated(64));
    const QString srcPath = dir_.filePath(QStringLiteral("runs-source.bin"));
    QVERIFY(writeAll(srcPath, source));
    Fd src(::open(srcPath.toLocal8Bit().constData(), O_RDONLY | O_CLOEXEC));  // NOLINT
    QVERIFY(src.fd >= 0);

    const QString path = dir_.filePath(QStringLiteral("runs.zip"));
    std::vector<std::size_t> runs;
    {
        Fd out(createFile(path));
        QVERIFY(out.fd >= 0);
        ZipWriter w(out.fd);
        QVERIFY(w.addRecord("out/data.pkl", asBytes("pickle")).ok());
        std::span<const FileRecord> left(records.data(), records.size() - 1);
        while (!left.empty()) {
            auto n = w.addRecordsFromFile(left, src.fd);
            QVERIFY2(n.ok(), n.ok() ? "" : n.error().describe().c_str());
            QVERIFY(*n >= 1);
            runs.push_back(*n);
            left = left.subspan(*n);
        }
        auto dup = w.addRecordsFromFile({&records.back(), 1}, src.fd);
        QVERIFY(!dup.ok());
        QCOMPARE(dup.error().code, ErrorCode::Usage);
        QVERIFY(w.finish().ok());
    }
    QCOMPARE(runs, (std::vector<std::size_t>{3, 1, 1, 1, 1, 2}));

    const QByteArray file = readAll(path);
    QVERIFY2(!file.contains(marker), "bytes from the source's gaps survived in the archive");
    const PyResult py = runPython(kTestzipHashes, {path});
    QVERIFY2(py.exitCode == 0, py.err.constData());
    const QJsonObject hashes = QJsonDocument::fromJson(py.out).object();
    for (std::size_t i = 0; i + 1 < records.size(); ++i) {
        const Bytes payload = bytesOf(source).subspan(records[i].srcOffset, records[i].size);
        QCOMPARE(hashes[QString::fromStdString(records[i].name)].toString(), sha256(payload));
    }
    QProcess unzip;
    unzip.start(QStringLiteral("unzip"), {QStringLiteral("-tq"), path});
    QVERIFY(unzip.waitForFinished(60000));
    QVERIFY2(unzip.exitCode() == 0, unzip.readAllStandardOutput().constData());
    compareWithZipfile(path, "out");

    auto z = ZipReader::parse(bytesOf(file));
    QVERIFY(z.ok());
    for (std::size_t i = 0; i + 1 < records.size(); ++i) {
        const ZipRecord* r = z->find(records[i].name.substr(4));
        QVERIFY(r != nullptr);
        if (records[i].srcOffset % 64 == 0) {
            QCOMPARE(r->dataOffset % 64, 0U);  // torch's alignment, kept wherever the source had it
        }
    }
    // The phased run keeps each record's offset within a page, so the kernel copies whole pages.
    for (std::size_t i = 0; i < 3; ++i) {
        QCOMPARE(z->find(records[i].name.substr(4))->dataOffset % 4096, records[i].srcOffset % 4096);
    }
}

// Where a run's first record lands: 16 MiB and more in the first page of a 64 KiB block at the
// source's offset within a page, 1 MiB and more at that offset in any page, smaller on torch's
// plain 64 bytes (the padding must stay under 0.4% of what it speeds up).
void TestZip::sharedCopyPlacement_data()
{
    QTest::addColumn<qsizetype>("size");
    QTest::addColumn<int>("block");
    QTest::newRow("17 MiB") << qsizetype(17 << 20) << (64 << 10);
    QTest::newRow("2 MiB") << qsizetype(2 << 20) << 4096;
    QTest::newRow("100 KiB") << qsizetype(100 << 10) << 64;
}

void TestZip::sharedCopyPlacement()
{
    QFETCH(qsizetype, size);
    QFETCH(int, block);
    const std::uint64_t srcOffset = 3 * 4096 + 1344;
    QByteArray source(qsizetype(srcOffset) + size, 's');
    const QString srcPath = dir_.filePath(QStringLiteral("placement-source.bin"));
    QVERIFY(writeAll(srcPath, source));
    Fd src(::open(srcPath.toLocal8Bit().constData(), O_RDONLY | O_CLOEXEC));  // NOLINT
    const QString path = dir_.filePath(QStringLiteral("placement.zip"));
    {
        Fd out(createFile(path));
        ZipWriter w(out.fd);
        QVERIFY(w.addRecord("p/data.pkl", asBytes(std::string(5000, 'x'))).ok());
        const FileRecord r{"p/data/0", srcOffset, std::uint64_t(size), std::nullopt};
        QCOMPARE(*w.addRecordsFromFile({&r, 1}, src.fd), std::size_t(1));
        QVERIFY(w.finish().ok());
    }
    const QByteArray file = readAll(path);
    auto z = ZipReader::parse(bytesOf(file));
    QVERIFY(z.ok());
    const ZipRecord* r = z->find("data/0");
    QVERIFY(r != nullptr);
    const std::uint64_t want = block == 64 ? 0 : srcOffset % 4096;
    QCOMPARE(r->dataOffset % std::uint64_t(block), want);
    const std::uint64_t headerEnd = r->localHeaderOffset + 30 + r->name.size() + 4;
    QVERIFY(r->dataOffset - headerEnd < std::uint64_t(block));  // no more padding than the placement needs
    compareWithZipfile(path, "p");
}

void TestZip::sharedCopyCancels()
{
    QByteArray source(24 << 20, 'x');
    const QString srcPath = dir_.filePath(QStringLiteral("cancel-source.bin"));
    QVERIFY(writeAll(srcPath, source));
    Fd src(::open(srcPath.toLocal8Bit().constData(), O_RDONLY | O_CLOEXEC));  // NOLINT
    QVERIFY(src.fd >= 0);
    const std::vector<FileRecord> records{{"a/one", 0, 12 << 20, std::nullopt}, {"a/two", 12U << 20, 12 << 20, 0}};
    Fd out(createFile(dir_.filePath(QStringLiteral("cancelled.zip"))));
    ZipWriter w(out.fd);
    std::uint64_t seen = 0;
    auto n = w.addRecordsFromFile(records, src.fd, [&](std::uint64_t bytes) {
        seen += bytes;
        return false;
    });
    QVERIFY(!n.ok());
    QCOMPARE(n.error().code, ErrorCode::Cancelled);
    QVERIFY(seen > 0 && seen < (24U << 20));
    QVERIFY(!w.finish().ok());  // a stopped archive cannot be finished into something that looks whole
}

// parse() with the file's descriptor reads far-apart local headers with pread instead of through
// the mapping; both ways must give the same records, and the same error for a broken header.
void TestZip::localHeadersByPreadMatchTheMapping()
{
    const QString path = dir_.filePath(QStringLiteral("far-apart.zip"));
    {
        Fd out(createFile(path));
        ZipWriter w(out.fd);
        const QByteArray payload(600 << 10, 'p');
        for (int i = 0; i < 6; ++i) {
            QVERIFY(
                w.addRecord("far/data/" + std::to_string(i), bytesOf(payload.left(i % 2 ? 100 : payload.size()))).ok());
        }
        QVERIFY(w.finish().ok());
    }
    QByteArray file = readAll(path);
    Fd fd(::open(path.toLocal8Bit().constData(), O_RDONLY | O_CLOEXEC));  // NOLINT
    auto mapped = ZipReader::parse(bytesOf(file));
    auto preads = ZipReader::parse(bytesOf(file), fd.fd);
    QVERIFY(mapped.ok() && preads.ok());
    QCOMPARE(preads->records().size(), mapped->records().size());
    for (std::size_t i = 0; i < mapped->records().size(); ++i) {
        QCOMPARE(preads->records()[i].dataOffset, mapped->records()[i].dataOffset);
        QCOMPARE(preads->records()[i].name, mapped->records()[i].name);
    }

    const std::uint64_t lh = mapped->records()[4].localHeaderOffset;
    file[qsizetype(lh)] = 'X';
    QVERIFY(writeAll(path, file));
    Fd broken(::open(path.toLocal8Bit().constData(), O_RDONLY | O_CLOEXEC));  // NOLINT
    auto a = ZipReader::parse(bytesOf(file));
    auto b = ZipReader::parse(bytesOf(file), broken.fd);
    QVERIFY(!a.ok() && !b.ok());
    QCOMPARE(b.error().message, a.error().message);
    QCOMPARE(b.error().offset, std::optional<std::uint64_t>(lh));
}

void TestZip::torchLoadsWrittenArchive()
{
    const QString src = dir_.filePath(QStringLiteral("orig.pt"));
    QVERIFY(savedByTorch(src));
    const QByteArray in = readAll(src);
    auto z = ZipReader::parse(bytesOf(in));
    QVERIFY(z.ok());
    // Another folder, `version` first and storages in reverse: torch must not care.
    const QString dst = dir_.filePath(QStringLiteral("rewritten.pt"));
    {
        Fd out(createFile(dst));
        Fd inFd(::open(src.toLocal8Bit().constData(), O_RDONLY | O_CLOEXEC));  // NOLINT
        QVERIFY(out.fd >= 0 && inFd.fd >= 0);
        ZipWriter w(out.fd);
        QVERIFY(w.addRecord("other/version", asBytes("3\n")).ok());
        std::vector<std::byte> scratch;
        for (auto it = z->records().rbegin(); it != z->records().rend(); ++it) {
            const std::string rel = it->name.substr(z->folder().size() + 1);
            if (rel.starts_with("data/")) {
                QVERIFY(w.addRecordFromFile("other/" + rel, inFd.fd, it->dataOffset, it->size, it->crc32).ok());
            }
        }
        const ZipRecord* pkl = z->find("data.pkl");
        QVERIFY(pkl != nullptr);
        QVERIFY(w.addRecord("other/data.pkl", *z->data(*pkl, scratch)).ok());
        QVERIFY(w.finish().ok());
    }
    const PyResult r = runPython(QStringLiteral(R"(
import sys, torch
a = torch.load(sys.argv[1]); b = torch.load(sys.argv[2])
assert list(a.keys()) == list(b.keys())
for k in a:
    assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
print(len(a))
)"),
                                 {src, dst});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    QCOMPARE(r.out.trimmed(), QByteArray("16"));
}

void TestZip::zip64ManyRecords()
{
    // More than 0xFFFF records: the classic end record's counts saturate and the reader must take
    // the ZIP64 end record's. (A >= 4 GiB record is covered by bigRecordZip64, opt-in.)
    constexpr int kCount = 70000;
    const QString path = dir_.filePath(QStringLiteral("many.zip"));
    {
        Fd out(createFile(path));
        QVERIFY(out.fd >= 0);
        ZipWriter w(out.fd);
        for (int i = 0; i < kCount; ++i) {
            const std::string body(std::size_t(i % 7), char('a' + i % 26));
            QVERIFY(w.addRecord("many/r" + std::to_string(i), asBytes(body)).ok());
        }
        QVERIFY(w.finish().ok());
    }
    const QByteArray file = readAll(path);
    QCOMPARE(int(loadLE(bytesOf(file), std::size_t(file.size()) - 12, 2)), 0xFFFF);

    QElapsedTimer t;
    t.start();
    auto z = ZipReader::parse(bytesOf(file));
    const qint64 parseNs = t.nsecsElapsed();
    QVERIFY(z.ok());
    QCOMPARE(z->records().size(), std::size_t(kCount));
    t.restart();
    std::vector<std::byte> scratch;
    for (int i = 0; i < kCount; ++i) {
        const ZipRecord* r = z->find("r" + std::to_string(i));
        QVERIFY(r != nullptr);
        QCOMPARE(r->size, std::uint64_t(i % 7));
    }
    const qint64 findNs = t.nsecsElapsed();
    qInfo("%d records: parse %.2f ms, %d lookups %.2f ms", kCount, parseNs / 1e6, kCount, findNs / 1e6);
    // Release builds take a few ms; the bound only catches quadratic work, and leaves room for
    // sanitizer builds on a busy machine (timings belong in bench/, not in assertions).
    QVERIFY2(parseNs < 3'000'000'000, "parsing the central directory is far too slow");

    const PyResult py = runPython(QStringLiteral(R"(
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    infos = z.infolist()
    assert z.testzip() is None
    print(len(infos), z.read('many/r69999').decode())
)"),
                                  {path});
    QVERIFY2(py.exitCode == 0, py.err.constData());
    QCOMPARE(py.out.trimmed(), QByteArray("70000 ") + QByteArray(69999 % 7, char('a' + 69999 % 26)));
}

void TestZip::bigRecordZip64()
{
    // Opt-in (CKPTSCOPE_BIG_TESTS=1): writes a 4.1 GiB record, which costs 4.1 GiB of disk and a
    // few seconds of copying. It is the only test of the 8-byte descriptor, the local ZIP64 extra
    // and a record past the 4 GiB offset; the source is a sparse file, so its CRC is known.
    if (qgetenv("CKPTSCOPE_BIG_TESTS") != "1") {
        QSKIP("set CKPTSCOPE_BIG_TESTS=1 to write a 4.1 GiB archive");
    }
    constexpr std::uint64_t kBig = (41ULL << 30) / 10;
    const QString srcPath = dir_.filePath(QStringLiteral("sparse.bin"));
    const QString path = dir_.filePath(QStringLiteral("big.zip"));
    {
        Fd src(createFile(srcPath));
        QVERIFY(src.fd >= 0 && ::ftruncate(src.fd, off_t(kBig)) == 0);
        Fd out(createFile(path));
        QVERIFY(out.fd >= 0);
        ZipWriter w(out.fd);
        QVERIFY(w.addRecord("big/first", asBytes("first")).ok());
        auto ok = w.addRecordFromFile("big/huge", src.fd, 0, kBig, std::nullopt);
        QVERIFY2(ok.ok(), ok.ok() ? "" : ok.error().describe().c_str());
        QVERIFY(w.addRecord("big/after", asBytes("after the 4 GiB mark")).ok());
        QVERIFY(w.finish().ok());
    }
    QFile::remove(srcPath);
    auto mapped = MappedFile::open(path.toStdString());
    QVERIFY(mapped.ok());
    auto z = ZipReader::parse((*mapped)->bytes());
    QVERIFY2(z.ok(), z.ok() ? "" : z.error().describe().c_str());
    QCOMPARE(z->records().size(), 3U);
    const ZipRecord* huge = z->find("huge");
    const ZipRecord* after = z->find("after");
    QVERIFY(huge && after);
    QCOMPARE(huge->size, kBig);
    QVERIFY(after->localHeaderOffset > 0xFFFFFFFFULL);
    std::vector<std::byte> scratch;
    QCOMPARE(asText(*z->data(*after, scratch)), std::string_view("after the 4 GiB mark"));
    const PyResult py = runPython(QStringLiteral(R"(
import sys, zipfile, struct
with zipfile.ZipFile(sys.argv[1]) as z:
    h, a = z.getinfo('big/huge'), z.getinfo('big/after')
    assert z.read('big/after') == b'after the 4 GiB mark'
    print(h.file_size, h.header_offset, a.header_offset, h.CRC)
)"),
                                  {path});
    QVERIFY2(py.exitCode == 0, py.err.constData());
    QCOMPARE(py.out.trimmed(), QStringLiteral("%1 %2 %3 %4")
                                   .arg(huge->size)
                                   .arg(huge->localHeaderOffset)
                                   .arg(after->localHeaderOffset)
                                   .arg(huge->crc32)
                                   .toLatin1());
}

void TestZip::writerReportsWriteErrors()
{
    Fd full(::open("/dev/full", O_WRONLY | O_CLOEXEC));  // NOLINT
    if (full.fd < 0) {
        QSKIP("no /dev/full");
    }
    {
        ZipWriter w(full.fd);
        QVERIFY(w.addRecord("a/small", asBytes("buffered, so not written yet")).ok());
        auto ok = w.finish();
        QVERIFY(!ok.ok());
        QCOMPARE(ok.error().code, ErrorCode::WriteFailed);
        QVERIFY2(ok.error().message.find(std::strerror(ENOSPC)) != std::string::npos, ok.error().message.c_str());
        QVERIFY(!w.addRecord("a/later", asBytes("x")).ok());
    }
    {
        ZipWriter w(full.fd);
        const std::vector<std::byte> big(3U << 20);
        auto ok = w.addRecord("a/big", {big.data(), big.size()});
        QVERIFY(!ok.ok());
        QCOMPARE(ok.error().code, ErrorCode::WriteFailed);
    }
    {
        const QString srcPath = dir_.filePath(QStringLiteral("small-src.bin"));
        QVERIFY(writeAll(srcPath, QByteArray(1000, 'q')));
        Fd src(::open(srcPath.toLocal8Bit().constData(), O_RDONLY | O_CLOEXEC));  // NOLINT
        ZipWriter w(full.fd);
        auto ok = w.addRecordFromFile("a/copied", src.fd, 0, 1000, std::nullopt);
        QVERIFY(!ok.ok());
        QCOMPARE(ok.error().code, ErrorCode::WriteFailed);
    }
}

void TestZip::writerUsageErrors()
{
    const QString path = dir_.filePath(QStringLiteral("usage.zip"));
    Fd out(createFile(path));
    ZipWriter w(out.fd);
    QVERIFY(w.addRecord("u/a", asBytes("x")).ok());
    QCOMPARE(w.addRecord("u/a", asBytes("y")).error().code, ErrorCode::Usage);
    QCOMPARE(w.writeChunk(asBytes("z")).error().code, ErrorCode::Usage);
    QVERIFY(w.beginRecord("u/b", 3).ok());
    QCOMPARE(w.addRecord("u/c", asBytes("y")).error().code, ErrorCode::Usage);
    QCOMPARE(w.writeChunk(asBytes("four")).error().code, ErrorCode::Usage);
    QVERIFY(w.writeChunk(asBytes("ab")).ok());
    QCOMPARE(w.endRecord().error().code, ErrorCode::Usage);
    QCOMPARE(w.finish().error().code, ErrorCode::Usage);
    QVERIFY(w.writeChunk(asBytes("c")).ok());
    QVERIFY(w.endRecord().ok());
    QVERIFY(w.finish().ok());
    QCOMPARE(w.finish().error().code, ErrorCode::Usage);
    QCOMPARE(w.addRecord("u/d", asBytes("y")).error().code, ErrorCode::Usage);
    const QByteArray file = readAll(path);
    auto z = ZipReader::parse(bytesOf(file));
    QVERIFY(z.ok());
    QCOMPARE(z->records().size(), 2U);
}

void TestZip::everyTruncationIsAnError()
{
    const QString path = dir_.filePath(QStringLiteral("trunc.pt"));
    const PyResult r = runPython(
        QStringLiteral("import sys, torch; torch.save({'a': torch.arange(3.), 'b': torch.ones(70)}, sys.argv[1])"),
        {path});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QByteArray file = readAll(path);
    auto full = ZipReader::parse(bytesOf(file));
    QVERIFY(full.ok());
    QVERIFY(!full->salvage());
    // Without its end record every prefix is salvaged from the local headers: the records read are
    // the first ones of the whole archive, each whole inside the prefix; the first cut one stops it.
    for (qsizetype n = 0; n < file.size(); ++n) {
        const QByteArray prefix = file.left(n);  // own allocation, so ASan sees reads past it
        auto z = ZipReader::parse(bytesOf(prefix));
        if (n < 4) {
            QVERIFY(!z.ok());
            QCOMPARE(z.error().code, ErrorCode::NotCheckpoint);
            continue;
        }
        if (!z.ok()) {  // not even the first record is whole
            QCOMPARE(z.error().code, ErrorCode::Truncated);
            const ZipRecord& first = full->records().front();
            QVERIFY(first.dataOffset + first.compressedSize + 16 > std::uint64_t(n));
            continue;
        }
        QVERIFY2(z.ok(), qPrintable(QStringLiteral("prefix of %1 bytes not salvaged").arg(n)));
        QVERIFY(z->salvage().has_value());
        QCOMPARE(z->salvage()->fileSize, std::uint64_t(n));
        QVERIFY(z->records().size() <= full->records().size());
        for (std::size_t i = 0; i < z->records().size(); ++i) {
            const ZipRecord& got = z->records()[i];
            const ZipRecord& want = full->records()[i];
            QCOMPARE(got.name, want.name);
            QCOMPARE(got.dataOffset, want.dataOffset);
            QCOMPARE(got.size, want.size);
            QCOMPARE(got.crc32, want.crc32);
            QVERIFY(got.dataOffset + got.compressedSize <= std::uint64_t(n));
        }
        if (z->records().size() < full->records().size()) {
            // The next record is not whole: its data or its descriptor runs past the cut.
            const ZipRecord& next = full->records()[z->records().size()];
            QVERIFY(next.dataOffset + next.compressedSize + 16 > std::uint64_t(n) || next.size == 0);
            QVERIFY(!z->salvage()->inCentralDirectory);
        }
    }
}

void TestZip::garbageDirectoryFieldsAreErrors()
{
    const QString path = dir_.filePath(QStringLiteral("garbage.pt"));
    const PyResult r = runPython(QStringLiteral("import sys, torch; torch.save({'a': torch.arange(3.), 'b': "
                                                "torch.ones(2)}, sys.argv[1])"),
                                 {path});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QByteArray file = readAll(path);
    auto good = ZipReader::parse(bytesOf(file));
    QVERIFY(good.ok());
    const qsizetype eocd = file.size() - 22;
    const qsizetype locator = eocd - 20;
    const qsizetype z64 = qsizetype(loadLE(bytesOf(file), std::size_t(locator) + 8, 8));
    const std::uint64_t cdSize = loadLE(bytesOf(file), std::size_t(z64) + 40, 8);
    const std::uint64_t cdOffset = loadLE(bytesOf(file), std::size_t(z64) + 48, 8);
    const auto fsize = std::uint64_t(file.size());

    struct Patch {
        const char* what;
        qsizetype at;
        int width;
        std::uint64_t value;
    };
    const qsizetype firstEntry = qsizetype(cdOffset);
    const std::vector<Patch> patches{
        {"zip64 cd size +1", z64 + 40, 8, cdSize + 1},
        {"zip64 cd size -1", z64 + 40, 8, cdSize - 1},
        {"zip64 cd size huge", z64 + 40, 8, ~0ULL},
        {"zip64 cd offset +1", z64 + 48, 8, cdOffset + 1},
        {"zip64 cd offset = file size", z64 + 48, 8, fsize},
        {"zip64 cd offset huge", z64 + 48, 8, ~0ULL - 5},
        {"zip64 entries huge", z64 + 32, 8, 1ULL << 62},
        {"zip64 entries +1", z64 + 32, 8, good->records().size() + 1},
        {"locator offset +1", locator + 8, 8, std::uint64_t(z64) + 1},
        {"locator offset huge", locator + 8, 8, ~0ULL},
        {"locator offset past eocd", locator + 8, 8, fsize - 10},
        {"entry local offset +1", firstEntry + 42, 4, 1},
        {"entry local offset in cd", firstEntry + 42, 4, cdOffset},
        {"entry size huge", firstEntry + 24, 4, 0x7FFFFFFF},
        {"entry both sizes huge", firstEntry + 20, 8, 0x7FFFFFF07FFFFFF0ULL},
        {"entry sizes need zip64", firstEntry + 20, 8, ~0ULL},
        {"entry name length huge", firstEntry + 28, 2, 0xFFFF},
        {"entry extra length huge", firstEntry + 30, 2, 0xFFF0},
        {"entry signature", firstEntry, 4, 0x12345678},
    };
    for (const Patch& p : patches) {
        QByteArray bad = file;
        if (p.width == 8) {
            put64(bad, p.at, p.value);
        } else if (p.width == 4) {
            put32(bad, p.at, std::uint32_t(p.value));
        } else {
            bad[p.at] = char(p.value & 0xFF);
            bad[p.at + 1] = char((p.value >> 8) & 0xFF);
        }
        auto z = ZipReader::parse(bytesOf(bad));
        QVERIFY2(!z.ok(), p.what);
        QVERIFY2(z.error().code == ErrorCode::Corrupt || z.error().code == ErrorCode::Truncated, p.what);
    }
}

void TestZip::bitFlipsNeverEscapeTheFile()
{
    const QString path = dir_.filePath(QStringLiteral("flips.pt"));
    QVERIFY(savedByTorch(path));
    const QByteArray file = readAll(path);
    auto good = ZipReader::parse(bytesOf(file));
    QVERIFY(good.ok());
    // Every byte of the central directory and end records, and the first local header.
    const qsizetype cd = qsizetype(loadLE(bytesOf(file), std::size_t(file.size()) - 6, 4));
    std::vector<qsizetype> positions;
    for (qsizetype i = cd; i < file.size(); ++i) {
        positions.push_back(i);
    }
    for (qsizetype i = 0; i < 30; ++i) {
        positions.push_back(i);
    }
    for (qsizetype at : positions) {
        for (char mask : {char(0xFF), char(0x01), char(0x80)}) {
            QByteArray bad = file;
            bad[at] = char(bad[at] ^ mask);
            readEveryRecord(bad);
        }
    }
}

void TestZip::randomBytesAreErrors()
{
    QRandomGenerator rng(12345);
    for (int i = 0; i < 3000; ++i) {
        QByteArray buf(qsizetype(rng.bounded(2000)), '\0');
        for (char& c : buf) {
            c = char(rng.bounded(256));
        }
        if (i % 2 == 1 && buf.size() >= 4) {
            buf[0] = 'P', buf[1] = 'K', buf[2] = 3, buf[3] = 4;
        }
        auto z = ZipReader::parse(bytesOf(buf));
        QVERIFY(!z.ok());
        // Now with an end record whose fields are random: may parse (an empty archive) but
        // must never hand out bytes outside the buffer.
        QByteArray tail(22, '\0');
        put32(tail, 0, 0x06054b50);
        for (qsizetype k = 8; k < 20; ++k) {
            tail[k] = char(rng.bounded(256));
        }
        if (i % 3 == 0) {
            put32(tail, 12, std::uint32_t(rng.bounded(buf.size() + 1)));
            put32(tail, 16, std::uint32_t(rng.bounded(buf.size() + 1)));
        }
        readEveryRecord(buf + tail);
    }
}

void TestZip::deflateSizeLiesAreErrors()
{
    const QString path = dir_.filePath(QStringLiteral("deflate.zip"));
    const PyResult r = runPython(QStringLiteral(R"(
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], 'w', compression=zipfile.ZIP_DEFLATED) as z:
    z.writestr('d/a', b'a' * 100000)
)"),
                                 {path});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QByteArray file = readAll(path);
    const qsizetype entry = file.indexOf(QByteArray("PK\x01\x02", 4));
    QVERIFY(entry > 0);
    std::vector<std::byte> scratch;
    {
        auto z = ZipReader::parse(bytesOf(file));
        QVERIFY(z.ok());
        QCOMPARE(z->data(z->records()[0], scratch)->size(), 100000U);
    }
    for (std::uint32_t lie : {0x7FFFFFF0U, 50U, 100001U, 0U}) {
        QByteArray bad = file;
        put32(bad, entry + 24, lie);
        auto z = ZipReader::parse(bytesOf(bad));
        QVERIFY(z.ok());
        scratch.clear();
        scratch.shrink_to_fit();
        auto d = z->data(z->records()[0], scratch);
        QVERIFY2(!d.ok(), qPrintable(QString::number(lie)));
        QCOMPARE(d.error().code, ErrorCode::Corrupt);
        QVERIFY(scratch.capacity() <= 100001U);  // the lie was never allocated
    }
}

void TestZip::hugeDeflatedRecordIsALimit()
{
    // A deflated record declaring 17 GiB (through a ZIP64 extra) is refused before any allocation.
    QByteArray f;
    auto le = [&f](std::uint64_t v, int width) {
        for (int i = 0; i < width; ++i) {
            f.append(char((v >> (8 * i)) & 0xFF));
        }
    };
    const QByteArray name("h/big");
    const QByteArray payload("\x03\x00", 2);  // an empty deflate stream
    le(0x04034b50, 4), le(45, 2), le(0, 2), le(8, 2), le(0, 4), le(0, 4), le(2, 4), le(0, 4);
    le(std::uint64_t(name.size()), 2), le(0, 2), f.append(name), f.append(payload);
    const auto cd = std::uint64_t(f.size());
    le(0x02014b50, 4), le(45, 2), le(45, 2), le(0, 2), le(8, 2), le(0, 4), le(0, 4), le(2, 4), le(0xFFFFFFFF, 4);
    le(std::uint64_t(name.size()), 2), le(12, 2), le(0, 2), le(0, 2), le(0, 2), le(0, 4), le(0, 4), f.append(name);
    le(1, 2), le(8, 2), le(17ULL << 30, 8);
    const auto cdSize = std::uint64_t(f.size()) - cd;
    le(0x06054b50, 4), le(0, 2), le(0, 2), le(1, 2), le(1, 2), le(cdSize, 4), le(cd, 4), le(0, 2);
    auto z = ZipReader::parse(bytesOf(f));
    QVERIFY2(z.ok(), z.ok() ? "" : z.error().describe().c_str());
    QCOMPARE(z->records()[0].size, 17ULL << 30);
    std::vector<std::byte> scratch;
    auto d = z->data(z->records()[0], scratch);
    QVERIFY(!d.ok());
    QCOMPARE(d.error().code, ErrorCode::Limit);
    QCOMPARE(scratch.capacity(), 0U);
}

QTEST_GUILESS_MAIN(TestZip)
#include "tst_zip.moc"
