// AWS Signature Version 4 (the scheme S3 and every S3-compatible store take), alone and without a
// connection, so it is checked against AWS's published vectors (tests/remote/tst_sigv4.cpp).
//
// A request is signed as S3 expects: its URL's path is the canonical URI as it is (S3 neither
// normalises dot segments nor double-encodes; the path is percent-decoded and encoded again with
// the unreserved set, so a typed and an encoded form sign alike), its query's parameters are
// decoded, encoded the same way and sorted, and every header given is signed (names lowercased,
// values trimmed and inner runs of spaces made one). SHA-256 and HMAC are OpenSSL's libcrypto,
// which libcurl already loads.
#pragma once

#include "remote/credentials.h"

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::remote::sigv4 {

// The SHA-256 of no bytes: the payload hash of a GET.
inline constexpr std::string_view kEmptyPayloadHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct Request {
    std::string method;           // GET, PUT, POST, DELETE
    std::string url;              // scheme://host[:port]/path[?query]
    std::vector<Header> headers;  // every header to sign, host and x-amz-date among them
    std::string payloadHash;      // hex SHA-256 of the body, or UNSIGNED-PAYLOAD
};

struct Key {
    std::string accessKeyId;
    std::string secretAccessKey;
};

// Each stage's text, for the vectors that publish them; `authorization` is the header's value.
struct Signature {
    std::string canonicalRequest;
    std::string stringToSign;
    std::string signedHeaders;
    std::string signature;
    std::string authorization;
};

// Signs `request` at `amzDate` (YYYYMMDDTHHMMSSZ) for `region` and `service` ("s3").
[[nodiscard]] Signature sign(const Request& request, const Key& key, const std::string& amzDate,
                             const std::string& region, const std::string& service);

// `s` with every byte but A-Z a-z 0-9 - . _ ~ (and '/' when `keepSlash`) as %XX, upper-case hex:
// the encoding SigV4 and S3's object keys use.
[[nodiscard]] std::string uriEncode(std::string_view s, bool keepSlash);

// `t` as x-amz-date writes it: YYYYMMDDTHHMMSSZ in UTC.
[[nodiscard]] std::string amzDate(std::chrono::system_clock::time_point t);

[[nodiscard]] std::string sha256Hex(std::string_view data);

}  // namespace ckpt::remote::sigv4
