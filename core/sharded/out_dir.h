// The folder a written set goes to: built in a hidden folder beside it, checked not to mix with a
// set already there, and moved into place only once complete (split.cpp, dcp_write.cpp).
#pragma once

#include "util/error.h"
#include "write/output_file.h"
#include "write/targets.h"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

namespace ckpt::sharded::detail {

// The hidden folder the set is written into, beside the target; removed unless kept.
class TempDir {
public:
    static Expected<TempDir> create(const std::filesystem::path& named)
    {
        // `-o llama-hf/` names the folder `-o llama-hf` does: the hidden sibling is named after it.
        const std::filesystem::path target = named.has_filename() ? named : named.parent_path();
        const std::filesystem::path parent =
            target.parent_path().empty() ? std::filesystem::path(".") : target.parent_path();
        std::string pattern = write::detail::tempPrefix(parent.string(), target.filename().string()) +
                              std::to_string(::getpid()) + "-XXXXXX";
        if (::mkdtemp(pattern.data()) == nullptr) {
            return write::detail::writeError(target.string(), "cannot create a folder beside it", errno);
        }
        return TempDir(pattern);
    }
    TempDir(TempDir&& o) noexcept : path_(std::move(o.path_)), slot_(o.slot_) { o.slot_ = -1, o.path_.clear(); }
    TempDir& operator=(TempDir&&) = delete;
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir()
    {
        if (!path_.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(path_, ec);
        }
        write::detail::unregisterTemp(slot_);
    }
    [[nodiscard]] const std::string& path() const { return path_; }
    void release()
    {
        write::detail::unregisterTemp(slot_);
        slot_ = -1;
        path_.clear();
    }

private:
    explicit TempDir(std::string path) : path_(std::move(path)), slot_(write::detail::registerTempDir(path_)) {}
    std::string path_;
    int slot_ = -1;
};

// Whether `dir` exists (false: it will be created). Usage error when it is no folder, or already
// holds a file whose name starts with `stem` and ends with `ext` or ".index.json".
Expected<bool> checkTargetDir(const std::filesystem::path& dir, const std::string& stem, const std::string& ext);

// The written files into `dir`: the temporary folder renamed when `dir` did not exist, else each
// file moved in, in the order given (the one loaders look for last).
Expected<void> moveInto(const TempDir& tmp, const std::filesystem::path& dir, bool dirExists,
                        const std::vector<std::string>& files);

}  // namespace ckpt::sharded::detail
