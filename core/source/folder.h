// Folders: a multi-file checkpoint's members by relative name, each opened as a byte source
// (byte_source.h), wherever the folder is (issue 37). A set reader (a DCP folder's .metadata and
// data files) asks its folder for members by the names its index gives them and never learns the
// transport: a local folder maps files, an HTTP folder range-reads URLs beside the folder's, an S3
// prefix reads signed objects. A transport that can list its folder (a local readdir, S3's
// ListObjectsV2) says what is there; one that cannot (plain HTTP) answers only for the names asked
// about, so readers look for the names their format fixes (.metadata, then what it names) instead.
//
// The member rule is the folder's, once per transport: a name that is no plain file name (a '/',
// "..", empty) is refused without anything being read, and a local member must resolve to a regular
// file inside the folder (util/folder_member.h; remote/remote_folder.h for URLs and objects).
#pragma once

#include "source/byte_source.h"
#include "util/error.h"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ckpt::source {

class Folder {
public:
    Folder() = default;
    Folder(const Folder&) = delete;
    Folder& operator=(const Folder&) = delete;
    Folder(Folder&&) = delete;
    Folder& operator=(Folder&&) = delete;
    virtual ~Folder() = default;

    // The folder as messages and listings show it: a path, or a URL with credentials redacted.
    [[nodiscard]] virtual std::string shown() const = 0;
    // Member `name` as messages show it.
    [[nodiscard]] virtual std::string pathOf(const std::string& name) const = 0;
    // Member `name` opened: Corrupt, with nothing read, when `name` breaks the member rule (`entry`
    // says who named it: ".metadata's storage_data"); an Io error when it is missing or unreadable
    // (missing() tells which).
    [[nodiscard]] virtual Expected<SourcePtr> open(const std::string& name, const std::string& entry) const = 0;
    // The plain file names directly in the folder, when the transport can list it; nullopt when it
    // cannot (plain HTTP), and the reader then asks for the names it knows.
    [[nodiscard]] virtual Expected<std::optional<std::vector<std::string>>> list() const = 0;
    // Whether member `name` is there, at the least cost the transport has: the listing, a stat, or
    // for plain HTTP a request of one byte.
    [[nodiscard]] virtual Expected<bool> exists(const std::string& name) const;
    // Whether `e` (from open()) says only that the member is not there.
    [[nodiscard]] virtual bool missing(const Error& e) const = 0;
    // Whether members are local files: kept mapped a few at a time (sharded/members.h), their
    // pages released once copied; a remote member holds no descriptor and stays open.
    [[nodiscard]] virtual bool local() const { return false; }

    // Members about to be opened one by one (a DCP folder's data files, named by its .metadata): a
    // remote folder opens them now, several at a time (remote/connections.h), and open() hands each
    // over; nothing to do otherwise.
    virtual void willOpen(const std::vector<std::string>& /*names*/) const {}

    // Ranges of members this folder opened, about to be read (a DCP folder's items' first bytes).
    struct Wanted {
        SourcePtr source;
        std::vector<Range> ranges;
    };
    // Each member's prefetch, asked together: a remote folder makes the requests of all of them
    // several at a time (remote/connections.h), a local one has nothing to do. The first failure;
    // readers may ignore it, as the read that needs the bytes fails the same way.
    virtual Expected<void> prefetch(std::span<const Wanted> wanted) const;
};

using FolderPtr = std::shared_ptr<const Folder>;

// A folder of the local filesystem; members are mapped (MappedSource).
class LocalFolder final : public Folder {
public:
    explicit LocalFolder(std::string dir) : dir_(std::move(dir)) {}
    [[nodiscard]] std::string shown() const override { return dir_; }
    [[nodiscard]] std::string pathOf(const std::string& name) const override;
    [[nodiscard]] Expected<SourcePtr> open(const std::string& name, const std::string& entry) const override;
    [[nodiscard]] Expected<std::optional<std::vector<std::string>>> list() const override;
    [[nodiscard]] Expected<bool> exists(const std::string& name) const override;
    [[nodiscard]] bool missing(const Error& e) const override;
    [[nodiscard]] bool local() const override { return true; }
    // Member `name`'s path, checked by the member rule (memberOfFolder); a missing one as it is.
    [[nodiscard]] Expected<std::string> memberPath(const std::string& name, const std::string& entry) const;

private:
    std::string dir_;
};

// Bytes [offset, offset + length) of another source, as a source of their own: a DCP item inside
// its data file, read by the ordinary readers over HTTP as over a mapping.
class SliceSource final : public ByteSource {
public:
    SliceSource(SourcePtr whole, std::uint64_t offset, std::uint64_t length)
        : whole_(std::move(whole)), offset_(offset), length_(length)
    {
    }
    [[nodiscard]] std::uint64_t size() const override { return length_; }
    [[nodiscard]] std::optional<Bytes> span() const override;
    [[nodiscard]] Expected<Held> read(std::uint64_t offset, std::uint64_t length) const override;
    Expected<void> stream(std::uint64_t offset, std::uint64_t length, const Sink& sink,
                          std::size_t chunk) const override;
    Expected<void> prefetch(std::span<const Range> ranges) const override;
    [[nodiscard]] bool holds(Range range) const override;
    [[nodiscard]] Expected<void> checkUnchanged() const override { return whole_->checkUnchanged(); }

private:
    SourcePtr whole_;
    std::uint64_t offset_ = 0;
    std::uint64_t length_ = 0;
};

}  // namespace ckpt::source
