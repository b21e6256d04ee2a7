#include "util/byte_sink.h"

#include <cerrno>
#include <unistd.h>
#include <vector>

namespace ckpt {

Expected<void> ByteSink::appendFromFile(int inFd, std::uint64_t offset, std::uint64_t size, const CopyStep& step)
{
    std::vector<std::byte> buffer;
    Expected<void> appended;
    auto read = readFileRange(inFd, offset, size, buffer, [&](Bytes piece) {
        appended = append(piece);
        return appended.ok() && (!step || step(piece.size()));
    });
    if (!appended) {
        return appended;
    }
    return read;
}

Expected<void> ByteSink::writeAt(Bytes /*data*/, std::uint64_t offset)
{
    return makeError(ErrorCode::Internal,
                     "bytes at " + std::to_string(offset) + " were to be rewritten in an output written in order");
}

Expected<void> FileSink::append(Bytes data)
{
    return appendBytes(fd_, data.data(), data.size());
}

Expected<void> FileSink::appendFromFile(int inFd, std::uint64_t offset, std::uint64_t size, const CopyStep& step)
{
    return appendFileRange(inFd, offset, size, fd_, step);
}

Expected<void> FileSink::writeAt(Bytes data, std::uint64_t offset)
{
    while (!data.empty()) {
        const ssize_t n = ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return makeError(ErrorCode::WriteFailed,
                             "cannot write the output: " + systemErrorText(n < 0 ? errno : EIO));
        }
        data = data.subspan(static_cast<std::size_t>(n));
        offset += static_cast<std::uint64_t>(n);
    }
    return {};
}

}  // namespace ckpt
