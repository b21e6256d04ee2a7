// An object-store input in the window (issue 41): File > Open URL of s3://BUCKET/KEY opens as a URL
// does, with a few signed range requests, against moto's S3 server (tests/remote/s3_server.py in
// the PyTorch 2.x root, which checks every signature). A refused key is one line in the banner
// naming where the key came from, and the secret appears nowhere: not in the banner, not in Open
// Recent, not in the settings.
#include "checkpoint/checkpoint.h"
#include "dialogs.h"
#include "documentview.h"
#include "mainwindow.h"
#include "servers.h"
#include "uitest.h"
#include "window_probe.h"

#include <QAction>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMenu>
#include <QSettings>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>

namespace {

using ckpt::ui::MainWindow;
using ckpt::uitest::action;
using ckpt::uitest::tensorsOnDisk;

const QString kTorch2Python = QStringLiteral(CKPTSCOPE_SOURCE_DIR "/scripts/torch2-python.sh");

// Every value the window's settings hold, as text, to look for a secret in.
QString allSettings()
{
    QSettings s;
    QString text;
    for (const auto& key : s.allKeys()) {
        const QVariant v = s.value(key);
        text += key + QLatin1Char('=') + v.toString() + v.toStringList().join(u',') + QLatin1Char('\n');
    }
    return text;
}

}  // namespace

class TestOpenUrlS3 : public QObject {
    Q_OBJECT

    QTemporaryDir tmp_;
    ckpt::test::LoopbackServer store_;
    QString set_ = QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/sharded/hf_st");

    void useKey(const QString& secret)
    {
        qputenv("AWS_ENDPOINT_URL", store_.url(QString()).toUtf8());
        qputenv("AWS_ACCESS_KEY_ID", store_.word(0).toUtf8());
        qputenv("AWS_SECRET_ACCESS_KEY", secret.toUtf8());
    }

public:
    static void initMain() { ckpt::uitest::initMain(); }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(tmp_.isValid());
        QStringList args{ckpt::test::scriptPath("s3_server.py"), QStringLiteral("--object"),
                         QStringLiteral("bkt/ddp_sd_cuda0.pt=") + ckpt::uitest::fixture("ddp_sd_cuda0.pt")};
        for (const auto& f : QDir(set_).entryList(QDir::Files)) {
            args << QStringLiteral("--object") << QStringLiteral("bkt/hf/") + f + QLatin1Char('=') + set_ + u'/' + f;
        }
        QVERIFY(store_.launch(kTorch2Python, args));
        QVERIFY2(store_.waitReady(180000), "moto's S3 server did not start (scripts/modern-torch.sh makes its root)");
        for (const char* v : {"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION",
                              "http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
            qunsetenv(v);
        }
        qputenv("AWS_REGION", "us-east-1");
        qputenv("HOME", tmp_.filePath(QStringLiteral("home")).toUtf8());  // no ~/.aws of the machine's
        qputenv("CKPTSCOPE_HTTP_TIMEOUT", "5");
    }
    void init() { QSettings().clear(); }

    // Open URL of an object: the file's tensors and findings, from a few signed range requests; Open
    // Recent offers it again, and no secret is kept.
    void objectOpensAsAUrlDoes()
    {
        useKey(store_.word(1));
        MainWindow w;
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        const QString url = QStringLiteral("s3://bkt/ddp_sd_cuda0.pt");
        ckpt::ui::dialogs::setNextOpenUrl(url);
        action(w, "openUrlAction")->trigger();
        QVERIFY2(opened.wait(60000), qPrintable(w.errorText()));
        auto* v = w.currentView();
        QVERIFY(v != nullptr);
        const auto& doc = *v->document();
        QVERIFY(doc.remote != nullptr);
        QCOMPARE(doc.checkpoint->tensors.size(), tensorsOnDisk("ddp_sd_cuda0.pt"));
        QVERIFY(doc.remote->requests->load() >= 1);
        QVERIFY2(doc.remote->requests->load() <= 4, qPrintable(QString::number(doc.remote->requests->load())));
        auto* tabs = w.findChild<QTabWidget*>(QStringLiteral("documentTabs"));
        QCOMPARE(tabs->tabText(tabs->currentIndex()), QStringLiteral("ddp_sd_cuda0.pt"));
        const QStringList codes = ckpt::uitest::findingCodes(*v);
        QVERIFY2(codes.contains(QStringLiteral("module-prefix")), qPrintable(codes.join(u',')));
        const auto recent = w.findChild<QMenu*>(QStringLiteral("recentMenu"))->actions();
        QVERIFY(!recent.isEmpty());
        QCOMPARE(recent.front()->toolTip(), url);
        QVERIFY(!allSettings().contains(store_.word(1)));
    }

    // A set by its index's key: the set's document, its shards read by range.
    void setByIndexOpensAsASet()
    {
        useKey(store_.word(1));
        MainWindow w;
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({QStringLiteral("s3://bkt/hf/model.safetensors.index.json")});
        QVERIFY2(opened.wait(60000), qPrintable(w.errorText()));
        const auto& doc = *w.currentView()->document();
        QVERIFY(doc.set != nullptr);
        // Every tensor the index maps to a shard.
        QFile index(set_ + QStringLiteral("/model.safetensors.index.json"));
        QVERIFY(index.open(QIODevice::ReadOnly));
        const auto weightMap = QJsonDocument::fromJson(index.readAll()).object().value(QStringLiteral("weight_map"));
        QVERIFY(weightMap.toObject().size() > 1);
        QCOMPARE(doc.checkpoint->tensors.size(), static_cast<std::size_t>(weightMap.toObject().size()));
    }

    // A wrong secret: the store's 403 in the banner, one line that names where the key came from,
    // and not the secret; nothing is remembered.
    void refusedKeyIsShownWithoutTheSecret()
    {
        const QString wrong = QStringLiteral("wrongSecretValue0123456789abcdefABCDEF00");
        useKey(wrong);
        MainWindow w;
        QSignalSpy failed(&w, &MainWindow::openFailed);
        w.openFiles({QStringLiteral("s3://bkt/ddp_sd_cuda0.pt")});
        QVERIFY(failed.wait(60000));
        const QString banner = w.errorText();
        QVERIFY2(banner.contains(QStringLiteral("403")) && banner.contains(QStringLiteral("AWS_ACCESS_KEY_ID")),
                 qPrintable(banner));
        QVERIFY2(!banner.contains(wrong), qPrintable(banner));
        QVERIFY(!allSettings().contains(wrong));
        QVERIFY(w.findChild<QMenu*>(QStringLiteral("recentMenu"))->actions().size() <= 1);  // "none yet" only
    }
};

QTEST_MAIN(TestOpenUrlS3)
#include "tst_openurl_s3.moc"
