// A set's folder over the network (source/folder.h): each member is the URL of its name beside the
// folder's own (an http(s) folder URL, a Hub repository's resolve URL, an S3 prefix's object URL),
// opened as an HttpSource whose first request reads its head. A listing is what the transport gave
// (S3's ListObjectsV2 of the prefix); plain HTTP has none, and readers ask for the names their
// format fixes. A member's prefetch, and the folder's of several members, makes its requests
// several at a time (connections.h). The member rule is the local one: a name that is no plain
// file name is refused before any request.
#pragma once

#include "remote/connections.h"
#include "remote/http_client.h"
#include "source/folder.h"

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::remote {

class UrlFolder final : public source::Folder {
public:
    // `base`: the folder's URL up to and with its last '/'; `shown`: the same as messages show it.
    UrlFolder(std::shared_ptr<HttpClient> client, std::string base, std::string shown,
              std::optional<std::vector<std::string>> listing)
        : client_(client), connections_(std::make_shared<const Connections>(std::move(client))), base_(std::move(base)),
          shown_(std::move(shown)), listing_(std::move(listing))
    {
    }
    // Without its last '/', as a local folder's path is shown.
    [[nodiscard]] std::string shown() const override
    {
        return shown_.ends_with('/') ? shown_.substr(0, shown_.size() - 1) : shown_;
    }
    [[nodiscard]] std::string pathOf(const std::string& name) const override { return shown_ + name; }
    [[nodiscard]] Expected<source::SourcePtr> open(const std::string& name, const std::string& entry) const override;
    [[nodiscard]] Expected<std::optional<std::vector<std::string>>> list() const override { return listing_; }
    [[nodiscard]] Expected<bool> exists(const std::string& name) const override;
    [[nodiscard]] bool missing(const Error& e) const override;
    // Opens `names` (their first requests) kParallelConnections at a time, up to the first that
    // breaks the member rule (open() refuses it, and a set stops there).
    void willOpen(const std::vector<std::string>& names) const override;
    // The requests of every member's ranges made together, kParallelConnections at a time.
    Expected<void> prefetch(std::span<const Wanted> wanted) const override;

    // What a member's first request reads of its head: a DCP data file's first item's zip header
    // and more, a small file whole.
    static constexpr std::uint64_t kFirstBytes = std::uint64_t{64} << 10;

private:
    [[nodiscard]] Expected<source::SourcePtr> openFirst(const std::shared_ptr<HttpClient>& client,
                                                        const std::string& name, const std::string& entry,
                                                        std::uint64_t firstBytes) const;

    std::shared_ptr<HttpClient> client_;
    std::shared_ptr<const Connections> connections_;  // the members' prefetches, shared by them
    std::string base_;
    std::string shown_;
    std::optional<std::vector<std::string>> listing_;
    mutable std::mutex mutex_;
    mutable std::map<std::string, Expected<source::SourcePtr>> opened_;  // by willOpen, until open() takes it
};

}  // namespace ckpt::remote
