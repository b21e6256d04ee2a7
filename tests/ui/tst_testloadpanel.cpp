// A CPU test-load through the panel: the device list comes from the inventory, Load runs the real
// LibTorch helper, the chart's series fill with samples, and the summary names peak, time and GB/s.
#include "document.h"
#include "memorychart.h"
#include "testloadpanel.h"
#include "uitest.h"

#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QtTest>

using namespace ckpt;
using namespace ckpt::ui;

class TestTestLoadPanel : public QObject {
    Q_OBJECT
public:
    static void initMain()
    {
        uitest::initMain();
        qputenv("CKPTSCOPE_TORCH_HELPER", CKPTSCOPE_TORCH_HELPER);
    }

private Q_SLOTS:
    void cpuLoadFillsTheChart()
    {
        auto doc = loadDocument(uitest::fixture("train_ckpt.pt").toStdString());
        QVERIFY(doc);
        TestLoadPanel panel;
        panel.resize(800, 500);
        panel.show();
        QSignalSpy devices(&panel, &TestLoadPanel::devicesReady);
        panel.setDocument(*doc);
        QTRY_COMPARE_WITH_TIMEOUT(devices.count(), 1, 20000);

        auto* combo = panel.findChild<QComboBox*>(QStringLiteral("deviceCombo"));
        QVERIFY(combo->count() >= 1);
        const int cpu = combo->findData(QStringLiteral("cpu"));
        QVERIFY(cpu >= 0);
        combo->setCurrentIndex(cpu);

        QSignalSpy finished(&panel, &TestLoadPanel::loadFinished);
        QTest::mouseClick(panel.findChild<QPushButton*>(QStringLiteral("loadButton")), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 120000);
        const auto summary = panel.findChild<QLabel*>(QStringLiteral("loadSummary"))->text();
        QVERIFY2(finished.at(0).at(0).toBool(), qPrintable(summary));
        QVERIFY2(summary.contains(QStringLiteral("GB/s")) && summary.contains(QStringLiteral("peak")),
                 qPrintable(summary));

        auto* chart = panel.chart();
        QVERIFY(chart->seriesCount() >= 1);
        QVERIFY2(chart->pointCount(0) >= 2, "the CPU series must hold the load's samples");
    }

    void cancelStopsTheLoad()
    {
        auto doc = loadDocument(uitest::fixture("big40k.pt").toStdString());
        QVERIFY(doc);
        TestLoadPanel panel;
        panel.show();
        QSignalSpy devices(&panel, &TestLoadPanel::devicesReady);
        panel.setDocument(*doc);
        QTRY_COMPARE_WITH_TIMEOUT(devices.count(), 1, 20000);
        auto* combo = panel.findChild<QComboBox*>(QStringLiteral("deviceCombo"));
        combo->setCurrentIndex(combo->findData(QStringLiteral("cpu")));
        QSignalSpy finished(&panel, &TestLoadPanel::loadFinished);
        QTest::mouseClick(panel.findChild<QPushButton*>(QStringLiteral("loadButton")), Qt::LeftButton);
        QTest::mouseClick(panel.findChild<QPushButton*>(QStringLiteral("cancelLoadButton")), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 60000);
        // Either it was cancelled, or the helper was quicker than the click: both end cleanly.
        const auto summary = panel.findChild<QLabel*>(QStringLiteral("loadSummary"))->text();
        QVERIFY2(!finished.at(0).at(0).toBool() ? summary.contains(QStringLiteral("ancel")) : true,
                 qPrintable(summary));
        QVERIFY(panel.findChild<QPushButton*>(QStringLiteral("loadButton"))->isEnabled());
    }
};

QTEST_MAIN(TestTestLoadPanel)
#include "tst_testloadpanel.moc"
