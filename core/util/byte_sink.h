// Where a writer's bytes go. The writers (the zip writer, the safetensors writer) write through this
// alone, so one writer makes a local file and a stream byte for byte alike:
//   - a local file (FileSink; write::detail::OutputFile, the temporary file beside a target):
//     appended with write() and copy_file_range, and patchable: bytes already written may be
//     rewritten in place (pwrite), which the zip writer uses to copy a stretch of records in one
//     kernel copy and then write its own headers over the gaps;
//   - a stream that takes bytes strictly in order and never again (an S3 multipart upload,
//     remote/s3_upload.h): the zip writer then writes the same bytes in order, each record's CRC
//     computed as its bytes pass, since the CRC follows them (in the data descriptor).
#pragma once

#include "util/bytes.h"
#include "util/error.h"
#include "util/file_copy.h"

#include <cstdint>

namespace ckpt {

class ByteSink {
public:
    ByteSink() = default;
    ByteSink(const ByteSink&) = delete;
    ByteSink& operator=(const ByteSink&) = delete;
    ByteSink(ByteSink&&) = default;
    ByteSink& operator=(ByteSink&&) = delete;
    virtual ~ByteSink() = default;

    // The output's planned size, told before its first byte where the writer knows it (a stream
    // picks its part size from it); a hint, never a promise.
    virtual void expectSize(std::uint64_t /*bytes*/) {}
    // Appends `data`. Errors: WriteFailed (what the destination said), Cancelled.
    virtual Expected<void> append(Bytes data) = 0;
    // Appends `size` bytes of `inFd` from `offset`; `step` sees each piece's length and may cancel.
    // This one reads them through a buffer and appends each piece; a file copies file to file.
    virtual Expected<void> appendFromFile(int inFd, std::uint64_t offset, std::uint64_t size,
                                          const CopyStep& step = {});
    // Whether bytes already appended may be rewritten with writeAt (a file's may, a stream's not).
    [[nodiscard]] virtual bool patchable() const { return false; }
    // Rewrites bytes already appended, at `offset` from the start. Internal error where !patchable().
    virtual Expected<void> writeAt(Bytes data, std::uint64_t offset);
};

// An open file descriptor written at its position (append, appendFromFile) and patched with pwrite.
class FileSink : public ByteSink {
public:
    explicit FileSink(int fd) : fd_(fd) {}
    Expected<void> append(Bytes data) override;
    Expected<void> appendFromFile(int inFd, std::uint64_t offset, std::uint64_t size,
                                  const CopyStep& step = {}) override;
    [[nodiscard]] bool patchable() const override { return true; }
    Expected<void> writeAt(Bytes data, std::uint64_t offset) override;

    [[nodiscard]] int fd() const { return fd_; }

protected:
    int fd_ = -1;
};

}  // namespace ckpt
