#include "util/file_copy.h"

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

namespace ckpt {
namespace {

Error writeFailed(int err)
{
    return makeError(ErrorCode::WriteFailed, std::string("cannot write the output: ") + systemErrorText(err));
}

Error endedEarly(std::uint64_t at)
{
    return makeError(ErrorCode::Truncated, "the input ends before the bytes to copy do", at);
}

Error stopped()
{
    return makeError(ErrorCode::Cancelled, "cancelled");
}

// EXDEV: across filesystems (refused again since Linux 5.19); EINVAL/EOPNOTSUPP/ENOSYS:
// filesystems or kernels without it; EBADF/EPERM: e.g. special or append-only files.
bool kernelRefuses(int err)
{
    return err == EXDEV || err == EINVAL || err == EOPNOTSUPP || err == ENOSYS || err == EBADF || err == EPERM;
}

// Up to `want` bytes at `offset`, at least one: the input's end is Truncated.
Expected<std::size_t> preadSome(int fd, std::byte* into, std::size_t want, std::uint64_t offset)
{
    while (true) {
        const ssize_t got = ::pread(fd, into, want, static_cast<off_t>(offset));
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            return makeError(ErrorCode::Io, "cannot read the input: " + systemErrorText(errno), offset);
        }
        if (got == 0) {
            return endedEarly(offset);
        }
        return static_cast<std::size_t>(got);
    }
}

// One buffer per thread, left uninitialised: a fresh one per copy would fault its pages in again
// for every chunk (a 4-rank DCP set copies one per rank and tensor, all of them through here when
// the output is on another filesystem).
std::byte* copyBuffer()
{
    thread_local const std::unique_ptr<std::byte[]> buffer(new std::byte[kBufferedBlock]);
    return buffer.get();
}

// `outFd`'s file position; 0 for a pipe or socket, which have none (where the writes fall then
// matters to no page cache).
std::uint64_t outputPosition(int outFd)
{
    const off_t at = ::lseek(outFd, 0, SEEK_CUR);
    return at < 0 ? 0 : static_cast<std::uint64_t>(at);
}

}  // namespace

Expected<void> appendFileRangeBuffered(int inFd, std::uint64_t offset, std::uint64_t size, int outFd,
                                       const CopyStep& step)
{
    std::byte* buffer = copyBuffer();
    std::uint64_t outPos = outputPosition(outFd);
    while (size > 0) {
        // Each write ends on a block boundary of the output, so all but the first fill whole blocks.
        const std::uint64_t room = kBufferedBlock - outPos % kBufferedBlock;
        const auto want = static_cast<std::size_t>(std::min(size, room));
        auto got = preadSome(inFd, buffer, want, offset);
        if (!got) {
            return std::move(got.error());
        }
        const std::uint64_t n = *got;
        if (auto ok = appendBytes(outFd, buffer, n); !ok) {
            return ok;
        }
        offset += n;
        outPos += n;
        size -= n;
        if (step && !step(n)) {
            return stopped();
        }
    }
    return {};
}

Expected<void> readFileRange(int inFd, std::uint64_t offset, std::uint64_t size, std::vector<std::byte>& buffer,
                             const std::function<bool(Bytes)>& sink)
{
    buffer.resize(static_cast<std::size_t>(std::min(size, kCopyChunk)));
    while (size > 0) {
        const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(size, buffer.size()));
        auto got = preadSome(inFd, buffer.data(), want, offset);
        if (!got) {
            return std::move(got.error());
        }
        if (!sink(Bytes(buffer.data(), *got))) {
            return stopped();
        }
        offset += *got;
        size -= *got;
    }
    return {};
}

Expected<void> appendBytes(int outFd, const std::byte* data, std::uint64_t size)
{
    while (size > 0) {
        const ssize_t n = ::write(outFd, data, static_cast<std::size_t>(std::min<std::uint64_t>(size, 1U << 30)));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return writeFailed(n < 0 ? errno : ENOSPC);
        }
        data += n;
        size -= static_cast<std::uint64_t>(n);
    }
    return {};
}

Expected<void> appendFileRange(int inFd, std::uint64_t offset, std::uint64_t size, int outFd, const CopyStep& step)
{
    bool anyCopied = false;
    while (size > 0) {
        auto inOff = static_cast<loff_t>(offset);
        const ssize_t n =
            ::copy_file_range(inFd, &inOff, outFd, nullptr, static_cast<std::size_t>(std::min(size, kCopyChunk)), 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && !anyCopied && kernelRefuses(errno)) {
            return appendFileRangeBuffered(inFd, offset, size, outFd, step);
        }
        if (n < 0) {
            return writeFailed(errno);
        }
        if (n == 0) {
            return endedEarly(offset);  // copy_file_range reports the input's end as 0
        }
        anyCopied = true;
        offset += static_cast<std::uint64_t>(n);
        size -= static_cast<std::uint64_t>(n);
        if (step && !step(static_cast<std::uint64_t>(n))) {
            return stopped();
        }
    }
    return {};
}

}  // namespace ckpt
