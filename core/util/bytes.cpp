#include "util/bytes.h"

#include "util/mapped_pages.h"

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ckpt {
namespace {

// The live mappings, in fixed slots the SIGBUS handler reads without locks.
constexpr std::size_t kGuardSlots = 1024;
struct GuardSlot {
    std::atomic<std::uintptr_t> begin{0};
    std::atomic<std::uintptr_t> end{0};
    std::atomic<bool> faulted{false};
};
std::array<GuardSlot, kGuardSlots> gGuards;
std::uintptr_t gPageSize = 4096;

extern "C" void onBusError(int sig, siginfo_t* info, void* /*context*/)
{
    const auto at = reinterpret_cast<std::uintptr_t>(info->si_addr);  // NOLINT
    for (auto& g : gGuards) {
        const std::uintptr_t begin = g.begin.load();
        const std::uintptr_t end = g.end.load();
        if (begin != 0 && at >= begin && at < end) {
            // Zeros from the faulting page to the mapping's end: one fault, however much was lost.
            const std::uintptr_t page = at & ~(gPageSize - 1);
            void* p = ::mmap(reinterpret_cast<void*>(page), end - page, PROT_READ,  // NOLINT
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            if (p != MAP_FAILED) {
                g.faulted.store(true);
                return;
            }
            break;
        }
    }
    // Not one of our mappings: a real bug, so die of it as if no handler were installed.
    ::signal(sig, SIG_DFL);
}

void installBusGuard()
{
    static std::once_flag once;
    std::call_once(once, [] {
        gPageSize = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
        struct sigaction sa {};
        sa.sa_sigaction = &onBusError;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        ::sigaction(SIGBUS, &sa, nullptr);
    });
}

int guardMapping(const void* data, std::size_t size)
{
    installBusGuard();
    const auto begin = reinterpret_cast<std::uintptr_t>(data);  // NOLINT
    for (std::size_t i = 0; i < kGuardSlots; ++i) {
        std::uintptr_t expected = 0;
        if (gGuards.at(i).begin.compare_exchange_strong(expected, begin)) {
            gGuards.at(i).faulted.store(false);
            gGuards.at(i).end.store(begin + size);
            return static_cast<int>(i);
        }
    }
    return -1;  // more than 1024 files mapped at once: the rest are read unguarded
}

void unguardMapping(int slot)
{
    if (slot >= 0) {
        auto& g = gGuards.at(static_cast<std::size_t>(slot));
        g.end.store(0);
        g.begin.store(0);
    }
}

}  // namespace

Expected<int> openRegularFile(const std::string& path, struct stat& st)
{
    auto fail = [&](const std::string& what) {
        Error e = makeError(ErrorCode::Io, what);
        e.path = path;
        return e;
    };
    // O_NONBLOCK: opening a FIFO for reading blocks until someone writes to it, so a named pipe
    // planted as a shard, an index or a diff side would hang the command before fstat could tell.
    // It means nothing for a regular file, and is cleared once the file is known to be one.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        return fail(std::string("cannot open: ") + systemErrorText(errno));
    }
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        return fail(std::string("cannot stat: ") + systemErrorText(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return fail(S_ISFIFO(st.st_mode)   ? "is a named pipe (FIFO), not a regular file"
                    : S_ISSOCK(st.st_mode) ? "is a socket, not a regular file"
                    : S_ISDIR(st.st_mode)  ? "is a directory, not a regular file"
                                           : "is not a regular file");
    }
    (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

Expected<std::string> readSmallFile(const std::string& path, std::uint64_t maxBytes)
{
    struct stat st {};
    auto fd = openRegularFile(path, st);
    if (!fd) {
        return fd.error();
    }
    if (static_cast<std::uint64_t>(st.st_size) > maxBytes) {
        ::close(*fd);
        Error e = makeError(ErrorCode::Limit, "is " + humanBytes(static_cast<std::uint64_t>(st.st_size)) +
                                                  ", more than the " + humanBytes(maxBytes) +
                                                  " such a file can be; not read");
        e.path = path;
        return e;
    }
    std::string text(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t got = 0;
    while (got < text.size()) {
        const ssize_t n = ::read(*fd, text.data() + got, text.size() - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;  // shrank while read: what is there is what the parser sees
        }
        got += static_cast<std::size_t>(n);
    }
    ::close(*fd);
    text.resize(got);
    return text;
}

Expected<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path)
{
    auto fail = [&](const std::string& what) {
        Error e = makeError(ErrorCode::Io, what);
        e.path = path;
        return e;
    };
    struct stat st {};
    auto fd = openRegularFile(path, st);
    if (!fd) {
        if (S_ISDIR(st.st_mode)) {
            // Sets were tried before a path gets here: this folder is none of them.
            return fail("is a directory, and none of the checkpoint sets ckptscope reads (a Hugging Face "
                        "*.index.json, a DCP .metadata, a DeepSpeed ZeRO folder, FSDP rank files)");
        }
        return fd.error();
    }
    std::shared_ptr<MappedFile> m(new MappedFile());
    m->path_ = path;
    m->fd_ = *fd;
    m->size_ = static_cast<std::size_t>(st.st_size);
    if (m->size_ > 0) {
        void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, *fd, 0);
        if (p == MAP_FAILED) {
            return fail(std::string("cannot map: ") + systemErrorText(errno));
        }
        m->data_ = p;
        m->guardSlot_ = guardMapping(p, m->size_);
    }
    return std::shared_ptr<const MappedFile>(std::move(m));
}

void releaseMappedPages(const MappedFile& file, Bytes range)
{
    const Bytes all = file.bytes();
    if (range.empty() || range.data() < all.data() || range.data() + range.size() > all.data() + all.size()) {
        return;
    }
    static const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<std::uintptr_t>(range.data());
    const std::uintptr_t first = (begin + page - 1) / page * page;
    const std::uintptr_t last = (begin + range.size()) / page * page;
    if (last > first) {
        // NOLINTNEXTLINE(performance-no-int-to-ptr)
        (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
    }
}

Expected<void> MappedFile::checkUnchanged() const
{
    struct stat st {};
    const bool faulted = guardSlot_ >= 0 && gGuards.at(static_cast<std::size_t>(guardSlot_)).faulted.load();
    const bool shorter = ::fstat(fd_, &st) == 0 && static_cast<std::uint64_t>(st.st_size) < size_;
    if (!faulted && !shorter) {
        return {};
    }
    Error e =
        makeError(ErrorCode::Io, "changed size while being read (" + std::to_string(size_) + " bytes when opened" +
                                     (shorter ? ", " + std::to_string(st.st_size) + " now" : std::string()) +
                                     "); nothing read from it can be trusted: read it again once it is "
                                     "complete");
    e.path = path_;
    return e;
}

MappedFile::~MappedFile()
{
    unguardMapping(guardSlot_);
    if (data_ != nullptr) {
        ::munmap(data_, size_);
    }
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

std::string humanBytes(std::uint64_t n)
{
    static constexpr std::array<const char*, 6> kUnits{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (n < 1024) {
        return std::to_string(n) + " B";
    }
    auto v = static_cast<double>(n);
    std::size_t u = 0;
    while (v >= 1024.0 && u + 1 < kUnits.size()) {
        v /= 1024.0;
        ++u;
    }
    std::array<char, 32> buf{};
    std::snprintf(buf.data(), buf.size(), "%.1f %s", v, kUnits.at(u));
    return buf.data();
}

std::uint64_t hashBytes(Bytes b)
{
    // Four independent multiply-xor lanes over 8-byte words keep the loop at memory speed.
    constexpr std::uint64_t kMul = 0x9E3779B97F4A7C15ULL;
    std::uint64_t lanes[4] = {0x243F6A8885A308D3ULL, 0x13198A2E03707344ULL, 0xA4093822299F31D0ULL,
                              0x082EFA98EC4E6C89ULL};
    const std::byte* p = b.data();
    std::size_t n = b.size();
    while (n >= 32) {
        for (auto& lane : lanes) {
            std::uint64_t word = 0;
            std::memcpy(&word, p, sizeof word);
            lane = std::rotl((lane ^ word) * kMul, 29);
            p += 8;
        }
        n -= 32;
    }
    std::uint64_t h = b.size() * kMul;
    for (const auto lane : lanes) {
        h = std::rotl(h ^ lane, 31) * kMul;
    }
    for (; n > 0; --n, ++p) {
        h = (h ^ std::to_integer<std::uint64_t>(*p)) * kMul;
    }
    return h ^ (h >> 32U);
}

}  // namespace ckpt
