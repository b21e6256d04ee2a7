// archive::unzstdFrame (core/archive/zstd.h): the first zstd frame of an item inflated with the
// system's libzstd, within a limit that holds whatever the frame claims or really inflates to.
// Frames are made here by libzstd's own compressor, as DCP's ZStandard extension makes them
// (streaming, no content size) or with the fields a hostile item would set.
#include "archive/zstd.h"

#include <QtTest>

#include <cstring>
#include <vector>
#include <zstd.h>

namespace {

std::vector<std::byte> pattern(std::size_t n)
{
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = static_cast<std::byte>((i * 2654435761U) >> 13);
    }
    return v;
}

// One frame of `data`, with or without the content size and a checksum.
std::vector<std::byte> frame(const std::vector<std::byte>& data, bool contentSize, bool checksum = false)
{
    ZSTD_CCtx* c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, contentSize ? 1 : 0);
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, checksum ? 1 : 0);
    if (contentSize) {
        ZSTD_CCtx_setPledgedSrcSize(c, data.size());
    }
    std::vector<std::byte> out(ZSTD_compressBound(data.size()) + 64);
    ZSTD_inBuffer in{data.data(), data.size(), 0};
    ZSTD_outBuffer o{out.data(), out.size(), 0};
    while (ZSTD_compressStream2(c, &o, &in, ZSTD_e_end) != 0) {
    }
    ZSTD_freeCCtx(c);
    out.resize(o.pos);
    return out;
}

ckpt::Bytes bytes(const std::vector<std::byte>& v)
{
    return {v.data(), v.size()};
}

}  // namespace

class TestZstd : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void inflatesWhatTheStreamWriterWrites()
    {
        const auto data = pattern(3U << 20);
        const auto z = frame(data, false);
        QVERIFY(ckpt::archive::looksLikeZstd(bytes(z)));
        auto out = ckpt::archive::unzstdFrame(bytes(z), data.size());
        QVERIFY2(out.ok(), out.ok() ? "" : out.error().message.c_str());
        QCOMPARE(out->size(), data.size());
        QVERIFY(std::memcmp(out->data(), data.data(), data.size()) == 0);
    }

    // zstandard's stream_reader stops at the end of the first frame: so does ckptscope.
    void bytesAfterTheFirstFrameAreNotRead()
    {
        const auto data = pattern(1000);
        auto z = frame(data, false);
        const auto second = frame(pattern(5000), false);
        z.insert(z.end(), second.begin(), second.end());
        auto out = ckpt::archive::unzstdFrame(bytes(z), 1U << 20);
        QVERIFY(out.ok());
        QCOMPARE(out->size(), data.size());
    }

    // A header that records more than the limit is refused before a byte comes out.
    void aClaimPastTheLimitIsRefusedUnread()
    {
        const auto z = frame(std::vector<std::byte>(2U << 20), true);
        std::size_t handed = 0;
        auto r = ckpt::archive::unzstdFrame(bytes(z), 1U << 20, [&](ckpt::Bytes b) {
            handed += b.size();
            return true;
        });
        QVERIFY(!r.ok());
        QCOMPARE(r.error().code, ckpt::ErrorCode::Limit);
        QVERIFY2(r.error().message.find("says it holds 2.0 MiB") != std::string::npos, r.error().message.c_str());
        QCOMPARE(handed, std::size_t{0});
    }

    // A frame that records nothing and inflates past the limit stops there: no more is handed out.
    void inflatingPastTheLimitStops()
    {
        const auto z = frame(std::vector<std::byte>(64U << 20), false);
        QVERIFY(z.size() < 64U << 10);  // zeros: a bomb's ratio
        std::size_t handed = 0;
        auto r = ckpt::archive::unzstdFrame(
            bytes(z), 1U << 20,
            [&](ckpt::Bytes b) {
                handed += b.size();
                return true;
            },
            256U << 10);
        QVERIFY(!r.ok());
        QCOMPARE(r.error().code, ckpt::ErrorCode::Limit);
        QVERIFY2(r.error().message.find("inflates past") != std::string::npos, r.error().message.c_str());
        QVERIFY(handed <= 1U << 20);
    }

    void aCutFrameIsTruncated()
    {
        const auto z = frame(pattern(200000), false);
        const std::vector<std::byte> cut(z.begin(), z.begin() + static_cast<std::ptrdiff_t>(z.size() / 2));
        auto r = ckpt::archive::unzstdFrame(bytes(cut), 1U << 20);
        QVERIFY(!r.ok());
        QCOMPARE(r.error().code, ckpt::ErrorCode::Truncated);
    }

    void aDamagedFrameIsCorrupt()
    {
        auto z = frame(pattern(200000), false, true);
        z[z.size() / 2] ^= std::byte{0x5a};
        z[z.size() - 1] ^= std::byte{0xff};  // the checksum
        auto r = ckpt::archive::unzstdFrame(bytes(z), 1U << 20);
        QVERIFY(!r.ok());
        QVERIFY(r.error().code == ckpt::ErrorCode::Corrupt || r.error().code == ckpt::ErrorCode::Truncated);
        const std::vector<std::byte> none{std::byte{'P'}, std::byte{'K'}, std::byte{3}, std::byte{4}};
        QCOMPARE(ckpt::archive::unzstdFrame(bytes(none), 100).error().code, ckpt::ErrorCode::Corrupt);
    }

    // A window past libzstd's default limit (2^27) is refused, not allocated.
    void aHugeWindowIsRefused()
    {
        // Built by hand (RFC 8878): no content size, Window_Descriptor exponent 20 (a 1 GiB window),
        // one raw block of 10 bytes.
        std::vector<std::byte> z{std::byte{0x28}, std::byte{0xb5}, std::byte{0x2f},
                                 std::byte{0xfd}, std::byte{0x00}, std::byte{20 << 3}};
        const unsigned block = 1U | (10U << 3);
        for (int i = 0; i < 3; ++i) {
            z.push_back(static_cast<std::byte>((block >> (8 * i)) & 0xffU));
        }
        z.resize(z.size() + 10, std::byte{'x'});
        auto r = ckpt::archive::unzstdFrame(bytes(z), 1U << 20);
        QVERIFY(!r.ok());
        QCOMPARE(r.error().code, ckpt::ErrorCode::Corrupt);
    }
};

QTEST_GUILESS_MAIN(TestZstd)
#include "tst_zstd.moc"
