#include "remote/s3_xml.h"

#include "remote/reply_parse.h"

#include <expat.h>
#include <functional>
#include <memory>

namespace ckpt::remote::s3 {
namespace {

// The elements a document holds, as a path of local names ("ListBucketResult/Contents/Key"), with
// each element's text handed to `onText` when it closes.
class Walk {
public:
    using OnText = std::function<void(const std::string& path, const std::string& text)>;
    using OnClose = std::function<void(const std::string& path)>;

    Walk(OnText onText, OnClose onClose) : onText_(std::move(onText)), onClose_(std::move(onClose)) {}

    // Whether `body` is a well-formed document this walk could read (no DOCTYPE, not too deep).
    [[nodiscard]] bool run(std::string_view body)
    {
        const std::unique_ptr<XML_ParserStruct, decltype(&XML_ParserFree)> parser(XML_ParserCreate("UTF-8"),
                                                                                  &XML_ParserFree);
        if (!parser) {
            return false;
        }
        parser_ = parser.get();
        XML_SetUserData(parser_, this);
        XML_SetElementHandler(parser_, &Walk::start, &Walk::end);
        XML_SetCharacterDataHandler(parser_, &Walk::text);
        XML_SetStartDoctypeDeclHandler(parser_, &Walk::doctype);
        const bool ok = XML_Parse(parser_, body.data(), static_cast<int>(body.size()), XML_TRUE) == XML_STATUS_OK;
        return ok && !refused_;
    }

private:
    static void start(void* user, const XML_Char* name, const XML_Char** /*attrs*/)
    {
        auto& w = *static_cast<Walk*>(user);
        if (++w.depth_ > kMaxDepth) {
            w.refuse();
            return;
        }
        w.path_ += (w.path_.empty() ? "" : "/") + std::string(name);
        w.text_.clear();
    }
    static void end(void* user, const XML_Char* /*name*/)
    {
        auto& w = *static_cast<Walk*>(user);
        w.onText_(w.path_, w.text_);
        w.onClose_(w.path_);
        w.text_.clear();
        const auto slash = w.path_.rfind('/');
        w.path_.erase(slash == std::string::npos ? 0 : slash);
        --w.depth_;
    }
    static void text(void* user, const XML_Char* s, int len)
    {
        auto& w = *static_cast<Walk*>(user);
        w.text_.append(s, static_cast<std::size_t>(len));
    }
    static void doctype(void* user, const XML_Char* /*name*/, const XML_Char* /*sysid*/, const XML_Char* /*pubid*/,
                        int /*internal*/)
    {
        static_cast<Walk*>(user)->refuse();
    }
    void refuse()
    {
        refused_ = true;
        XML_StopParser(parser_, XML_FALSE);
    }

    OnText onText_;
    OnClose onClose_;
    XML_Parser parser_ = nullptr;
    std::string path_;
    std::string text_;
    int depth_ = 0;
    bool refused_ = false;
};

}  // namespace

std::optional<ErrorReply> parseErrorReply(std::string_view body)
{
    ErrorReply e;
    bool isError = false;
    Walk walk(
        [&](const std::string& path, const std::string& text) {
            if (path == "Error/Code") {
                e.code = text;
            } else if (path == "Error/Message") {
                e.message = text;
            } else if (path == "Error/Region") {
                e.region = text;
            } else if (path == "Error/Endpoint") {
                e.endpoint = text;
            } else if (path == "Error") {
                isError = true;
            }
        },
        [](const std::string&) {});
    if (!walk.run(body) || !isError || e.code.empty()) {
        return std::nullopt;
    }
    return e;
}

Expected<ListPage> parseListPage(std::string_view body)
{
    ListPage page;
    bool isList = false;
    bool badSize = false;
    ListedObject current;
    Walk walk(
        [&](const std::string& path, const std::string& text) {
            if (path == "ListBucketResult/Contents/Key") {
                current.key = text;
            } else if (path == "ListBucketResult/Contents/Size") {
                const auto n = parseNumber(text);
                badSize = badSize || !n;
                current.size = n.value_or(0);
            } else if (path == "ListBucketResult/CommonPrefixes/Prefix") {
                page.commonPrefixes.push_back(text);
            } else if (path == "ListBucketResult/IsTruncated") {
                page.truncated = text == "true";
            } else if (path == "ListBucketResult/NextContinuationToken") {
                page.nextToken = text;
            } else if (path == "ListBucketResult") {
                isList = true;
            }
        },
        [&](const std::string& path) {
            if (path == "ListBucketResult/Contents") {
                page.objects.push_back(std::move(current));
                current = ListedObject();
            }
        });
    if (!walk.run(body) || !isList) {
        return makeError(ErrorCode::Corrupt, "the server's listing is not a ListObjectsV2 reply (ListBucketResult)");
    }
    if (badSize) {
        return makeError(ErrorCode::Corrupt, "the server's listing gives an object a size that is no number");
    }
    if (page.truncated && page.nextToken.empty()) {
        return makeError(ErrorCode::Corrupt,
                         "the server's listing says it goes on but gives no NextContinuationToken to go on from");
    }
    return page;
}

namespace {

// S3 sends spaces while it assembles the parts (keeping the connection alive), before the document.
std::string_view withoutLeadingSpace(std::string_view body)
{
    const auto first = body.find_first_not_of(" \t\r\n");
    return first == std::string_view::npos ? std::string_view() : body.substr(first);
}

Error replyError(ErrorCode code, const std::string& what, std::string_view body)
{
    if (const auto e = parseErrorReply(body)) {
        return makeError(code, what + ": " + e->code + (e->message.empty() ? "" : ": " + e->message));
    }
    return makeError(ErrorCode::Corrupt, what + ": the server's reply is not the XML document S3 answers with");
}

std::string escaped(std::string_view text)
{
    std::string out;
    for (const char c : text) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        default:
            out += c;
        }
    }
    return out;
}

}  // namespace

Expected<std::string> parseInitiateReply(std::string_view body)
{
    body = withoutLeadingSpace(body);
    std::string id;
    bool isResult = false;
    Walk walk(
        [&](const std::string& path, const std::string& text) {
            if (path == "InitiateMultipartUploadResult/UploadId") {
                id = text;
            } else if (path == "InitiateMultipartUploadResult") {
                isResult = true;
            }
        },
        [](const std::string&) {});
    if (!walk.run(body) || !isResult) {
        return replyError(ErrorCode::WriteFailed, "CreateMultipartUpload", body);
    }
    if (id.empty()) {
        return makeError(ErrorCode::Corrupt, "CreateMultipartUpload: the server's reply gives no UploadId");
    }
    return id;
}

Expected<void> parseCompleteReply(std::string_view body)
{
    body = withoutLeadingSpace(body);
    bool isResult = false;
    Walk walk(
        [&](const std::string& path, const std::string& /*text*/) {
            if (path == "CompleteMultipartUploadResult") {
                isResult = true;
            }
        },
        [](const std::string&) {});
    if (!walk.run(body) || !isResult) {
        return replyError(ErrorCode::WriteFailed, "CompleteMultipartUpload", body);
    }
    return {};
}

std::string completeBody(const std::vector<UploadedPart>& parts)
{
    std::string out = R"(<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)";
    for (const auto& p : parts) {
        out += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>" + escaped(p.etag) +
               "</ETag></Part>";
    }
    out += "</CompleteMultipartUpload>";
    return out;
}

}  // namespace ckpt::remote::s3
