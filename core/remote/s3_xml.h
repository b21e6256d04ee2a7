// What an S3 server's XML replies say, parsed with expat (libexpat1-dev) and without a connection,
// so the parsers are fuzzed alone (tests/fuzz/fuzz_s3_xml.cpp): an error reply's Code, Message and
// Region, a ListObjectsV2 page, and a multipart upload's replies (its UploadId, its completion);
// and the one document ckptscope sends (CompleteMultipartUpload). A reply with a DOCTYPE (entities: the billion
// laughs), nesting deeper than kMaxDepth, or larger than the caller's bound is refused, never expanded.
#pragma once

#include "util/error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::remote::s3 {

inline constexpr int kMaxDepth = 16;

struct ErrorReply {
    std::string code;      // AccessDenied, ExpiredToken, SlowDown, PermanentRedirect...
    std::string message;   // the server's sentence
    std::string region;    // a redirect's or a wrong region's <Region>, when it names one
    std::string endpoint;  // a PermanentRedirect's <Endpoint>
};

// An <Error> document's fields; none when `body` is no such document.
[[nodiscard]] std::optional<ErrorReply> parseErrorReply(std::string_view body);

struct ListedObject {
    std::string key;
    std::uint64_t size = 0;
};

struct ListPage {
    std::vector<ListedObject> objects;
    std::vector<std::string> commonPrefixes;  // with a delimiter: the sub-folders
    bool truncated = false;
    std::string nextToken;  // NextContinuationToken, when truncated
};

// One <ListBucketResult> page of ListObjectsV2. Corrupt when it is not one, or a truncated page
// gives no continuation token (a listing that could never end).
[[nodiscard]] Expected<ListPage> parseListPage(std::string_view body);

// CreateMultipartUpload's <InitiateMultipartUploadResult>: its UploadId. Corrupt when the reply is
// none (an <Error> says its code) or gives no UploadId.
[[nodiscard]] Expected<std::string> parseInitiateReply(std::string_view body);

// CompleteMultipartUpload's answer, which S3 gives with 200 before it knows whether the upload
// completes (and may send spaces meanwhile): a <CompleteMultipartUploadResult> completed; an
// <Error> (InternalError, InvalidPart, ...) is a failure whatever the status said, WriteFailed with
// its code; anything else is Corrupt.
[[nodiscard]] Expected<void> parseCompleteReply(std::string_view body);

struct UploadedPart {
    int number = 0;    // 1..10000
    std::string etag;  // as UploadPart's ETag header gave it, quotes included
};
// The <CompleteMultipartUpload> document listing `parts` in order, text escaped.
[[nodiscard]] std::string completeBody(const std::vector<UploadedPart>& parts);

}  // namespace ckpt::remote::s3
