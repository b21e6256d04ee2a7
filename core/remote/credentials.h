// Credentials as the Hugging Face ecosystem keeps them, and the one place that keeps them out of
// every message: HF_TOKEN, else the token file `huggingface-cli login` writes ($HF_HOME/token,
// default ~/.cache/huggingface/token), sent to the Hub endpoint only; headers from --header
// ("Authorization: Bearer ...") sent to the hosts the user named only. A redirect to another host
// (the Hub's CDN) gets neither.
#pragma once

#include "util/error.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt::remote {

struct Header {
    std::string name;
    std::string value;
};

// "Name: value", as curl -H takes it; a Usage error otherwise.
[[nodiscard]] Expected<Header> parseHeader(std::string_view text);

// HF_TOKEN, else the login token file; nothing when neither holds one.
[[nodiscard]] std::optional<std::string> findHubToken();

// Replaces every secret it was given by "***" in a text (messages, error lines, URLs).
class Redactor {
public:
    void add(std::string secret);
    [[nodiscard]] std::string apply(std::string text) const;

private:
    std::vector<std::string> secrets_;
};

// The methods of the client's requests: reads, and an S3 upload's (s3_upload.h).
inline constexpr std::string_view kMethodGet = "GET";
inline constexpr std::string_view kMethodHead = "HEAD";
inline constexpr std::string_view kMethodPut = "PUT";
inline constexpr std::string_view kMethodPost = "POST";
inline constexpr std::string_view kMethodDelete = "DELETE";

// Headers computed for each request from its method and URL at the time it is sent: S3's
// Signature Version 4 (s3.h). Sent to the origins it signs for only, so a redirect elsewhere
// carries no signature.
class RequestSigner {
public:
    RequestSigner() = default;
    RequestSigner(const RequestSigner&) = delete;
    RequestSigner& operator=(const RequestSigner&) = delete;
    RequestSigner(RequestSigner&&) = delete;
    RequestSigner& operator=(RequestSigner&&) = delete;
    virtual ~RequestSigner() = default;
    [[nodiscard]] virtual bool signs(const std::string& origin) const = 0;
    // "Name: value" lines; `payloadHash` is the body's hex SHA-256 (or UNSIGNED-PAYLOAD).
    [[nodiscard]] virtual std::vector<std::string> headersFor(const std::string& method, const std::string& url,
                                                              const std::string& payloadHash) const = 0;
    // What a 401/403 from a signed origin adds to its message: which credentials were used.
    [[nodiscard]] virtual std::string refusedNote() const = 0;
};

struct Credentials {
    std::string hubOrigin;                // scheme://host[:port] of $HF_ENDPOINT
    std::optional<std::string> hubToken;  // for hubOrigin only
    std::vector<Header> headers;          // --header, for `headerOrigins` only
    std::vector<std::string> headerOrigins;
    std::shared_ptr<const RequestSigner> signer;  // s3:// inputs
    Redactor redactor;                            // knows every secret above

    // What is sent to `origin`, as "Name: value" lines.
    [[nodiscard]] std::vector<std::string> headersFor(const std::string& origin) const;
};

}  // namespace ckpt::remote
