#include "remote/remote_folder.h"

#include "remote/http_source.h"
#include "remote/location.h"
#include "remote/reply_parse.h"

#include <algorithm>

namespace ckpt::remote {

Expected<source::SourcePtr> UrlFolder::openFirst(const std::shared_ptr<HttpClient>& client, const std::string& name,
                                                 const std::string& entry, std::uint64_t firstBytes) const
{
    if (!isPlainFileName(name)) {
        Error e = makeError(ErrorCode::Corrupt, entry + " names '" + name +
                                                    "', which is not a file name in the folder: a set reads only "
                                                    "its own files, so it was not requested");
        e.path = client_->redactor().apply(shown_);
        return e;
    }
    auto opened =
        HttpSource::open(client, base_ + encodedName(name), HttpSource::First::Head, firstBytes, connections_);
    if (!opened) {
        Error e = opened.error();
        e.message = client_->redactor().apply(e.message);
        e.path = client_->redactor().apply(pathOf(name));
        return e;
    }
    return source::SourcePtr(*opened);
}

Expected<source::SourcePtr> UrlFolder::open(const std::string& name, const std::string& entry) const
{
    {
        const std::lock_guard lock(mutex_);
        if (auto it = opened_.find(name); it != opened_.end()) {
            auto opened = std::move(it->second);
            opened_.erase(it);
            return opened;
        }
    }
    return openFirst(client_, name, entry, kFirstBytes);
}

Expected<bool> UrlFolder::exists(const std::string& name) const
{
    if (listing_) {
        return std::find(listing_->begin(), listing_->end(), name) != listing_->end();
    }
    auto opened = openFirst(client_, name, "the folder", 1);  // one byte: the answer without the file
    if (opened) {
        return true;
    }
    if (missing(opened.error())) {
        return false;
    }
    return opened.error();
}

void UrlFolder::willOpen(const std::vector<std::string>& names) const
{
    std::vector<std::string> todo;
    for (const auto& n : names) {
        if (!isPlainFileName(n)) {
            break;  // nothing is requested for it, nor (the set stopping there) for the names after it
        }
        if (std::find(todo.begin(), todo.end(), n) == todo.end()) {
            todo.push_back(n);
        }
    }
    connections_->run(todo.size(), [&](std::size_t k, const std::shared_ptr<HttpClient>& client) {
        auto opened = openFirst(client, todo[k], "", kFirstBytes);  // `entry` names only a refused name
        const std::lock_guard lock(mutex_);
        opened_.insert_or_assign(todo[k], std::move(opened));
    });
}

Expected<void> UrlFolder::prefetch(std::span<const Wanted> wanted) const
{
    std::vector<HttpSource::Wanted> own;
    for (const auto& w : wanted) {
        // The members this folder opened are HttpSources; anything else asks for its own.
        if (const auto* s = dynamic_cast<const HttpSource*>(w.source.get())) {
            own.push_back({s, w.ranges});
        } else if (auto ok = w.source->prefetch(w.ranges); !ok) {
            return ok;
        }
    }
    return HttpSource::prefetchAll(*connections_, own);
}

bool UrlFolder::missing(const Error& e) const
{
    return e.message.starts_with("HTTP 404");
}

}  // namespace ckpt::remote
