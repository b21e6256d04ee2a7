#include "write/targets.h"

#include "util/signals.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <utility>

namespace ckpt::write {
namespace {

// The names torch.save files go by (checkpoint/extensions.h lists every name a checkpoint opens
// under; .tar, .gz and .pt2 are containers of other kinds, no plain torch.save zip).
constexpr std::array<std::string_view, 6> kTorchNames{".pt", ".pth", ".bin", ".ckpt", ".th", ".pkl"};
constexpr std::string_view kSafetensorsName = ".safetensors";

Error usage(const std::string& path, std::string message)
{
    Error e = makeError(ErrorCode::Usage, std::move(message));
    e.path = path;
    return e;
}

std::string fileKindName(mode_t mode)
{
    if (S_ISCHR(mode)) {
        return "a character device";
    }
    if (S_ISBLK(mode)) {
        return "a block device";
    }
    if (S_ISFIFO(mode)) {
        return "a FIFO";
    }
    if (S_ISSOCK(mode)) {
        return "a socket";
    }
    if (S_ISDIR(mode)) {
        return "a directory";
    }
    return "not a regular file";
}

// What a path will name once written: its resolved form, made absolute and free of `..`, so two
// spellings of one file compare equal whether or not it exists yet.
std::string identityOf(const std::string& path)
{
    std::error_code ec;
    auto p = std::filesystem::weakly_canonical(path, ec);
    return ec ? path : p.string();
}

struct Inode {
    dev_t dev = 0;
    ino_t ino = 0;
    // clang-tidy 14 takes the defaulted <=> for a literal 0 (its comparison category).
    friend auto operator<=>(const Inode&, const Inode&) = default;  // NOLINT(modernize-use-nullptr)
};

std::optional<Inode> inodeOf(const std::string& path)
{
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        return std::nullopt;
    }
    return Inode{st.st_dev, st.st_ino};
}

bool processAlive(long pid)
{
    if (pid <= 0 || pid > INT_MAX) {
        return false;
    }
    return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// `<pid>-<6 alphanumerics>`, the tail every temporary of ours carries.
std::optional<long> tempPid(std::string_view tail)
{
    const auto dash = tail.find('-');
    if (dash == std::string_view::npos || dash == 0 || tail.size() != dash + 7) {
        return std::nullopt;
    }
    long pid = 0;
    const auto [p, ec] = std::from_chars(tail.data(), tail.data() + dash, pid);
    if (ec != std::errc() || p != tail.data() + dash) {
        return std::nullopt;
    }
    for (const char c : tail.substr(dash + 1)) {
        if (std::isalnum(static_cast<unsigned char>(c)) == 0) {
            return std::nullopt;
        }
    }
    return pid;
}

// Fixed slots a signal handler can read without locks or allocation.
constexpr int kSlots = 64;
enum SlotState : int { Free = 0, Filling = 1, Active = 2 };
struct TempSlot {
    std::atomic<int> state{Free};
    bool dir = false;
    std::array<char, PATH_MAX> path{};
};
std::array<TempSlot, kSlots> gTemps;

extern "C" void removeTempsAndExit(int sig)
{
    detail::removeRegisteredTemps();
    ::_exit(128 + sig);
}

}  // namespace

Expected<std::string> resolveTarget(const std::string& target)
{
    struct stat link {};
    if (::lstat(target.c_str(), &link) != 0) {
        return target;  // not there yet (a missing directory is reported when the file is created)
    }
    struct stat st = link;
    if (S_ISLNK(link.st_mode) && ::stat(target.c_str(), &st) != 0) {
        return target;  // a dangling link is replaced like a missing file
    }
    if (S_ISDIR(st.st_mode)) {
        return usage(target, "the output is a directory; name a file");
    }
    if (!S_ISREG(st.st_mode)) {
        return usage(target, "the output exists and is " + fileKindName(st.st_mode) +
                                 ", not a regular file; ckptscope only replaces regular files");
    }
    if (S_ISLNK(link.st_mode)) {
        std::error_code ec;
        auto real = std::filesystem::canonical(target, ec);
        if (!ec) {
            return real.string();
        }
    }
    return target;
}

Expected<void> checkConversions(const std::vector<Conversion>& batch)
{
    std::map<std::string, std::size_t> inputByPath;
    std::map<Inode, std::size_t> inputByInode;
    for (std::size_t i = 0; i < batch.size(); ++i) {
        inputByPath.emplace(identityOf(batch[i].input), i);
        if (auto ino = inodeOf(batch[i].input)) {
            inputByInode.emplace(*ino, i);
        }
    }
    std::map<std::string, std::size_t> outputs;
    for (std::size_t i = 0; i < batch.size(); ++i) {
        const Conversion& c = batch[i];
        auto resolved = resolveTarget(c.output);
        if (!resolved) {
            return resolved.error();
        }
        const std::string id = identityOf(*resolved);
        std::optional<std::size_t> clash;
        if (auto it = inputByPath.find(id); it != inputByPath.end()) {
            clash = it->second;
        } else if (auto ino = inodeOf(*resolved)) {
            if (auto jt = inputByInode.find(*ino); jt != inputByInode.end()) {
                clash = jt->second;
            }
        }
        if (clash) {
            if (*clash == i) {
                return usage(c.output, "the output is the input file itself; write the copy to another path "
                                       "(inputs are never modified)");
            }
            return usage(c.output, "the output for " + c.input + " is the input file " + batch[*clash].input +
                                       ", which it would replace; nothing was written (inputs are never modified)");
        }
        if (auto [it, fresh] = outputs.emplace(id, i); !fresh) {
            return usage(c.output, "both " + batch[it->second].input + " and " + c.input +
                                       " would be written here, the second replacing the first; nothing was written "
                                       "(rename one input, or convert them into different directories)");
        }
    }
    return {};
}

std::optional<std::size_t> sameFileAs(const std::string& target, const std::vector<std::string>& files)
{
    const std::string id = identityOf(target);
    const auto ino = inodeOf(target);
    for (std::size_t i = 0; i < files.size(); ++i) {
        if (identityOf(files[i]) == id || (ino && inodeOf(files[i]) == ino)) {
            return i;
        }
    }
    return std::nullopt;
}

namespace detail {

std::string tempPrefix(const std::string& dir, const std::string& name)
{
    long nameMax = ::pathconf(dir.c_str(), _PC_NAME_MAX);
    if (nameMax <= 0) {
        nameMax = NAME_MAX;
    }
    // "." + name + ".ckptscope-" + pid (at most 10 digits) + "-" + 6 characters.
    constexpr std::size_t kFixed = 1 + 11 + 10 + 1 + 6;
    const std::size_t room =
        static_cast<std::size_t>(nameMax) > kFixed ? static_cast<std::size_t>(nameMax) - kFixed : 0;
    std::size_t keep = std::min(room, name.size());
    while (keep > 0 && keep < name.size() && (static_cast<unsigned char>(name[keep]) & 0xC0U) == 0x80U) {
        --keep;  // do not split a UTF-8 sequence
    }
    return dir + "/." + name.substr(0, keep) + ".ckptscope-";
}

int removeStaleTemps(const std::string& dir, const std::string& name)
{
    const std::string prefixPath = tempPrefix(dir, name);
    const std::string prefix = prefixPath.substr(prefixPath.rfind('/') + 1);
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
        return 0;
    }
    int removed = 0;
    while (const dirent* e = ::readdir(d)) {
        const std::string_view entry(e->d_name);
        if (!entry.starts_with(prefix)) {
            continue;
        }
        const auto pid = tempPid(entry.substr(prefix.size()));
        if (!pid || processAlive(*pid)) {
            continue;
        }
        const int fd = ::openat(::dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
            continue;
        }
        struct stat st {};
        // Only our own kind of file, and only when no live writer holds it (a writer in another PID
        // namespace has a PID that means nothing here, but still holds its lock).
        if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            ::unlinkat(::dirfd(d), e->d_name, 0) == 0) {
            ++removed;
        }
        ::close(fd);
    }
    ::closedir(d);
    return removed;
}

namespace {

int registerSlot(const std::string& path, bool dir)
{
    if (path.size() >= PATH_MAX) {
        return -1;
    }
    for (int i = 0; i < kSlots; ++i) {
        TempSlot& s = gTemps.at(static_cast<std::size_t>(i));
        int expected = Free;
        if (s.state.compare_exchange_strong(expected, Filling)) {
            std::memcpy(s.path.data(), path.c_str(), path.size() + 1);
            s.dir = dir;
            s.state.store(Active);
            return i;
        }
    }
    return -1;
}

// Empties and removes a folder with system calls only (getdents64, unlinkat, rmdir): opendir
// allocates, which a signal handler must not.
void removeDirFromHandler(const char* path)
{
    const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    alignas(8) std::array<char, 4096> buf{};
    for (;;) {
        const long n = ::syscall(SYS_getdents64, fd, buf.data(), buf.size());
        if (n <= 0) {
            break;
        }
        for (long off = 0; off < n;) {
            const char* rec = buf.data() + off;
            std::uint16_t reclen = 0;
            std::memcpy(&reclen, rec + 16, sizeof reclen);
            const char* name = rec + 19;
            if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0) {
                ::unlinkat(fd, name, 0);
            }
            off += reclen;
        }
    }
    ::close(fd);
    ::rmdir(path);
}

}  // namespace

int registerTemp(const std::string& path)
{
    return registerSlot(path, false);
}

int registerTempDir(const std::string& path)
{
    return registerSlot(path, true);
}

void unregisterTemp(int slot)
{
    if (slot >= 0 && slot < kSlots) {
        gTemps.at(static_cast<std::size_t>(slot)).state.store(Free);
    }
}

void removeRegisteredTemps()
{
    for (auto& s : gTemps) {
        if (s.state.load() == Active && !s.dir) {
            ::unlink(s.path.data());
        }
    }
    for (auto& s : gTemps) {
        if (s.state.load() == Active && s.dir) {
            removeDirFromHandler(s.path.data());
        }
    }
}

}  // namespace detail

void removeTempsOnSignals()
{
    onTerminationSignals(&removeTempsAndExit);
}

std::optional<ExtensionMismatch> extensionMismatch(const std::string& target, bool safetensors)
{
    const std::filesystem::path path(target);
    std::string ext = path.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    const std::string name = path.filename().string();
    if (safetensors && std::find(kTorchNames.begin(), kTorchNames.end(), ext) != kTorchNames.end()) {
        return ExtensionMismatch{name + " is a torch.save name (" + ext +
                                     "), but the file would be safetensors, which torch.load cannot read "
                                     "(\"invalid load key\")",
                                 std::filesystem::path(path).replace_extension(kSafetensorsName).string()};
    }
    if (!safetensors && ext == kSafetensorsName) {
        return ExtensionMismatch{name + " is a safetensors name, but the file would be a torch.save zip, which "
                                        "safetensors cannot read",
                                 std::filesystem::path(path).replace_extension(".pt").string()};
    }
    return std::nullopt;
}

}  // namespace ckpt::write
