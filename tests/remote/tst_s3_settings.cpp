// Where s3:// settings come from (core/remote/s3.h), as the AWS CLI and boto3 find them: the
// environment before the profile, the profile's files, the endpoint's and region's order, and the
// addressing the S3 endpoint rules choose; an upload's part size and the documents it sends and
// reads (s3_upload.h, s3_xml.h). No server.
#include "remote/s3.h"
#include "remote/s3_upload.h"
#include "remote/s3_xml.h"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

using namespace ckpt::remote;

namespace {

void clearAws()
{
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                          "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                          "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"}) {
        qunsetenv(v);
    }
}

}  // namespace

class TestS3Settings : public QObject {
    Q_OBJECT
    QTemporaryDir home_;

    void write(const QString& name, const QByteArray& text)
    {
        QDir().mkpath(home_.filePath(QStringLiteral(".aws")));
        QFile f(home_.filePath(QStringLiteral(".aws/") + name));
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(text);
    }

private Q_SLOTS:
    void init()
    {
        clearAws();
        qputenv("HOME", home_.path().toUtf8());
        QFile::remove(home_.filePath(QStringLiteral(".aws/config")));
        QFile::remove(home_.filePath(QStringLiteral(".aws/credentials")));
    }

    void environmentBeforeProfile()
    {
        write(QStringLiteral("credentials"),
              "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = filesecret\n");
        qputenv("AWS_ACCESS_KEY_ID", "ENVKEY");
        qputenv("AWS_SECRET_ACCESS_KEY", "envsecret");
        qputenv("AWS_SESSION_TOKEN", "envtoken");
        auto s = s3::findSettings(false);
        QVERIFY(s);
        QCOMPARE(s->accessKeyId, std::string("ENVKEY"));
        QCOMPARE(s->sessionToken, std::string("envtoken"));
        QCOMPARE(s->credentialSource, std::string("AWS_ACCESS_KEY_ID"));
        qunsetenv("AWS_ACCESS_KEY_ID");
        qunsetenv("AWS_SECRET_ACCESS_KEY");
        s = s3::findSettings(false);
        QVERIFY(s);
        QCOMPARE(s->accessKeyId, std::string("FILEKEY"));
        QCOMPARE(s->credentialSource, std::string("profile 'default' in ~/.aws/credentials"));
        // The note a 403 carries names the key by its last characters and never the secret.
        const std::string note = s3::credentialNote(*s);
        QVERIFY(note.find("...EKEY") != std::string::npos && note.find("filesecret") == std::string::npos);
    }

    void profilesAndRegions()
    {
        write(QStringLiteral("config"),
              "[default]\nregion = eu-west-1\n[profile ci]\n# a comment\nregion = ap-south-1\n"
              "aws_access_key_id = CFGKEY\naws_secret_access_key = cfgsecret\n"
              "s3 =\n  endpoint_url = http://10.0.0.5:9000\n  addressing_style = virtual\n");
        qputenv("AWS_PROFILE", "ci");
        auto s = s3::findSettings(false);
        QVERIFY(s);
        QCOMPARE(s->region, std::string("ap-south-1"));
        QCOMPARE(s->credentialSource, std::string("profile 'ci' in ~/.aws/config"));
        QCOMPARE(s->endpoint, std::string("http://10.0.0.5:9000"));
        QVERIFY(s->addressing == s3::Settings::Addressing::Virtual);
        qputenv("AWS_DEFAULT_REGION", "us-west-2");
        QCOMPARE(s3::findSettings(false)->region, std::string("us-west-2"));
        qputenv("AWS_REGION", "ca-central-1");
        QCOMPARE(s3::findSettings(false)->regionSource, std::string("AWS_REGION"));
        qputenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1");
        QCOMPARE(s3::findSettings(false)->endpoint, std::string("http://127.0.0.1:1"));
        qputenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:2/");
        QCOMPARE(s3::findSettings(false)->endpoint, std::string("http://127.0.0.1:2"));
        qputenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true");
        QCOMPARE(s3::findSettings(false)->endpoint, std::string("https://s3.ca-central-1.amazonaws.com"));
        qputenv("AWS_PROFILE", "absent");
        auto absent = s3::findSettings(false);
        QVERIFY(!absent && absent.error().message.find("'absent'") != std::string::npos);
    }

    void credentialsElsewhereAreNamed()
    {
        write(QStringLiteral("config"), "[profile sso]\nsso_session = corp\nregion = us-east-1\n");
        qputenv("AWS_PROFILE", "sso");
        auto s = s3::findSettings(false);
        QVERIFY(!s);
        QVERIFY(s.error().message.find("sso_session") != std::string::npos &&
                s.error().message.find("export-credentials") != std::string::npos);
        QVERIFY(s3::findSettings(true));  // --no-sign-request needs none
        qunsetenv("AWS_PROFILE");
        auto none = s3::findSettings(false);
        QVERIFY(!none && none.error().message.find("--no-sign-request") != std::string::npos);
    }

    void addressing()
    {
        s3::Settings s;
        s.endpoint = "https://s3.us-east-1.amazonaws.com";
        QCOMPARE(s3::objectUrl(s, {"bkt", "a b/c+d.pt"}),
                 std::string("https://bkt.s3.us-east-1.amazonaws.com/a%20b/c%2Bd.pt"));
        // A dotted bucket cannot match a wildcard certificate over https: path-style.
        QCOMPARE(s3::bucketUrl(s, "my.bkt"), std::string("https://s3.us-east-1.amazonaws.com/my.bkt/"));
        s.endpoint = "http://127.0.0.1:9000";
        QCOMPARE(s3::bucketUrl(s, "bkt"), std::string("http://127.0.0.1:9000/bkt/"));
        s.endpoint = "http://localhost:9000";
        QCOMPARE(s3::bucketUrl(s, "bkt"), std::string("http://bkt.localhost:9000/"));
        s.addressing = s3::Settings::Addressing::Path;
        QCOMPARE(s3::bucketUrl(s, "bkt"), std::string("http://localhost:9000/bkt/"));
        QVERIFY(!s3::parseName("s3://"));
        QVERIFY(!s3::parseName("s3://bkt//abs"));
        QVERIFY(s3::parseName("s3://bkt")->isPrefix());
        QVERIFY(!s3::parseName("s3://bkt/k.pt")->isPrefix());
    }

    void signerHeaders()
    {
        s3::Settings s;
        s.accessKeyId = "AKIDEXAMPLE";
        s.secretAccessKey = "secret";
        s.sessionToken = "token";
        const s3::Signer signer(s, "http://127.0.0.1:9000",
                                [] { return std::chrono::system_clock::from_time_t(1440938160); });
        QVERIFY(signer.signs("http://127.0.0.1:9000") && !signer.signs("http://127.0.0.1:9001"));
        const auto h = signer.headersFor("GET", "http://127.0.0.1:9000/bkt/k", "UNSIGNED-PAYLOAD");
        QCOMPARE(h.size(), std::size_t{4});
        QCOMPARE(h[1], std::string("x-amz-date: 20150830T123600Z"));
        QVERIFY(h[2].starts_with("Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/s3/"
                                 "aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date;"
                                 "x-amz-security-token, Signature="));
        s.sign = false;
        QVERIFY(s3::Signer(s, "http://127.0.0.1:9000").headersFor("GET", "http://127.0.0.1:9000/b/k", "x").empty());
    }

    // The AWS CLI's sizes: 8 MiB, doubled until the output fits 10,000 parts, at most 5 GiB.
    void partSizes()
    {
        constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
        QCOMPARE(s3::partSizeFor(0), 8 * kMiB);
        QCOMPARE(s3::partSizeFor(10000 * 8 * kMiB), 8 * kMiB);
        QCOMPARE(s3::partSizeFor(10000 * 8 * kMiB + 1), 16 * kMiB);
        QCOMPARE(s3::partSizeFor(std::uint64_t{1} << 40), 128 * kMiB);  // 1 TiB: 8192 parts
        QCOMPARE(s3::partSizeFor(std::uint64_t{100} << 40), s3::kMaxPartSize);
    }

    void uploadDocuments()
    {
        const std::string body = s3::completeBody({{1, "\"a&b\""}, {2, "\"<c>\""}});
        QCOMPARE(body, std::string(R"(<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
                                   "<Part><PartNumber>1</PartNumber><ETag>&quot;a&amp;b&quot;</ETag></Part>"
                                   "<Part><PartNumber>2</PartNumber><ETag>&quot;&lt;c&gt;&quot;</ETag></Part>"
                                   "</CompleteMultipartUpload>"));
        auto id = s3::parseInitiateReply("<?xml version=\"1.0\"?><InitiateMultipartUploadResult><Bucket>b</Bucket>"
                                         "<UploadId>VXBsb2FkIElE</UploadId></InitiateMultipartUploadResult>");
        QVERIFY(id.ok() && *id == "VXBsb2FkIElE");
        QVERIFY(!s3::parseInitiateReply("<Error><Code>AccessDenied</Code></Error>").ok());
        // S3's spaces before the answer, then a result or an error (with status 200 either way).
        QVERIFY(s3::parseCompleteReply("  \n <CompleteMultipartUploadResult><ETag>\"x-2\"</ETag>"
                                       "</CompleteMultipartUploadResult>")
                    .ok());
        auto failed =
            s3::parseCompleteReply("   <Error><Code>InternalError</Code><Message>try again</Message></Error>");
        QVERIFY(!failed.ok());
        QCOMPARE(failed.error().message, std::string("CompleteMultipartUpload: InternalError: try again"));
        QCOMPARE(failed.error().code, ckpt::ErrorCode::WriteFailed);
        QVERIFY(!s3::parseCompleteReply("").ok());
    }
};

QTEST_APPLESS_MAIN(TestS3Settings)
#include "tst_s3_settings.moc"
