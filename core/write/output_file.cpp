#include "write/output_file.h"

#include "util/file_copy.h"
#include "write/targets.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <random>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace ckpt::write::detail {

namespace {

std::pair<std::string, std::string> splitDirName(const std::string& path)
{
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) {
        return {".", path};
    }
    return {slash == 0 ? std::string("/") : path.substr(0, slash), path.substr(slash + 1)};
}

std::string randomSuffix()
{
    static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<std::size_t> pick(0, sizeof(kAlphabet) - 2);
    std::string s(6, 'x');
    for (auto& c : s) {
        c = kAlphabet[pick(rng)];
    }
    return s;
}

void fsyncDirectory(const std::string& dir)
{
    // Best effort: the rename is durable only once the directory is synced, but a filesystem that
    // cannot sync directories (some network mounts) has still renamed the file.
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

}  // namespace

Error writeError(const std::string& target, const std::string& what, int err)
{
    Error e = makeError(ErrorCode::WriteFailed, what + ": " + systemErrorText(err));
    e.path = target;
    return e;
}

Error onTarget(Error e, const std::string& target)
{
    if (e.path.empty()) {
        e.path = target;
    }
    return e;
}

Error cancelled(const std::string& target)
{
    Error e = makeError(ErrorCode::Cancelled, "conversion cancelled; nothing was written");
    e.path = target;
    return e;
}

OutputFile::OutputFile(std::string target, std::string temp, int fd, Durability durability)
    : FileSink(fd), target_(std::move(target)), temp_(std::move(temp)), durability_(durability),
      signalSlot_(registerTemp(temp_))
{
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : FileSink(std::exchange(other.fd_, -1)), target_(std::move(other.target_)), temp_(std::move(other.temp_)),
      durability_(other.durability_), written_(other.written_), flushedUpTo_(other.flushedUpTo_),
      signalSlot_(std::exchange(other.signalSlot_, -1))
{
    other.temp_.clear();
}

OutputFile::~OutputFile()
{
    discard();
}

void OutputFile::discard()
{
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
    if (!temp_.empty()) {
        ::unlink(temp_.c_str());
        temp_.clear();
    }
    unregisterTemp(std::exchange(signalSlot_, -1));
}

Expected<OutputFile> OutputFile::create(const std::string& target, Durability durability)
{
    const auto [dir, name] = splitDirName(target);
    if (name.empty()) {
        return onTarget(makeError(ErrorCode::Usage, "the output path names a directory, not a file"), target);
    }
    removeStaleTemps(dir, name);
    // The PID lets a later run tell a killed writer's leftovers from a live writer's file.
    const std::string stem = tempPrefix(dir, name) + std::to_string(::getpid()) + "-";
    // The cleanup signals wait while the file is created and registered: one arriving in between
    // would leave a file the handler does not know about yet.
    sigset_t cleanup;
    sigset_t previous;
    sigemptyset(&cleanup);
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
        sigaddset(&cleanup, sig);
    }
    for (int attempt = 0; attempt < 100; ++attempt) {
        std::string temp = stem + randomSuffix();
        ::pthread_sigmask(SIG_BLOCK, &cleanup, &previous);
        // 0666 so the final file gets the mode the umask gives any new file, as `cp` would.
        const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        const int err = errno;
        if (fd >= 0) {
            ::flock(fd, LOCK_EX);  // held until close: stale-file cleanup leaves a live writer's file alone
            OutputFile file(target, std::move(temp), fd, durability);
            ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
            return file;
        }
        ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
        if (err != EEXIST) {
            return writeError(target, "cannot create a temporary file in " + dir, err);
        }
    }
    return writeError(target, "cannot create a temporary file in " + dir, EEXIST);
}

void OutputFile::writeBehind()
{
    static constexpr std::uint64_t kWriteBehind = 32ULL << 20;
    if (durability_ != Durability::Durable || written_ < flushedUpTo_ + kWriteBehind) {
        return;
    }
    // Only a hint: errors surface in the fsync of commit().
    ::sync_file_range(fd_, static_cast<off_t>(flushedUpTo_), static_cast<off_t>(written_ - flushedUpTo_),
                      SYNC_FILE_RANGE_WRITE);
    flushedUpTo_ = written_;
}

Expected<void> OutputFile::append(Bytes data)
{
    auto ok = FileSink::append(data);
    if (ok) {
        written_ += data.size();
        writeBehind();
    }
    return ok;
}

Expected<void> OutputFile::appendFromFile(int inFd, std::uint64_t offset, std::uint64_t size, const CopyStep& step)
{
    return FileSink::appendFromFile(inFd, offset, size, [&](std::uint64_t n) {
        written_ += n;
        writeBehind();
        return !step || step(n);
    });
}

Expected<void> OutputFile::commit()
{
    const bool durable = durability_ == Durability::Durable;
    if (durable && ::fsync(fd_) != 0) {
        const int err = errno;
        discard();
        return writeError(target_, "cannot flush the output to disk", err);
    }
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) {
        const int err = errno;
        discard();
        return writeError(target_, "cannot close the output", err);
    }
    // The target was checked before writing began; a node that appeared since must not be replaced.
    if (auto still = resolveTarget(target_); !still) {
        discard();
        return still.error();
    }
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
        const int err = errno;
        discard();
        return writeError(target_, "cannot move the finished output into place", err);
    }
    temp_.clear();
    unregisterTemp(std::exchange(signalSlot_, -1));
    if (durable) {
        fsyncDirectory(splitDirName(target_).first);
    }
    return {};
}

Expected<void> checkTarget(const Checkpoint& in, const std::string& target)
{
    struct stat out {};
    if (::stat(target.c_str(), &out) != 0) {
        return {};  // does not exist yet (a missing directory is reported when the file is created)
    }
    struct stat src {};
    const bool haveSource = in.file ? ::fstat(in.file->fd(), &src) == 0 : ::stat(in.path.c_str(), &src) == 0;
    if (haveSource && src.st_dev == out.st_dev && src.st_ino == out.st_ino) {
        return onTarget(makeError(ErrorCode::Usage, "the output is the input file itself; choose another output "
                                                    "(the input is never modified)"),
                        target);
    }
    // A set read in place (sharded/set_view.h): the rename would replace one of the files the copy
    // is still reading (a shard, the index, a rank file), whatever the edits.
    if (const auto hit = sameFileAs(target, in.setMembers)) {
        return onTarget(makeError(ErrorCode::Usage, "the output is " + in.setMembers[*hit] +
                                                        ", a file of the set it is read from, which it would "
                                                        "replace; choose another output (inputs are never modified)"),
                        target);
    }
    return {};
}

ProgressMeter::ProgressMeter(const std::function<void(const WriteProgress&)>& sink, std::uint64_t total)
    : sink_(sink), step_(std::max<std::uint64_t>(total / 200, 1))
{
    p_.bytesTotal = total;
    if (sink_) {
        sink_(p_);
    }
    nextReport_ = step_;
}

void ProgressMeter::advance(std::uint64_t n)
{
    p_.bytesDone += n;
    if (sink_ && p_.bytesDone >= nextReport_ && p_.bytesDone < p_.bytesTotal) {
        sink_(p_);
        nextReport_ = p_.bytesDone + step_;
    }
}

void ProgressMeter::finish()
{
    p_.bytesDone = p_.bytesTotal;
    if (sink_) {
        sink_(p_);
    }
}

namespace {

Error onTargetAt(Error e, const std::string& target)
{
    if (e.code == ErrorCode::Cancelled) {
        return cancelled(target);
    }
    return onTarget(std::move(e), target);
}

}  // namespace

Expected<void> writeBytes(ByteSink& out, Bytes data, const std::string& target)
{
    if (auto ok = out.append(data); !ok) {
        return onTargetAt(ok.error(), target);
    }
    return {};
}

Expected<void> copyFromInput(int inFd, std::uint64_t offset, std::uint64_t size, ByteSink& out,
                             const std::string& target, ProgressMeter& progress, const std::stop_token& stop)
{
    auto step = [&](std::uint64_t n) {
        progress.advance(n);
        return !stop.stop_requested();
    };
    if (stop.stop_requested()) {
        return cancelled(target);
    }
    if (auto ok = out.appendFromFile(inFd, offset, size, step); !ok) {
        return onTargetAt(ok.error(), target);
    }
    return {};
}

Expected<void> checkExpansion(const Checkpoint& in, std::uint64_t outputTensorBytes, bool allowExpand)
{
    static constexpr std::uint64_t kFactor = 4;
    static constexpr std::uint64_t kSlack = 64ULL << 20;
    std::uint64_t inputBytes = 0;
    for (const auto& s : in.storages) {
        inputBytes += s.nbytes;
    }
    const bool within = outputTensorBytes <= kFactor * inputBytes || outputTensorBytes - inputBytes <= kSlack;
    if (allowExpand || within) {
        return {};
    }
    return makeError(ErrorCode::Usage,
                     "the output would hold " + humanBytes(outputTensorBytes) + " of tensor data from " +
                         humanBytes(inputBytes) +
                         " of storage: views that repeat elements (stride 0, expand()) are written out in full "
                         "where storage cannot be shared. Add --allow-expand to write it anyway");
}

Expected<void> checkSourceRange(const Checkpoint& in, const transform::OutStorage& s)
{
    if (s.computed) {
        if (s.byteOffset + s.nbytes > s.computed->size()) {
            return makeError(ErrorCode::Internal,
                             "the plan's computed storage '" + s.key + "' is shorter than it declares");
        }
        return {};
    }
    if (s.inlineBytes) {
        if (s.byteOffset + s.nbytes > s.inlineBytes->size()) {
            return makeError(ErrorCode::Internal, "the plan's own storage '" + s.key + "' is shorter than it declares");
        }
        return {};
    }
    if (!in.storages.contains(s.source)) {
        return makeError(ErrorCode::Internal, "the plan names input storage " + std::to_string(s.source.value()) +
                                                  " but the input has " + std::to_string(in.storages.size()));
    }
    const StorageEntry& src = in.storages[s.source];
    if (!src.present) {
        return makeError(ErrorCode::Corrupt, "storage '" + src.key + "' is missing from the input (" +
                                                 std::to_string(src.storedBytes) + " of " + std::to_string(src.nbytes) +
                                                 " bytes present)");
    }
    if (s.byteOffset > src.nbytes || s.nbytes > src.nbytes - s.byteOffset) {
        return makeError(ErrorCode::Internal, "the plan reads bytes " + std::to_string(s.byteOffset) + ".." +
                                                  std::to_string(s.byteOffset + s.nbytes) + " of storage '" + src.key +
                                                  "', which holds " + std::to_string(src.nbytes));
    }
    return {};
}

std::optional<std::uint64_t> fileOffsetOf(const Checkpoint& in, const transform::OutStorage& s)
{
    if (s.madeByPlan()) {
        return std::nullopt;
    }
    const StorageEntry& src = in.storages[s.source];
    if (!in.file || !src.inMapping()) {
        return std::nullopt;
    }
    return src.fileOffset + s.byteOffset;
}

std::optional<InputSpan> inputSpanOf(const Checkpoint& in, const transform::OutStorage& s)
{
    if (auto offset = fileOffsetOf(in, s)) {
        return InputSpan{in.file->fd(), *offset, std::nullopt, nullptr};
    }
    if (s.madeByPlan() || !in.source) {
        return std::nullopt;
    }
    const StorageEntry& src = in.storages[s.source];
    if (!src.assembled) {
        return std::nullopt;
    }
    auto span = in.source->fileSpan(s.source);
    if (!span || !span->member || !span->member->file) {
        return std::nullopt;
    }
    const bool whole = s.byteOffset == 0 && s.nbytes == src.nbytes;
    return InputSpan{span->member->file->fd(), span->offset + s.byteOffset, whole ? span->crc : std::nullopt,
                     span->member};
}

Expected<Bytes> sourceBytes(const Checkpoint& in, const transform::OutStorage& s, std::vector<std::byte>& scratch)
{
    if (s.computed) {
        // Whole, for a writer that gathers a view: one tensor's bytes (the torch writer streams them).
        scratch.clear();
        scratch.reserve(static_cast<std::size_t>(s.computed->size()));
        auto made = s.computed->stream(in, [&](Bytes piece) {
            scratch.insert(scratch.end(), piece.begin(), piece.end());
            return true;
        });
        if (!made) {
            return made.error();
        }
        return Bytes(scratch).subspan(static_cast<std::size_t>(s.byteOffset), static_cast<std::size_t>(s.nbytes));
    }
    if (s.inlineBytes) {
        return asBytes(*s.inlineBytes)
            .subspan(static_cast<std::size_t>(s.byteOffset), static_cast<std::size_t>(s.nbytes));
    }
    auto whole = in.storageData(s.source, scratch);
    if (!whole) {
        return whole.error();
    }
    if (s.byteOffset + s.nbytes > whole->size()) {
        return makeError(ErrorCode::Corrupt,
                         "storage '" + in.storages[s.source].key + "' holds fewer bytes than " + "its tensors need");
    }
    return whole->subspan(static_cast<std::size_t>(s.byteOffset), static_cast<std::size_t>(s.nbytes));
}

}  // namespace ckpt::write::detail
