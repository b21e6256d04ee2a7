// libFuzzer entry for S3's XML replies (core/remote/s3_xml.h): any bytes as a ListObjectsV2 page,
// an error document, and a multipart upload's CreateMultipartUpload and CompleteMultipartUpload
// replies must parse or be refused, never a crash, a hang, an entity expanded or a sanitizer report
// (DOCTYPEs, deep nesting, floods of keys, sizes that are no number).
#include "remote/s3_xml.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the input as text
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    if (auto page = ckpt::remote::s3::parseListPage(text)) {
        std::size_t n = page->objects.size() + page->commonPrefixes.size();
        for (const auto& o : page->objects) {
            n += o.key.size() + static_cast<std::size_t>(o.size & 1U);
        }
        // A truncated page always gives a token to go on from.
        if (page->truncated && page->nextToken.empty()) {
            __builtin_trap();
        }
        static_cast<void>(n);
    }
    if (auto e = ckpt::remote::s3::parseErrorReply(text)) {
        if (e->code.empty()) {
            __builtin_trap();
        }
    }
    if (auto id = ckpt::remote::s3::parseInitiateReply(text)) {
        if (id->empty()) {
            __builtin_trap();
        }
    }
    // A completion is an answer only as <CompleteMultipartUploadResult>: never an <Error> document.
    if (ckpt::remote::s3::parseCompleteReply(text) && ckpt::remote::s3::parseErrorReply(text)) {
        __builtin_trap();
    }
    return 0;
}
