#include "remote/credentials.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ckpt::remote {
namespace {

std::string trimmed(std::string s)
{
    const auto notSpace = [](unsigned char c) { return std::isspace(c) == 0; };
    s.erase(s.begin(), std::find_if(s.begin(), s.end(), notSpace));
    s.erase(std::find_if(s.rbegin(), s.rend(), notSpace).base(), s.end());
    return s;
}

std::string env(const char* name)
{
    const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read before any thread starts
    return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

Expected<Header> parseHeader(std::string_view text)
{
    const auto colon = text.find(':');
    if (colon == std::string_view::npos || colon == 0) {
        return makeError(ErrorCode::Usage, "--header takes 'Name: value' (e.g. 'Authorization: Bearer TOKEN')");
    }
    Header h{trimmed(std::string(text.substr(0, colon))), trimmed(std::string(text.substr(colon + 1)))};
    const bool token = std::all_of(h.name.begin(), h.name.end(),
                                   [](unsigned char c) { return std::isalnum(c) != 0 || c == '-' || c == '_'; });
    if (h.name.empty() || !token || h.value.find_first_of("\r\n") != std::string::npos) {
        return makeError(ErrorCode::Usage, "--header takes 'Name: value' on one line");
    }
    return h;
}

std::optional<std::string> findHubToken()
{
    if (auto t = trimmed(env("HF_TOKEN")); !t.empty()) {
        return t;
    }
    std::string home = env("HF_HOME");
    if (home.empty()) {
        const std::string cache = env("XDG_CACHE_HOME");
        home = (cache.empty() ? env("HOME") + "/.cache" : cache) + "/huggingface";
    }
    std::ifstream in(home + "/token");
    if (!in) {
        return std::nullopt;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    auto t = trimmed(ss.str());
    return t.empty() ? std::nullopt : std::optional(t);
}

void Redactor::add(std::string secret)
{
    // A secret that short would blank ordinary words; none that short is a credential.
    constexpr std::size_t kShortest = 4;
    if (secret.size() >= kShortest && std::find(secrets_.begin(), secrets_.end(), secret) == secrets_.end()) {
        secrets_.push_back(std::move(secret));
    }
}

std::string Redactor::apply(std::string text) const
{
    for (const auto& s : secrets_) {
        for (std::size_t at = 0; (at = text.find(s, at)) != std::string::npos;) {
            text.replace(at, s.size(), "***");
            at += 3;
        }
    }
    return text;
}

std::vector<std::string> Credentials::headersFor(const std::string& origin) const
{
    std::vector<std::string> out;
    const bool named = std::find(headerOrigins.begin(), headerOrigins.end(), origin) != headerOrigins.end();
    bool authorization = false;
    if (named) {
        for (const auto& h : headers) {
            out.push_back(h.name + ": " + h.value);
            std::string lower = h.name;
            std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
            authorization = authorization || lower == "authorization";
        }
    }
    if (hubToken && origin == hubOrigin && !authorization) {
        out.push_back("Authorization: Bearer " + *hubToken);
    }
    return out;
}

}  // namespace ckpt::remote
