#include "remote/reply_parse.h"

#include "util/json_text.h"

#include <algorithm>
#include <charconv>
#include <ctime>
#include <curl/curl.h>
#include <nlohmann/json.hpp>
#include <set>

namespace ckpt::remote {

std::optional<std::uint64_t> parseNumber(std::string_view s)
{
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty()) {
        return std::nullopt;
    }
    return v;
}

std::optional<ContentRange> parseContentRange(std::string_view v)
{
    if (!v.starts_with("bytes ")) {
        return std::nullopt;
    }
    v.remove_prefix(6);
    const auto dash = v.find('-');
    const auto slash = v.find('/');
    if (dash == std::string_view::npos || slash == std::string_view::npos || dash > slash) {
        return std::nullopt;
    }
    auto first = parseNumber(v.substr(0, dash));
    auto last = parseNumber(v.substr(dash + 1, slash - dash - 1));
    auto total = parseNumber(v.substr(slash + 1));
    if (!first || !last || !total || *first > *last || *last >= *total) {
        return std::nullopt;
    }
    return ContentRange{*first, *last, *total};
}

std::optional<std::int64_t> retryAfterSeconds(const std::string& value)
{
    if (value.empty()) {
        return std::nullopt;
    }
    std::int64_t seconds = 0;
    const auto* end = value.data() + value.size();
    if (auto [p, ec] = std::from_chars(value.data(), end, seconds); ec == std::errc() && p == end) {
        return std::max<std::int64_t>(seconds, 0);
    }
    const time_t at = curl_getdate(value.c_str(), nullptr);
    if (at < 0) {
        return std::nullopt;
    }
    return std::max<std::int64_t>(at - std::time(nullptr), 0);
}

bool isRepositoryPath(std::string_view name)
{
    if (name.empty() || name.front() == '/' || std::any_of(name.begin(), name.end(), [](char c) {
            return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
        })) {
        return false;
    }
    for (std::size_t at = 0; at <= name.size();) {
        const std::size_t slash = std::min(name.find('/', at), name.size());
        const std::string_view part = name.substr(at, slash - at);
        if (part.empty() || part == "." || part == "..") {
            return false;
        }
        at = slash + 1;
    }
    return true;
}

bool isPlainFileName(std::string_view name)
{
    return isRepositoryPath(name) && name.find('/') == std::string_view::npos;
}

Expected<std::string> repositoryFileOf(std::string_view apiReply, const std::string& repo)
{
    auto files = repositoryFilesOf(apiReply, repo);
    if (!files) {
        return files.error();
    }
    return folderFileOf(*files, "the repository", "hf://" + repo + "/FILE");
}

Expected<std::vector<std::string>> repositoryFilesOf(std::string_view apiReply, const std::string& repo)
{
    auto doc = parseJsonText<nlohmann::json>(apiReply, "the Hub API's reply");
    if (!doc || !doc->is_object() || !doc->contains("siblings") || !(*doc)["siblings"].is_array()) {
        return makeError(ErrorCode::Io, "the Hub API's reply for " + repo + " lists no files");
    }
    std::vector<std::string> files;
    for (const auto& s : (*doc)["siblings"]) {
        if (s.is_object() && s.contains("rfilename") && s["rfilename"].is_string() &&
            isRepositoryPath(s["rfilename"].get_ref<const std::string&>())) {
            files.push_back(s["rfilename"].get<std::string>());
        }
    }
    return files;
}

Expected<std::string> folderFileOf(const std::vector<std::string>& files, const std::string& what,
                                   const std::string& nameOne)
{
    auto has = [&](std::string_view f) { return std::find(files.begin(), files.end(), f) != files.end(); };
    // A DCP folder saved without collectives has its ranks' __R.metadata and no .metadata.
    const bool rankMetadata = std::any_of(files.begin(), files.end(), [](const std::string& f) {
        return f.starts_with("__") && f.ends_with(".metadata");
    });
    if (rankMetadata && !has(kDcpMetadata)) {
        return std::string(kDcpMetadata);
    }
    for (const std::string_view f : kFolderEntryNames) {
        if (has(f)) {
            return std::string(f);
        }
    }
    std::vector<std::string> weights;
    for (const auto& f : files) {
        for (const std::string_view ext : {".safetensors", ".bin", ".pt", ".pth", ".ckpt"}) {
            if (f.ends_with(ext)) {
                weights.push_back(f);
            }
        }
    }
    if (weights.size() == 1) {
        return weights.front();
    }
    if (weights.empty()) {
        return makeError(ErrorCode::NotCheckpoint,
                         what + " holds no checkpoint file (" + std::to_string(files.size()) + " files)");
    }
    // The first few: a listing may name thousands, and the message is one line.
    constexpr std::size_t kNamed = 5;
    std::string list;
    for (std::size_t i = 0; i < std::min(kNamed, weights.size()); ++i) {
        list += (list.empty() ? "" : ", ") + weights[i];
    }
    if (weights.size() > kNamed) {
        list += ", ... (" + std::to_string(weights.size()) + " in all)";
    }
    return makeError(ErrorCode::Usage, what + " holds several checkpoint files (" + list + "): name one, " + nameOne);
}

Expected<std::string> prefixFileOf(const PrefixListing& listing, const std::string& shown)
{
    if (listing.files.empty()) {
        return makeError(ErrorCode::Io,
                         "holds no files" +
                             std::string(listing.folders.empty() ? " (no such prefix?)" : " directly, only folders"));
    }
    return folderFileOf(listing.files, "the folder", shown + "FILE");
}

std::vector<std::string> shardNamesOf(std::string_view indexText)
{
    std::vector<std::string> names;
    const auto doc = parseJsonText<nlohmann::json>(indexText, "the index");
    if (!doc || !doc->is_object() || !doc->contains("weight_map") || !(*doc)["weight_map"].is_object()) {
        return names;
    }
    std::set<std::string> seen;
    for (const auto& [key, file] : (*doc)["weight_map"].items()) {
        if (file.is_string() && isPlainFileName(file.get_ref<const std::string&>()) &&
            seen.insert(file.get<std::string>()).second) {
            names.push_back(file.get<std::string>());
        }
    }
    return names;
}

}  // namespace ckpt::remote
