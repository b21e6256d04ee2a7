// What a remote input names: an http(s) URL, one file of a Hugging Face Hub repository
// (`hf://ORG/REPO[@REVISION]/PATH`, the form huggingface_hub's HfFileSystem uses), or a whole
// repository (`hf://ORG/REPO[@REVISION]`). Hub forms resolve against $HF_ENDPOINT (default
// https://huggingface.co), so mirrors and the tests' loopback server work the same way.
#pragma once

#include "util/error.h"

#include <array>
#include <string>
#include <string_view>

namespace ckpt::remote {

// The prefixes that make an input remote (case-insensitive), the one list isRemote tests and the
// docs are held to (tst_docs: each --help of a command that takes them, and the man page, names each).
inline constexpr std::array<std::string_view, 4> kRemotePrefixes{"http://", "https://", "hf://", "s3://"};

enum class Scheme : std::uint8_t { Http, HubFile, HubRepo };

struct Location {
    Scheme scheme = Scheme::Http;
    std::string input;     // as typed
    std::string url;       // what is fetched: the URL itself, or the Hub's resolve URL of the file
    std::string endpoint;  // Hub forms: the endpoint, without a trailing '/'
    std::string repo;      // Hub forms: ORG/REPO
    std::string revision;  // Hub forms: "main" unless given
    std::string path;      // HubFile: the file's path in the repository
};

// Whether `input` is a remote form at all (one of kRemotePrefixes; s3:// is s3.h's): the one test every
// command makes before treating it as a path.
[[nodiscard]] bool isRemote(std::string_view input);

// $HF_ENDPOINT without its trailing '/', or https://huggingface.co.
[[nodiscard]] std::string hubEndpoint();

// Parses `input`; a malformed form is a Usage error that says what is expected.
[[nodiscard]] Expected<Location> parseLocation(std::string_view input, const std::string& endpoint = hubEndpoint());

// A path a server's reply names (a Hub listing's file, an index's member) as a URL's path: every
// byte but the unreserved ones and '/' percent-encoded, '%', '?' and '#' too, so it is the file it
// names, never a query, a fragment or an encoded '/' for the server to decode.
[[nodiscard]] std::string encodedName(std::string_view path);

// `s` with every byte but the letters, digits and `kept` as %XX (upper-case hex): the one encoder of
// URLs (encodedName, a Hub path, S3's keys and SigV4's canonical forms).
[[nodiscard]] std::string percentEncoded(std::string_view s, std::string_view kept);

// The Hub's download URL of `path` in `repo` at `revision`: ENDPOINT/REPO/resolve/REVISION/PATH.
[[nodiscard]] std::string resolveUrl(const std::string& endpoint, const std::string& repo, const std::string& revision,
                                     const std::string& path);

// "scheme://host[:port]" of a URL, lowercased: the unit credentials are scoped to.
[[nodiscard]] std::string originOf(std::string_view url);

// The last path component of a URL, without query or fragment ("model.safetensors").
[[nodiscard]] std::string fileNameOf(std::string_view url);

}  // namespace ckpt::remote
