#include "source/folder.h"

#include "util/folder_member.h"

#include <algorithm>
#include <filesystem>

namespace ckpt::source {

namespace fs = std::filesystem;

Expected<bool> Folder::exists(const std::string& name) const
{
    auto names = list();
    if (!names) {
        return names.error();
    }
    if (*names) {
        return std::find((*names)->begin(), (*names)->end(), name) != (*names)->end();
    }
    auto opened = open(name, "the folder");
    if (opened) {
        return true;
    }
    if (missing(opened.error())) {
        return false;
    }
    return opened.error();
}

Expected<void> Folder::prefetch(std::span<const Wanted> wanted) const
{
    std::optional<Error> failed;
    for (const auto& w : wanted) {
        if (auto ok = w.source->prefetch(w.ranges); !ok && !failed) {
            failed = ok.error();
        }
    }
    if (failed) {
        return *failed;
    }
    return {};
}

std::string LocalFolder::pathOf(const std::string& name) const
{
    return (fs::path(dir_) / name).string();
}

Expected<std::string> LocalFolder::memberPath(const std::string& name, const std::string& entry) const
{
    return memberOfFolder(dir_, name, entry);
}

Expected<SourcePtr> LocalFolder::open(const std::string& name, const std::string& entry) const
{
    auto path = memberPath(name, entry);
    if (!path) {
        return path.error();
    }
    auto mapped = MappedSource::open(*path);
    if (!mapped) {
        return mapped.error();
    }
    return SourcePtr(*mapped);
}

Expected<std::optional<std::vector<std::string>>> LocalFolder::list() const
{
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(dir_.empty() ? fs::path(".") : fs::path(dir_), ec), end; !ec && it != end;
         it.increment(ec)) {
        names.push_back(it->path().filename().string());
    }
    return std::optional(std::move(names));
}

Expected<bool> LocalFolder::exists(const std::string& name) const
{
    std::error_code ec;
    return fs::is_regular_file(fs::path(pathOf(name)), ec);
}

bool LocalFolder::missing(const Error& e) const
{
    return e.code == ErrorCode::Io && !fs::exists(fs::path(e.path));
}

std::optional<Bytes> SliceSource::span() const
{
    const auto all = whole_->span();
    if (!all || offset_ > all->size() || length_ > all->size() - offset_) {
        return std::nullopt;
    }
    return all->subspan(static_cast<std::size_t>(offset_), static_cast<std::size_t>(length_));
}

Expected<Held> SliceSource::read(std::uint64_t offset, std::uint64_t length) const
{
    if (offset > length_ || length > length_ - offset) {
        return pastEnd(offset, length);
    }
    return whole_->read(offset_ + offset, length);
}

Expected<void> SliceSource::stream(std::uint64_t offset, std::uint64_t length, const Sink& sink,
                                   std::size_t chunk) const
{
    if (offset > length_ || length > length_ - offset) {
        return pastEnd(offset, length);
    }
    return whole_->stream(offset_ + offset, length, sink, chunk);
}

Expected<void> SliceSource::prefetch(std::span<const Range> ranges) const
{
    std::vector<Range> shifted;
    shifted.reserve(ranges.size());
    for (const auto& r : ranges) {
        if (r.offset < length_) {
            shifted.push_back({offset_ + r.offset, std::min(r.length, length_ - r.offset)});
        }
    }
    return whole_->prefetch(shifted);
}

bool SliceSource::holds(Range range) const
{
    return range.offset <= length_ && range.length <= length_ - range.offset &&
           whole_->holds({offset_ + range.offset, range.length});
}

}  // namespace ckpt::source
