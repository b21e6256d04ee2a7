// The pieces both writers share: the temporary file beside the target that becomes the output only
// when everything was written, throttled progress, and byte copies from the mapped input that
// never hold a whole storage in memory.
#pragma once

#include "checkpoint/checkpoint.h"
#include "util/byte_sink.h"
#include "util/bytes.h"
#include "util/error.h"
#include "util/file_copy.h"
#include "write/write.h"

#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>

namespace ckpt::write::detail {

// `<dir>/.<name>.ckptscope-<pid>-XXXXXX` (targets.h), created with O_EXCL and the umask's mode and
// held with flock. Unless commit() succeeds, the destructor closes and unlinks it, so every early
// return leaves nothing behind; a signal handler can remove it too (removeTempsOnSignals). The
// writers write it as a ByteSink (util/byte_sink.h): a file, patchable.
class OutputFile final : public FileSink {
public:
    static Expected<OutputFile> create(const std::string& target, Durability durability);
    OutputFile(OutputFile&& other) noexcept;
    OutputFile& operator=(OutputFile&&) = delete;
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;
    ~OutputFile() override;

    [[nodiscard]] const std::string& tempPath() const { return temp_; }
    // Each append is followed by writeBehind (a copy's every piece too).
    Expected<void> append(Bytes data) override;
    Expected<void> appendFromFile(int inFd, std::uint64_t offset, std::uint64_t size,
                                  const CopyStep& step = {}) override;
    // Close and rename over the target; Durable fsyncs the file before and the directory after.
    Expected<void> commit();

private:
    OutputFile(std::string target, std::string temp, int fd, Durability durability);
    void discard();
    // Durable only: starts writeback of what was written since the last call once 32 MiB have piled
    // up, so the data goes to disk while the copy runs and the final fsync has little left to wait
    // for. (Lazy skips it: sync_file_range blocks on a busy disk and slowed a 1 GiB copy 2.5x.)
    void writeBehind();

    std::string target_;
    std::string temp_;
    Durability durability_;
    std::uint64_t written_ = 0;
    std::uint64_t flushedUpTo_ = 0;
    int signalSlot_ = -1;
};

// Refuses a target that is the input itself or, for a set read in place, one of its files (same
// device and inode, so hard links and symlinks count). `target` is already resolved (resolveTarget).
Expected<void> checkTarget(const Checkpoint& in, const std::string& target);

// "<what>: <strerror(err)>" as a WriteFailed error on the target.
Error writeError(const std::string& target, const std::string& what, int err);
// Re-labels an error from a lower layer (the zip writer) as concerning the target.
Error onTarget(Error e, const std::string& target);
Error cancelled(const std::string& target);

// Reports bytes done at most every ~0.5% (and at the end), so a 40k-record export does not call
// the GUI 40k times.
class ProgressMeter {
public:
    ProgressMeter(const std::function<void(const WriteProgress&)>& sink, std::uint64_t total);
    void advance(std::uint64_t n);
    void finish();

private:
    const std::function<void(const WriteProgress&)>& sink_;
    WriteProgress p_;
    std::uint64_t step_;
    std::uint64_t nextReport_ = 0;
};

// Chunk size for strided gathers, the same as for copies: large enough for full-speed I/O, small
// enough that cancellation answers quickly and memory stays flat.
inline constexpr std::uint64_t kChunk = kCopyChunk;

// sink.appendFromFile with progress, cancellation and errors labelled with the target.
Expected<void> copyFromInput(int inFd, std::uint64_t offset, std::uint64_t size, ByteSink& out,
                             const std::string& target, ProgressMeter& progress, const std::stop_token& stop);
// Appends memory to `out`, errors labelled with the target.
Expected<void> writeBytes(ByteSink& out, Bytes data, const std::string& target);

// The input's bytes for output storage `i` of the plan: a view into the mapping, or into
// `scratch` for deflated zip members (then memory is bounded by that one record).
Expected<Bytes> sourceBytes(const Checkpoint& in, const transform::OutStorage& s, std::vector<std::byte>& scratch);
// Where a stored (not deflated) source range starts in the input file; nullopt when the bytes are
// not in the file as they are (deflated member or an input read from memory).
[[nodiscard]] std::optional<std::uint64_t> fileOffsetOf(const Checkpoint& in, const transform::OutStorage& s);
// Where a planned storage's bytes can be copied from file to file: the input's own file (as
// fileOffsetOf), or for a set read in place the member file that holds them whole (`member` keeps it
// open); `crc` when known without reading them. None when they must be streamed.
struct InputSpan {
    int fd = -1;
    std::uint64_t offset = 0;
    std::optional<std::uint32_t> crc;
    std::shared_ptr<const Checkpoint> member;
};
[[nodiscard]] std::optional<InputSpan> inputSpanOf(const Checkpoint& in, const transform::OutStorage& s);
// Checks the plan's source range lies inside the source storage's bytes.
Expected<void> checkSourceRange(const Checkpoint& in, const transform::OutStorage& s);

}  // namespace ckpt::write::detail
