// Credentials as the Hugging Face ecosystem keeps them, and the one place that keeps them out of
// every message: HF_TOKEN, else the token file `huggingface-cli login` writes ($HF_HOME/token,
// default ~/.cache/huggingface/token), sent to the Hub endpoint only; headers from --header
// ("Authorization: Bearer ...") sent to the hosts the user named only. A redirect to another host
// (the Hub's CDN) gets neither.
#pragma once

#include "util/error.h"

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

struct Credentials {
    std::string hubOrigin;                // scheme://host[:port] of $HF_ENDPOINT
    std::optional<std::string> hubToken;  // for hubOrigin only
    std::vector<Header> headers;          // --header, for `headerOrigins` only
    std::vector<std::string> headerOrigins;
    Redactor redactor;  // knows every secret above

    // What is sent to `origin`, as "Name: value" lines.
    [[nodiscard]] std::vector<std::string> headersFor(const std::string& origin) const;
};

}  // namespace ckpt::remote
