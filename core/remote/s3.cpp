#include "remote/s3.h"

#include "remote/location.h"
#include "remote/sigv4.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

namespace ckpt::remote::s3 {
namespace {

std::string env(const char* name)
{
    const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read before any thread starts
    return v == nullptr ? std::string() : std::string(v);
}

std::string trimmed(std::string_view s)
{
    const auto first = s.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) {
        return {};
    }
    return std::string(s.substr(first, s.find_last_not_of(" \t\r") - first + 1));
}

std::string lowered(std::string s)
{
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

// One section of an AWS INI file: its `key = value` lines, and a nested block's
// (`s3 =` then indented lines) as "s3.key".
using Section = std::map<std::string, std::string>;

// The section `wanted` of the INI file at `path` (as botocore reads it: '#' and ';' start comments,
// an indented line after `name =` belongs to that nested block); none when the file or the section
// is missing.
std::optional<Section> readSection(const std::string& path, const std::string& wanted)
{
    std::ifstream in(path);
    if (!in) {
        return std::nullopt;
    }
    std::optional<Section> out;
    bool inside = false;
    std::string nested;
    std::string line;
    constexpr std::size_t kLongestLine = 64 << 10;  // a file of no lines is no config
    while (std::getline(in, line)) {
        if (line.size() > kLongestLine) {
            continue;
        }
        const std::string t = trimmed(line);
        if (t.empty() || t[0] == '#' || t[0] == ';') {
            continue;
        }
        if (t.front() == '[' && t.back() == ']') {
            inside = trimmed(t.substr(1, t.size() - 2)) == wanted;
            nested.clear();
            if (inside && !out) {
                out = Section();
            }
            continue;
        }
        if (!inside) {
            continue;
        }
        const auto eq = t.find('=');
        if (eq == std::string::npos) {
            continue;
        }
        const std::string name = lowered(trimmed(t.substr(0, eq)));
        const std::string value = trimmed(t.substr(eq + 1));
        const bool indented = line[0] == ' ' || line[0] == '\t';
        if (indented && !nested.empty()) {
            (*out)[nested + "." + name] = value;
        } else if (value.empty()) {
            nested = name;
        } else {
            nested.clear();
            (*out)[name] = value;
        }
    }
    return out;
}

std::string homePath(const char* variable, const std::string& underHome)
{
    std::string p = env(variable);
    if (p.empty()) {
        return env("HOME") + "/" + underHome;
    }
    if (p.starts_with("~/")) {
        p = env("HOME") + p.substr(1);
    }
    return p;
}

// How a file is named in messages: as ~/.aws/... when it is the default one.
std::string shownPath(const std::string& path, const std::string& underHome)
{
    return path == env("HOME") + "/" + underHome ? "~/" + underHome : path;
}

bool isIpAddress(const std::string& host)
{
    std::array<unsigned char, 16> buf{};
    std::string h = host;
    if (h.starts_with('[') && h.ends_with(']')) {
        h = h.substr(1, h.size() - 2);
    }
    return inet_pton(AF_INET, h.c_str(), buf.data()) == 1 || inet_pton(AF_INET6, h.c_str(), buf.data()) == 1;
}

// Whether a bucket name can be a host name's first label, as the S3 endpoint rules decide
// (isVirtualHostableS3Bucket): 3-63 lower-case letters, digits, '-' (and '.' over plain HTTP only,
// where no certificate has to match), not shaped like an IP address.
bool virtualHostable(const std::string& bucket, bool https)
{
    if (bucket.size() < 3 || bucket.size() > 63 || isIpAddress(bucket)) {
        return false;
    }
    const auto ok = [&](unsigned char c) {
        return std::islower(c) != 0 || std::isdigit(c) != 0 || c == '-' || (!https && c == '.');
    };
    return std::all_of(bucket.begin(), bucket.end(), ok) && bucket.front() != '-' && bucket.back() != '-';
}

struct Endpoint {
    std::string scheme;     // "https://"
    std::string authority;  // host[:port]
    std::string host;
};

Endpoint split(const std::string& endpoint)
{
    Endpoint e;
    const auto s = endpoint.find("://");
    e.scheme = endpoint.substr(0, s + 3);
    e.authority = endpoint.substr(s + 3);
    e.host = e.authority;
    if (e.host.starts_with('[')) {
        e.host = e.host.substr(0, e.host.find(']') + 1);
    } else if (const auto colon = e.host.rfind(':'); colon != std::string::npos) {
        e.host = e.host.substr(0, colon);
    }
    return e;
}

bool virtualHosted(const Settings& s, const std::string& bucket)
{
    const Endpoint e = split(s.endpoint);
    const bool hostable = virtualHostable(bucket, e.scheme == "https://");
    switch (s.addressing) {
    case Settings::Addressing::Path:
        return false;
    case Settings::Addressing::Virtual:
        return hostable;
    case Settings::Addressing::Auto:
        break;
    }
    return hostable && !isIpAddress(e.host);
}

Error usage(std::string_view input, std::string message)
{
    Error e = makeError(ErrorCode::Usage, std::move(message));
    e.path = std::string(input);
    return e;
}

}  // namespace

Expected<ObjectName> parseName(std::string_view input)
{
    if (!input.starts_with(kScheme)) {
        return usage(input, "is not an s3:// location");
    }
    const std::string_view rest = input.substr(kScheme.size());
    const auto slash = rest.find('/');
    ObjectName n;
    n.bucket = std::string(rest.substr(0, slash));
    n.key = slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash + 1));
    const bool bucketChars = std::all_of(n.bucket.begin(), n.bucket.end(), [](unsigned char c) {
        return std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_';
    });
    if (n.bucket.empty() || !bucketChars) {
        return usage(input, "an object store location is s3://BUCKET/KEY, or s3://BUCKET/PREFIX/ for a folder");
    }
    if (n.key.find('\0') != std::string::npos || n.key.starts_with('/')) {
        return usage(input, "names a key that starts with '/' or holds a NUL byte");
    }
    return n;
}

Expected<Settings> findSettings(bool noSignRequest)
{
    Settings s;
    const std::string profile = env("AWS_PROFILE").empty() ? "default" : env("AWS_PROFILE");
    const std::string configPath = homePath("AWS_CONFIG_FILE", ".aws/config");
    const std::string credentialsPath = homePath("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    const std::string configShown = shownPath(configPath, ".aws/config");
    const std::string credentialsShown = shownPath(credentialsPath, ".aws/credentials");
    const auto config = readSection(configPath, profile == "default" ? "default" : "profile " + profile);
    const auto credentials = readSection(credentialsPath, profile);
    if (!env("AWS_PROFILE").empty() && !config && !credentials) {
        return makeError(ErrorCode::Usage, "AWS_PROFILE names the profile '" + profile + "', which neither " +
                                               credentialsShown + " nor " + configShown + " holds");
    }
    const auto fromConfig = [&](const std::string& key) {
        if (!config) {
            return std::string();
        }
        auto it = config->find(key);
        return it == config->end() ? std::string() : it->second;
    };
    const std::string inConfig = "profile '" + profile + "' in " + configShown;

    // Region.
    if (!env("AWS_REGION").empty()) {
        s.region = env("AWS_REGION");
        s.regionSource = "AWS_REGION";
    } else if (!env("AWS_DEFAULT_REGION").empty()) {
        s.region = env("AWS_DEFAULT_REGION");
        s.regionSource = "AWS_DEFAULT_REGION";
    } else if (!fromConfig("region").empty()) {
        s.region = fromConfig("region");
        s.regionSource = inConfig;
    } else {
        s.regionSource = "the default";
    }

    // Endpoint.
    const bool ignoreConfigured = lowered(env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")) == "true";
    for (const std::string& candidate :
         ignoreConfigured ? std::vector<std::string>{}
                          : std::vector<std::string>{env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL"),
                                                     fromConfig("s3.endpoint_url"), fromConfig("endpoint_url")}) {
        if (!candidate.empty()) {
            s.endpoint = candidate;
            s.customEndpoint = true;
            break;
        }
    }
    if (s.customEndpoint) {
        while (s.endpoint.ends_with('/')) {
            s.endpoint.pop_back();
        }
        const std::string l = lowered(s.endpoint);
        const auto hostStart = s.endpoint.find("://");
        if ((!l.starts_with("http://") && !l.starts_with("https://")) || hostStart + 3 >= s.endpoint.size() ||
            s.endpoint.find_first_of("/?#", hostStart + 3) != std::string::npos) {
            return makeError(ErrorCode::Usage, "the S3 endpoint '" + s.endpoint +
                                                   "' is not http(s)://HOST[:PORT] (AWS_ENDPOINT_URL_S3, "
                                                   "AWS_ENDPOINT_URL or endpoint_url)");
        }
    } else {
        s.endpoint = "https://s3." + s.region + ".amazonaws.com";
    }
    const std::string style = lowered(fromConfig("s3.addressing_style"));
    s.addressing = style == "path"      ? Settings::Addressing::Path
                   : style == "virtual" ? Settings::Addressing::Virtual
                                        : Settings::Addressing::Auto;

    // Credentials.
    if (noSignRequest) {
        s.sign = false;
        s.credentialSource = "--no-sign-request";
        return s;
    }
    if (!env("AWS_ACCESS_KEY_ID").empty() || !env("AWS_SECRET_ACCESS_KEY").empty()) {
        s.accessKeyId = env("AWS_ACCESS_KEY_ID");
        s.secretAccessKey = env("AWS_SECRET_ACCESS_KEY");
        s.sessionToken = env("AWS_SESSION_TOKEN").empty() ? env("AWS_SECURITY_TOKEN") : env("AWS_SESSION_TOKEN");
        s.credentialSource = "AWS_ACCESS_KEY_ID";
        if (s.accessKeyId.empty() || s.secretAccessKey.empty()) {
            return makeError(ErrorCode::Usage,
                             std::string("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together: ") +
                                 (s.accessKeyId.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") +
                                 " is not set");
        }
        return s;
    }
    for (const auto& file : {std::pair{credentials, credentialsShown}, std::pair{config, configShown}}) {
        const std::optional<Section>& section = file.first;
        const std::string& shown = file.second;
        if (!section) {
            continue;
        }
        auto get = [&section](const std::string& key) {
            auto it = section->find(key);
            return it == section->end() ? std::string() : it->second;
        };
        if (!get("aws_access_key_id").empty() && !get("aws_secret_access_key").empty()) {
            s.accessKeyId = get("aws_access_key_id");
            s.secretAccessKey = get("aws_secret_access_key");
            s.sessionToken = get("aws_session_token");
            s.credentialSource = "profile '" + profile + "' in " + shown;
            return s;
        }
    }
    for (const char* elsewhere :
         {"credential_process", "sso_session", "sso_start_url", "role_arn", "web_identity_token_file"}) {
        if (!fromConfig(elsewhere).empty()) {
            return makeError(ErrorCode::Usage,
                             "the AWS " + inConfig + " gets its credentials through " + elsewhere +
                                 ", which ckptscope does not run: export them first (eval \"$(aws configure "
                                 "export-credentials --profile " +
                                 profile + " --format env)\"), or pass --no-sign-request for a public bucket");
        }
    }
    return makeError(ErrorCode::Usage, "no AWS credentials found (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                                       "profile '" +
                                           profile + "' in " + credentialsShown + " or " + configShown +
                                           "); pass --no-sign-request for a public bucket");
}

std::string bucketUrl(const Settings& settings, const std::string& bucket)
{
    const Endpoint e = split(settings.endpoint);
    if (virtualHosted(settings, bucket)) {
        return e.scheme + bucket + "." + e.authority + "/";
    }
    return settings.endpoint + "/" + sigv4::uriEncode(bucket, false) + "/";
}

std::string objectUrl(const Settings& settings, const ObjectName& name)
{
    return bucketUrl(settings, name.bucket) + sigv4::uriEncode(name.key, true);
}

Credentials credentialsFor(const Settings& settings, const std::string& bucket)
{
    Credentials creds;
    creds.redactor.add(settings.secretAccessKey);
    creds.redactor.add(settings.sessionToken);
    creds.signer = std::make_shared<Signer>(settings, originOf(bucketUrl(settings, bucket)));
    return creds;
}

std::string credentialNote(const Settings& settings)
{
    if (!settings.sign) {
        return "(sent unsigned, --no-sign-request: the bucket is not public; drop the option to sign with your AWS "
               "credentials)";
    }
    // The key's last four characters, as `aws configure list` shows it: enough to tell keys apart.
    const std::string& id = settings.accessKeyId;
    std::string note = "(signed with the key ..." + id.substr(id.size() - std::min<std::size_t>(id.size(), 4)) +
                       " from " + settings.credentialSource;
    if (!settings.sessionToken.empty()) {
        note += ", with its session token (an expired one is refused too)";
    }
    return note + ", for region " + settings.region + " from " + settings.regionSource + ")";
}

Signer::Signer(Settings settings, std::string origin, std::function<std::chrono::system_clock::time_point()> now)
    : settings_(std::move(settings)), origin_(std::move(origin)), now_(std::move(now))
{
}

std::vector<std::string> Signer::headersFor(const std::string& method, const std::string& url,
                                            const std::string& payloadHash) const
{
    if (!settings_.sign) {
        return {};
    }
    const std::string date = sigv4::amzDate(now_());
    const auto scheme = url.find("://");
    const std::string authority = url.substr(scheme + 3, url.find_first_of("/?#", scheme + 3) - scheme - 3);
    // The Host header libcurl sends: the authority without a default port.
    std::string host = authority;
    if ((url.starts_with("http://") && host.ends_with(":80")) ||
        (url.starts_with("https://") && host.ends_with(":443"))) {
        host = host.substr(0, host.rfind(':'));
    }
    sigv4::Request r;
    r.method = method;
    r.url = url;
    r.payloadHash = payloadHash;
    r.headers = {{"host", host}, {"x-amz-content-sha256", payloadHash}, {"x-amz-date", date}};
    if (!settings_.sessionToken.empty()) {
        r.headers.push_back({"x-amz-security-token", settings_.sessionToken});
    }
    const auto sig = sigv4::sign(r, {settings_.accessKeyId, settings_.secretAccessKey}, date, settings_.region, "s3");
    std::vector<std::string> out{"x-amz-content-sha256: " + payloadHash, "x-amz-date: " + date,
                                 "Authorization: " + sig.authorization};
    if (!settings_.sessionToken.empty()) {
        out.push_back("x-amz-security-token: " + settings_.sessionToken);
    }
    return out;
}

std::string Signer::refusedNote() const
{
    return credentialNote(settings_);
}

}  // namespace ckpt::remote::s3
