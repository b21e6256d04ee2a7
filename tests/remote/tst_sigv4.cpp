// Signature Version 4 (core/remote/sigv4.h) against AWS's published vectors. Sources:
//  - the AWS SigV4 test suite, as awslabs keeps it in aws-c-auth
//    (tests/aws-signing-test-suite/v4/<name>/header-signed-request.txt): get-vanilla,
//    get-vanilla-query-order-key-case, get-unreserved, get-utf8, get-vanilla-with-session-token;
//    and the suite's 2015 edition as botocore ships it (tests/unit/auth/aws4_testsuite/
//    post-x-www-form-urlencoded: content-type;host;x-amz-date signed, body "Param1=value1");
//    key AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, us-east-1, service "service",
//    20150830T123600Z;
//  - the Amazon S3 API Reference, "Signature Calculations for the Authorization Header:
//    Transferring Payload in a Single Chunk", its GET Object (a Range), GET Bucket lifecycle and
//    GET Bucket (List Objects) examples: key AKIAIOSFODNN7EXAMPLE /
//    wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, us-east-1, s3, 20130524T000000Z.
#include "remote/sigv4.h"

#include <QTest>

using namespace ckpt::remote;

namespace {

const sigv4::Key kSuiteKey{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"};
const sigv4::Key kS3Key{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
constexpr const char* kSuiteDate = "20150830T123600Z";
constexpr const char* kS3Date = "20130524T000000Z";

sigv4::Signature suite(const std::string& method, const std::string& target, std::vector<Header> extra = {},
                       const std::string& body = {})
{
    sigv4::Request r;
    r.method = method;
    r.url = "https://example.amazonaws.com" + target;
    r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}};
    r.headers.insert(r.headers.end(), extra.begin(), extra.end());
    r.payloadHash = sigv4::sha256Hex(body);
    return sigv4::sign(r, kSuiteKey, kSuiteDate, "us-east-1", "service");
}

sigv4::Signature s3(const std::string& target, std::vector<Header> extra = {})
{
    sigv4::Request r;
    r.method = "GET";
    r.url = "https://examplebucket.s3.amazonaws.com" + target;
    r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
                 {"x-amz-content-sha256", std::string(sigv4::kEmptyPayloadHash)},
                 {"x-amz-date", kS3Date}};
    r.headers.insert(r.headers.end(), extra.begin(), extra.end());
    r.payloadHash = std::string(sigv4::kEmptyPayloadHash);
    return sigv4::sign(r, kS3Key, kS3Date, "us-east-1", "s3");
}

}  // namespace

class TestSigV4 : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void getVanilla()
    {
        const auto s = suite("GET", "/");
        QCOMPARE(s.canonicalRequest, std::string("GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
                                                 "host;x-amz-date\n") +
                                         std::string(sigv4::kEmptyPayloadHash));
        QCOMPARE(s.stringToSign,
                 std::string("AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/"
                             "aws4_request\nbb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63"));
        QCOMPARE(s.authorization,
                 std::string("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                             "SignedHeaders=host;x-amz-date, "
                             "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"));
    }

    void getVanillaQueryOrderKeyCase()
    {
        const auto s = suite("GET", "/?Param2=value2&Param1=value1");
        QVERIFY(s.canonicalRequest.starts_with("GET\n/\nParam1=value1&Param2=value2\n"));
        QCOMPARE(s.stringToSign.substr(s.stringToSign.rfind('\n') + 1),
                 std::string("816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0"));
        QCOMPARE(s.signature, std::string("b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"));
    }

    void getUnreserved()
    {
        const auto s = suite("GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
        QCOMPARE(s.signature, std::string("07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"));
    }

    void getUtf8TypedOrEncoded()
    {
        // The path as typed (UTF-8) and as sent (%E1%88%B4) have one canonical URI.
        const std::string want = "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85";
        QCOMPARE(suite("GET", "/\xE1\x88\xB4").signature, want);
        QCOMPARE(suite("GET", "/%E1%88%B4").signature, want);
    }

    void getVanillaWithSessionToken()
    {
        const auto s = suite(
            "GET", "/", {{"X-Amz-Security-Token", "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"}});
        QCOMPARE(s.signedHeaders, std::string("host;x-amz-date;x-amz-security-token"));
        QCOMPARE(s.signature, std::string("07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"));
    }

    void postXWwwFormUrlencoded()
    {
        const auto s = suite("POST", "/", {{"Content-Type", "application/x-www-form-urlencoded"}}, "Param1=value1");
        QVERIFY(s.canonicalRequest.ends_with("9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"));
        QCOMPARE(s.stringToSign.substr(s.stringToSign.rfind('\n') + 1),
                 std::string("42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281"));
        QCOMPARE(s.signedHeaders, std::string("content-type;host;x-amz-date"));
        QCOMPARE(s.signature, std::string("ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"));
    }

    void s3GetObjectRange()
    {
        const auto s = s3("/test.txt", {{"Range", "bytes=0-9"}});
        QCOMPARE(s.stringToSign, std::string("AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
                                             "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"));
        QCOMPARE(s.signature, std::string("f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"));
    }

    void s3GetBucketLifecycle()
    {
        const auto s = s3("/?lifecycle");
        QVERIFY(s.canonicalRequest.starts_with("GET\n/\nlifecycle=\n"));
        QCOMPARE(s.signature, std::string("fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"));
    }

    void s3ListObjects()
    {
        const auto s = s3("/?max-keys=2&prefix=J");
        QCOMPARE(s.stringToSign.substr(s.stringToSign.rfind('\n') + 1),
                 std::string("df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7"));
        QCOMPARE(s.signature, std::string("34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"));
    }

    void changingAnyPartChangesTheSignature()
    {
        const auto base = s3("/test.txt", {{"Range", "bytes=0-9"}}).signature;
        QVERIFY(s3("/test.txu", {{"Range", "bytes=0-9"}}).signature != base);
        QVERIFY(s3("/test.txt", {{"Range", "bytes=0-8"}}).signature != base);
        QVERIFY(s3("/test.txt?a=b", {{"Range", "bytes=0-9"}}).signature != base);
    }

    void encodingAndDates()
    {
        QCOMPARE(sigv4::uriEncode("a b/c+d%~", true), std::string("a%20b/c%2Bd%25~"));
        QCOMPARE(sigv4::uriEncode("a/b", false), std::string("a%2Fb"));
        QCOMPARE(sigv4::amzDate(std::chrono::system_clock::from_time_t(1440938160)), std::string(kSuiteDate));
        QCOMPARE(sigv4::sha256Hex(""), std::string(sigv4::kEmptyPayloadHash));
    }
};

QTEST_APPLESS_MAIN(TestSigV4)
#include "tst_sigv4.moc"
