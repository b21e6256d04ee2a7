// S3 and S3-compatible object stores (MinIO, Ceph, R2, moto): `s3://BUCKET/KEY` as a URL, and
// the credentials, region and endpoint found as the AWS CLI and boto3 find them, with no
// configuration of ckptscope's own:
//   - credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN), else the
//     profile (AWS_PROFILE, else "default") in the shared credentials file
//     (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials), else in the config file
//     (AWS_CONFIG_FILE, else ~/.aws/config); none with --no-sign-request (public buckets);
//   - region: AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, else us-east-1;
//   - endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's `endpoint_url` (its `s3 =`
//     section's first), unless AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is true; else AWS's own;
//   - addressing: the profile's `s3 = addressing_style` (path, virtual, auto); auto is what the S3
//     endpoint rules give: path-style for an endpoint that is an IP address or for a bucket name
//     no host can carry, virtual-hosted (BUCKET.HOST) otherwise.
// A profile whose credentials come from a process, SSO or an assumed role is named in the error:
// ckptscope runs nothing (`aws configure export-credentials --format env` gives them to it).
#pragma once

#include "remote/credentials.h"
#include "util/error.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ckpt::remote::s3 {

inline constexpr std::string_view kScheme = "s3://";

struct ObjectName {
    std::string bucket;
    std::string key;  // empty or ending in '/': a prefix (a folder)
    [[nodiscard]] bool isPrefix() const { return key.empty() || key.ends_with('/'); }
};

// "s3://BUCKET/KEY"; a Usage error that says what is expected otherwise.
[[nodiscard]] Expected<ObjectName> parseName(std::string_view input);

struct Settings {
    std::string endpoint;  // scheme://host[:port], no trailing '/'
    bool customEndpoint = false;
    enum class Addressing : std::uint8_t { Auto, Path, Virtual } addressing = Addressing::Auto;
    std::string region = "us-east-1";
    std::string regionSource;  // "AWS_REGION", "profile 'x' in ~/.aws/config", "the default"
    bool sign = true;
    std::string accessKeyId;
    std::string secretAccessKey;
    std::string sessionToken;
    std::string credentialSource;  // where the key was found, as a 403 names it
};

// What the environment and the AWS files say (see above). `noSignRequest`: --no-sign-request.
[[nodiscard]] Expected<Settings> findSettings(bool noSignRequest);

// The bucket's URL, ending in '/' (path-style: ENDPOINT/BUCKET/, virtual-hosted: BUCKET.HOST/).
[[nodiscard]] std::string bucketUrl(const Settings& settings, const std::string& bucket);
// The object's URL: bucketUrl + the key, every byte but the unreserved ones and '/' encoded.
[[nodiscard]] std::string objectUrl(const Settings& settings, const ObjectName& name);

// Signs each request to the bucket's origin with Signature Version 4 (sigv4.h) at the time it is
// sent; `now` is the clock (the tests' fixed one).
class Signer final : public RequestSigner {
public:
    Signer(Settings settings, std::string origin,
           std::function<std::chrono::system_clock::time_point()> now = std::chrono::system_clock::now);
    [[nodiscard]] bool signs(const std::string& origin) const override { return origin == origin_; }
    [[nodiscard]] std::vector<std::string> headersFor(const std::string& method, const std::string& url,
                                                      const std::string& payloadHash) const override;
    [[nodiscard]] std::string refusedNote() const override;

private:
    Settings settings_;
    std::string origin_;
    std::function<std::chrono::system_clock::time_point()> now_;
};

// What a client needs to send requests to `bucket` signed (the Signer, for its origin) with the
// secrets given to its redactor.
[[nodiscard]] Credentials credentialsFor(const Settings& settings, const std::string& bucket);

// What a refused request says about the credentials sent (or not): "(signed with the key from
// AWS_ACCESS_KEY_ID, region us-east-1 from AWS_REGION)".
[[nodiscard]] std::string credentialNote(const Settings& settings);

}  // namespace ckpt::remote::s3
