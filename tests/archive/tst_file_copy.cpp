// The byte-range copy behind every record and tensor the writers copy from an input file: both of
// its routes (the kernel's copy_file_range, and the buffered pread/write it falls back to where the
// kernel refuses) must give the same bytes at every source and output phase, and the same errors.
#include "util/file_copy.h"

#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <array>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <vector>

using namespace ckpt;

namespace {

enum class Route { Kernel, Buffered };

Expected<void> copyBy(Route route, int in, std::uint64_t offset, std::uint64_t size, int out, const CopyStep& step = {})
{
    if (route == Route::Buffered) {
        return appendFileRangeBuffered(in, offset, size, out, step);
    }
    return appendFileRange(in, offset, size, out, step);
}

// Bytes that differ at every position, so a shifted or repeated block cannot pass.
std::vector<std::byte> pattern(std::size_t n)
{
    std::vector<std::byte> bytes(n);
    std::uint32_t x = 2463534242U;
    for (auto& b : bytes) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b = static_cast<std::byte>(x & 0xFF);
    }
    return bytes;
}

class Fd {
public:
    explicit Fd(int fd) : fd_(fd) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd()
    {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    [[nodiscard]] int get() const { return fd_; }

private:
    int fd_;
};

void writeFile(const QString& path, const std::vector<std::byte>& bytes)
{
    const Fd fd(::open(path.toLocal8Bit().constData(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
    QVERIFY(fd.get() >= 0);
    QVERIFY(appendBytes(fd.get(), bytes.data(), bytes.size()).ok());
}

std::vector<std::byte> readFile(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    const QByteArray all = f.readAll();
    const auto* begin = reinterpret_cast<const std::byte*>(all.constData());
    return {begin, begin + all.size()};
}

constexpr std::uint64_t kMiB = 1ULL << 20;

}  // namespace

class TestFileCopy : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase();
    void everyRouteCopiesEveryByte_data();
    void everyRouteCopiesEveryByte();
    void truncatedInputIsAnError_data();
    void truncatedInputIsAnError();
    void stepCancels_data();
    void stepCancels();
    void pipeOutputGetsTheBytes();
    void fullDiskIsAWriteError();

private:
    [[nodiscard]] Fd openSource() const { return Fd(::open(source_.toLocal8Bit().constData(), O_RDONLY)); }
    [[nodiscard]] Fd createOutput(const QString& name) const
    {
        return Fd(::open(dir_.filePath(name).toLocal8Bit().constData(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
    }

    QTemporaryDir dir_;
    QString source_;
    std::vector<std::byte> bytes_;
};

void TestFileCopy::initTestCase()
{
    QVERIFY(dir_.isValid());
    source_ = dir_.filePath(QStringLiteral("source.bin"));
    bytes_ = pattern(static_cast<std::size_t>(13 * kMiB + 4321));
    writeFile(source_, bytes_);
}

void TestFileCopy::everyRouteCopiesEveryByte_data()
{
    QTest::addColumn<int>("route");
    QTest::addColumn<quint64>("offset");
    QTest::addColumn<quint64>("size");
    QTest::addColumn<quint64>("lead");  // bytes already in the output: its position when the copy starts
    const std::array<std::pair<const char*, Route>, 2> routes{
        {{"kernel", Route::Kernel}, {"buffered", Route::Buffered}}};
    // Source and output offsets in phase, out of page phase, in page but not 64 KiB phase, and ends
    // that fall just short of, on and just past the buffered copy's 4 MiB blocks.
    const std::array<std::array<quint64, 3>, 9> cases{{{0, 0, 0},
                                                       {0, 1, 0},
                                                       {751, 4095, 64},
                                                       {0, 4 * kMiB, 0},
                                                       {751, 4 * kMiB - 751, 64},
                                                       {4096, 4 * kMiB + 1, 64 * 1024 + 4096},
                                                       {751, 9 * kMiB + 123, 4 * kMiB - 10},
                                                       {64 * 1024, 8 * kMiB, 64},
                                                       {12 * kMiB, kMiB + 4321, 4 * kMiB}}};
    for (const auto& [name, route] : routes) {
        for (const auto& c : cases) {
            QTest::addRow("%s offset %llu size %llu after %llu", name, c[0], c[1], c[2])
                << static_cast<int>(route) << c[0] << c[1] << c[2];
        }
    }
}

void TestFileCopy::everyRouteCopiesEveryByte()
{
    QFETCH(int, route);
    QFETCH(quint64, offset);
    QFETCH(quint64, size);
    QFETCH(quint64, lead);
    const QString outPath = dir_.filePath(QStringLiteral("out.bin"));
    const std::vector<std::byte> head = pattern(static_cast<std::size_t>(lead + 1));
    const Fd in = openSource();
    const Fd out = createOutput(QStringLiteral("out.bin"));
    QVERIFY(in.get() >= 0 && out.get() >= 0);
    QVERIFY(appendBytes(out.get(), head.data(), lead).ok());

    std::uint64_t stepped = 0;
    auto ok = copyBy(static_cast<Route>(route), in.get(), offset, size, out.get(), [&](std::uint64_t n) {
        stepped += n;
        return true;
    });
    QVERIFY2(ok.ok(), ok.ok() ? "" : ok.error().message.c_str());
    QCOMPARE(stepped, size);
    QCOMPARE(::lseek(out.get(), 0, SEEK_CUR), static_cast<off_t>(lead + size));  // the position moved past the copy

    const std::vector<std::byte> got = readFile(outPath);
    QCOMPARE(got.size(), static_cast<std::size_t>(lead + size));
    // std::equal, not memcmp: the empty copy's vector has no data pointer at all.
    const auto copied = got.begin() + static_cast<std::ptrdiff_t>(lead);
    QVERIFY(std::equal(got.begin(), copied, head.begin()));
    QVERIFY(std::equal(copied, got.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(offset)));
}

void TestFileCopy::truncatedInputIsAnError_data()
{
    QTest::addColumn<int>("route");
    QTest::newRow("kernel") << static_cast<int>(Route::Kernel);
    QTest::newRow("buffered") << static_cast<int>(Route::Buffered);
}

void TestFileCopy::truncatedInputIsAnError()
{
    QFETCH(int, route);
    const Fd in = openSource();
    const Fd out = createOutput(QStringLiteral("short.bin"));
    QVERIFY(in.get() >= 0 && out.get() >= 0);
    QVERIFY(appendBytes(out.get(), bytes_.data(), 100).ok());  // out of phase with the source
    const std::uint64_t offset = bytes_.size() - 5 * kMiB;
    auto ok = copyBy(static_cast<Route>(route), in.get(), offset, 6 * kMiB, out.get());
    QVERIFY(!ok.ok());
    QCOMPARE(ok.error().code, ErrorCode::Truncated);
    QCOMPARE(ok.error().offset.value_or(0), static_cast<std::uint64_t>(bytes_.size()));  // where the input ended
}

void TestFileCopy::stepCancels_data()
{
    truncatedInputIsAnError_data();
}

void TestFileCopy::stepCancels()
{
    QFETCH(int, route);
    const Fd in = openSource();
    const Fd out = createOutput(QStringLiteral("cancel.bin"));
    QVERIFY(in.get() >= 0 && out.get() >= 0);
    int steps = 0;
    auto ok = copyBy(static_cast<Route>(route), in.get(), 751, 12 * kMiB, out.get(),
                     [&](std::uint64_t) { return ++steps < 2; });
    QVERIFY(!ok.ok());
    QCOMPARE(ok.error().code, ErrorCode::Cancelled);
    QCOMPARE(steps, 2);  // answered at the first step that asked
}

void TestFileCopy::pipeOutputGetsTheBytes()
{
    // A pipe has no position, and copy_file_range refuses it: the buffered copy takes over.
    std::array<int, 2> fds{};
    QVERIFY(::pipe(fds.data()) == 0);
    const Fd readEnd(fds[0]);
    const Fd writeEnd(fds[1]);
    QCOMPARE(::lseek(writeEnd.get(), 0, SEEK_CUR), off_t{-1});
    const Fd in = openSource();
    const std::uint64_t size = 5000;  // within the pipe's buffer, so no reader thread is needed
    QVERIFY(appendFileRange(in.get(), 751, size, writeEnd.get()).ok());
    std::vector<std::byte> got(size);
    QCOMPARE(::read(readEnd.get(), got.data(), got.size()), static_cast<ssize_t>(size));
    QVERIFY(std::memcmp(got.data(), bytes_.data() + 751, size) == 0);
}

void TestFileCopy::fullDiskIsAWriteError()
{
    const Fd in = openSource();
    const Fd full(::open("/dev/full", O_WRONLY));
    if (full.get() < 0) {
        QSKIP("no /dev/full here");
    }
    auto ok = appendFileRange(in.get(), 0, kMiB, full.get());
    QVERIFY(!ok.ok());
    QCOMPARE(ok.error().code, ErrorCode::WriteFailed);
    QVERIFY2(ok.error().message.find("No space left") != std::string::npos, ok.error().message.c_str());
}

QTEST_GUILESS_MAIN(TestFileCopy)
#include "tst_file_copy.moc"
