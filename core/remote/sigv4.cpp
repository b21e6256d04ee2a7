#include "remote/sigv4.h"

#include "remote/location.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <ctime>
#include <map>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <utility>

namespace ckpt::remote::sigv4 {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";

std::string hex(const unsigned char* p, std::size_t n)
{
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(n * 2);
    for (std::size_t i = 0; i < n; ++i) {
        out += kHex[p[i] >> 4U];  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
        out += kHex[p[i] & 15U];  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic)
    }
    return out;
}

using Digest = std::array<unsigned char, 32>;

Digest hmac(std::string_view key, std::string_view data)
{
    Digest out{};
    unsigned int len = 0;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): OpenSSL's unsigned char buffers
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
         data.size(), out.data(), &len);
    return out;
}

std::string_view asText(const Digest& d)
{
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the digest as the next key
    return {reinterpret_cast<const char*>(d.data()), d.size()};
}

int hexValue(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    const int l = std::tolower(static_cast<unsigned char>(c));
    return l >= 'a' && l <= 'f' ? l - 'a' + 10 : -1;
}

// %XX decoded; a '%' not followed by two hex digits stays as it is.
std::string percentDecoded(std::string_view s)
{
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size()) {
            const int hi = hexValue(s[i + 1]);
            const int lo = hexValue(s[i + 2]);
            if (hi >= 0 && lo >= 0) {
                out += static_cast<char>(hi * 16 + lo);
                i += 2;
                continue;
            }
        }
        out += s[i];
    }
    return out;
}

std::string trimmedValue(std::string_view v)
{
    std::string out;
    bool space = false;
    for (const char c : v) {
        if (c == ' ' || c == '\t') {
            space = !out.empty();
            continue;
        }
        if (space) {
            out += ' ';
            space = false;
        }
        out += c;
    }
    return out;
}

struct UrlParts {
    std::string_view path;
    std::string_view query;
};

UrlParts partsOf(std::string_view url)
{
    const auto scheme = url.find("://");
    std::string_view rest = scheme == std::string_view::npos ? url : url.substr(scheme + 3);
    rest = rest.substr(0, rest.find('#'));
    const auto pathStart = rest.find_first_of("/?");
    if (pathStart == std::string_view::npos) {
        return {"/", {}};
    }
    rest = rest.substr(pathStart);
    const auto q = rest.find('?');
    UrlParts p{rest.substr(0, q), q == std::string_view::npos ? std::string_view() : rest.substr(q + 1)};
    if (p.path.empty()) {
        p.path = "/";
    }
    return p;
}

std::string canonicalQuery(std::string_view query)
{
    std::vector<std::pair<std::string, std::string>> params;
    while (!query.empty()) {
        const auto amp = query.find('&');
        const std::string_view part = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        if (part.empty()) {
            continue;
        }
        const auto eq = part.find('=');
        params.emplace_back(uriEncode(percentDecoded(part.substr(0, eq)), false),
                            eq == std::string_view::npos ? std::string()
                                                         : uriEncode(percentDecoded(part.substr(eq + 1)), false));
    }
    std::sort(params.begin(), params.end());
    std::string out;
    for (const auto& [name, value] : params) {
        out += (out.empty() ? "" : "&") + name + "=" + value;
    }
    return out;
}

}  // namespace

std::string uriEncode(std::string_view s, bool keepSlash)
{
    return percentEncoded(s, keepSlash ? "-._~/" : "-._~");
}

std::string sha256Hex(std::string_view data)
{
    Digest d{};
    unsigned int len = 0;
    EVP_Digest(data.data(), data.size(), d.data(), &len, EVP_sha256(), nullptr);
    return hex(d.data(), d.size());
}

std::string amzDate(std::chrono::system_clock::time_point t)
{
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    std::array<char, 20> buf{};
    const std::size_t n = std::strftime(buf.data(), buf.size(), "%Y%m%dT%H%M%SZ", &tm);
    return {buf.data(), n};
}

Signature sign(const Request& request, const Key& key, const std::string& amzDate, const std::string& region,
               const std::string& service)
{
    Signature s;
    const UrlParts parts = partsOf(request.url);
    // Lowercased names, each once (repeated headers' values joined by ','), in order.
    std::map<std::string, std::string> headers;
    for (const auto& h : request.headers) {
        std::string name = h.name;
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        auto [it, fresh] = headers.emplace(name, trimmedValue(h.value));
        if (!fresh) {
            it->second += "," + trimmedValue(h.value);
        }
    }
    std::string canonicalHeaders;
    for (const auto& [name, value] : headers) {
        canonicalHeaders += name + ":" + value + "\n";
        s.signedHeaders += (s.signedHeaders.empty() ? "" : ";") + name;
    }
    s.canonicalRequest = request.method + "\n" + uriEncode(percentDecoded(parts.path), true) + "\n" +
                         canonicalQuery(parts.query) + "\n" + canonicalHeaders + "\n" + s.signedHeaders + "\n" +
                         request.payloadHash;
    const std::string date = amzDate.substr(0, 8);
    const std::string scope = date + "/" + region + "/" + service + "/aws4_request";
    s.stringToSign = std::string(kAlgorithm) + "\n" + amzDate + "\n" + scope + "\n" + sha256Hex(s.canonicalRequest);
    const Digest kDate = hmac("AWS4" + key.secretAccessKey, date);
    const Digest kRegion = hmac(asText(kDate), region);
    const Digest kService = hmac(asText(kRegion), service);
    const Digest kSigning = hmac(asText(kService), "aws4_request");
    const Digest sig = hmac(asText(kSigning), s.stringToSign);
    s.signature = hex(sig.data(), sig.size());
    s.authorization = std::string(kAlgorithm) + " Credential=" + key.accessKeyId + "/" + scope +
                      ", SignedHeaders=" + s.signedHeaders + ", Signature=" + s.signature;
    return s;
}

}  // namespace ckpt::remote::sigv4
