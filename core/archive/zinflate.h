// A zlib inflate stream that is always ended: raw deflate for zip records (windowBits -MAX_WBITS),
// gzip framing for gzip-wrapped files (16 + MAX_WBITS).
#pragma once

#include <zlib.h>

namespace ckpt::archive {

class ZInflate {
public:
    explicit ZInflate(int windowBits) { ok_ = inflateInit2(&zs_, windowBits) == Z_OK; }
    ZInflate(const ZInflate&) = delete;
    ZInflate& operator=(const ZInflate&) = delete;
    ~ZInflate()
    {
        if (ok_) {
            inflateEnd(&zs_);
        }
    }
    [[nodiscard]] bool ok() const { return ok_; }
    z_stream& stream() { return zs_; }

private:
    z_stream zs_{};
    bool ok_ = false;
};

}  // namespace ckpt::archive
