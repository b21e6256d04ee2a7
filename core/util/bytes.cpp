#include "util/bytes.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ckpt {

Expected<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path)
{
    auto fail = [&](const std::string& what) {
        Error e = makeError(ErrorCode::Io, what);
        e.path = path;
        return e;
    };
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // NOLINT(cppcoreguidelines-pro-type-vararg)
    if (fd < 0) {
        return fail(std::string("cannot open: ") + systemErrorText(errno));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        return fail(std::string("cannot stat: ") + systemErrorText(err));
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        return fail("is a directory, not a checkpoint file (torch.distributed.checkpoint folders are not read yet)");
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return fail("is not a regular file");
    }
    std::shared_ptr<MappedFile> m(new MappedFile());
    m->path_ = path;
    m->fd_ = fd;
    m->size_ = static_cast<std::size_t>(st.st_size);
    if (m->size_ > 0) {
        void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {  // NOLINT(cppcoreguidelines-pro-type-cstyle-cast)
            return fail(std::string("cannot map: ") + systemErrorText(errno));
        }
        m->data_ = p;
    }
    return std::shared_ptr<const MappedFile>(std::move(m));
}

MappedFile::~MappedFile()
{
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
    double v = static_cast<double>(n);
    std::size_t u = 0;
    while (v >= 1024.0 && u + 1 < kUnits.size()) {
        v /= 1024.0;
        ++u;
    }
    std::array<char, 32> buf{};
    std::snprintf(buf.data(), buf.size(), "%.1f %s", v, kUnits.at(u));  // NOLINT(cppcoreguidelines-pro-type-vararg)
    return buf.data();
}

}  // namespace ckpt
