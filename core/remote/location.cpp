#include "remote/location.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace ckpt::remote {
namespace {

constexpr std::string_view kHub = "hf://";

Error usage(std::string_view input, std::string message)
{
    Error e = makeError(ErrorCode::Usage, std::move(message));
    e.path = std::string(input);
    return e;
}

// Percent-encodes what may not stand in a URL path as it is (spaces, '#', '?', non-ASCII);
// '/' stays, and an input that is encoded already ("refs%2Fpr%2F1") is kept as typed.
std::string encodePath(std::string_view s)
{
    return percentEncoded(s, "-._~/%+=@,:");
}

}  // namespace

std::string percentEncoded(std::string_view s, std::string_view kept)
{
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    for (const char ch : s) {
        const auto u = static_cast<unsigned char>(ch);
        if (std::isalnum(u) != 0 || kept.find(ch) != std::string_view::npos) {
            out += ch;
        } else {
            out += '%';
            out += kHex[u >> 4U];
            out += kHex[u & 15U];
        }
    }
    return out;
}

bool isRemote(std::string_view input)
{
    auto lower = [](std::string_view s) {
        std::string l(s.substr(0, std::min<std::size_t>(s.size(), 8)));
        std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
        return l;
    };
    const std::string head = lower(input);
    return std::any_of(kRemotePrefixes.begin(), kRemotePrefixes.end(),
                       [&](std::string_view prefix) { return head.starts_with(prefix); });
}

std::string hubEndpoint()
{
    const char* env = std::getenv("HF_ENDPOINT");  // NOLINT(concurrency-mt-unsafe): read before any thread starts
    std::string e = env != nullptr && *env != '\0' ? env : "https://huggingface.co";
    while (e.ends_with('/')) {
        e.pop_back();
    }
    return e;
}

std::string encodedName(std::string_view path)
{
    return percentEncoded(path, "-._~/");
}

std::string resolveUrl(const std::string& endpoint, const std::string& repo, const std::string& revision,
                       const std::string& path)
{
    std::string rev = revision;
    // A branch such as refs/pr/1 is one path segment in the resolve URL, as huggingface_hub sends it.
    for (std::size_t at = 0; (at = rev.find('/', at)) != std::string::npos;) {
        rev.replace(at, 1, "%2F");
    }
    return endpoint + "/" + encodePath(repo) + "/resolve/" + encodePath(rev) + "/" + encodePath(path);
}

Expected<Location> parseLocation(std::string_view input, const std::string& endpoint)
{
    Location loc;
    loc.input = std::string(input);
    if (!input.starts_with(kHub)) {
        if (!isRemote(input)) {
            return usage(input, "is not a URL (http://, https://, hf:// or s3://)");
        }
        const auto hostStart = input.find("://") + 3;
        if (hostStart >= input.size() || input[hostStart] == '/') {
            return usage(input, "names no host");
        }
        loc.url = std::string(input);
        return loc;
    }
    std::string_view rest = input.substr(kHub.size());
    const auto firstSlash = rest.find('/');
    if (firstSlash == std::string_view::npos || firstSlash == 0) {
        return usage(input, "a Hub location is hf://ORG/REPO[@REVISION][/PATH] (e.g. hf://openai-community/gpt2/"
                            "model.safetensors)");
    }
    const auto secondSlash = rest.find('/', firstSlash + 1);
    std::string_view repoPart = rest.substr(0, secondSlash);
    std::string_view path = secondSlash == std::string_view::npos ? std::string_view() : rest.substr(secondSlash + 1);
    std::string revision = "main";
    if (const auto at = repoPart.find('@'); at != std::string_view::npos) {
        revision = std::string(repoPart.substr(at + 1));
        repoPart = repoPart.substr(0, at);
        if (revision.empty()) {
            return usage(input, "names an empty revision after '@'");
        }
    }
    if (repoPart.size() <= firstSlash + 1) {
        return usage(input, "a Hub location is hf://ORG/REPO[@REVISION][/PATH]: the repository name is missing");
    }
    while (path.ends_with('/')) {
        path.remove_suffix(1);
    }
    loc.endpoint = endpoint;
    loc.repo = std::string(repoPart);
    loc.revision = revision;
    loc.path = std::string(path);
    loc.scheme = path.empty() ? Scheme::HubRepo : Scheme::HubFile;
    if (loc.scheme == Scheme::HubFile) {
        loc.url = resolveUrl(endpoint, loc.repo, loc.revision, loc.path);
    }
    return loc;
}

std::string originOf(std::string_view url)
{
    const auto scheme = url.find("://");
    if (scheme == std::string_view::npos) {
        return {};
    }
    const auto end = url.find_first_of("/?#", scheme + 3);
    std::string origin(url.substr(0, end));
    // user:password@ is part of the authority, not of the host credentials are scoped to.
    if (const auto at = origin.rfind('@'); at != std::string::npos && at > scheme) {
        origin.erase(scheme + 3, at - scheme - 2);
    }
    std::transform(origin.begin(), origin.end(), origin.begin(), [](unsigned char c) { return std::tolower(c); });
    return origin;
}

std::string fileNameOf(std::string_view url)
{
    const auto scheme = url.find("://");
    std::string_view path = url.substr(scheme == std::string_view::npos ? 0 : scheme + 3);
    path = path.substr(0, path.find_first_of("?#"));
    const auto slash = path.rfind('/');
    return std::string(slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1));
}

}  // namespace ckpt::remote
