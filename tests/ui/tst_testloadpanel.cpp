// Test-loads through the panel on a fake NVIDIA driver with two GPUs (tests/device/fake_cuda.c and
// fake_nvml.c): the device list comes from the inventory; Load on the CPU runs the real LibTorch
// helper, on a GPU the CUDA engine; the chart's series fill with samples; the summary names peak,
// time and GB/s; "Simulate DDP ranks" shows GPU 0 piling up.
#include "document.h"
#include "memorychart.h"
#include "testloadpanel.h"
#include "text.h"
#include "uitest.h"

#include <QAbstractSeries>
#include <QChart>
#include <QComboBox>
#include <QElapsedTimer>
#include <QLabel>
#include <QPushButton>
#include <QScopeGuard>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTemporaryDir>
#include <QtTest>

using namespace ckpt;
using namespace ckpt::ui;

namespace {

// Opens a fixture in `panel`, shows it and waits until its device list is in.
bool showWithDevices(TestLoadPanel& panel, const char* fixture)
{
    auto doc = loadDocument(uitest::fixture(fixture).toStdString());
    if (!doc) {
        return false;
    }
    panel.show();
    QSignalSpy devices(&panel, &TestLoadPanel::devicesReady);
    panel.setDocument(*doc);
    return QTest::qWaitFor([&devices] { return devices.count() == 1; }, 20000);
}

}  // namespace

class TestTestLoadPanel : public QObject {
    Q_OBJECT
public:
    static void initMain()
    {
        uitest::initMain();
        qputenv("CKPTSCOPE_TORCH_HELPER", CKPTSCOPE_TORCH_HELPER);
        qputenv("CKPTSCOPE_CUDA_ENGINE", CKPTSCOPE_CUDA_ENGINE);
        qputenv("CKPTSCOPE_CUDA_LIBRARY", FAKE_CUDA_PATH);
        qputenv("CKPTSCOPE_NVML_LIBRARY", FAKE_NVML_PATH);
        qputenv("FAKE_CUDA_DEVICES", "4096,4096");
        qputenv("FAKE_CUDA_CONTEXT_MIB", "100");
        static QTemporaryDir machine;
        qputenv("FAKE_GPU_STATE", machine.filePath(QStringLiteral("gpu.state")).toLocal8Bit());
    }

private Q_SLOTS:
    void cpuLoadFillsTheChart()
    {
        TestLoadPanel panel;
        panel.resize(800, 500);
        QVERIFY(showWithDevices(panel, "train_ckpt.pt"));

        auto* combo = panel.findChild<QComboBox*>(QStringLiteral("deviceCombo"));
        QVERIFY(combo->count() >= 1);
        const int cpu = combo->findData(QStringLiteral("cpu"));
        QVERIFY(cpu >= 0);
        combo->setCurrentIndex(cpu);

        QSignalSpy finished(&panel, &TestLoadPanel::loadFinished);
        QTest::mouseClick(panel.findChild<QPushButton*>(QStringLiteral("loadButton")), Qt::LeftButton);
        // While the load runs the chart is fed live; the report's timeline replaces it at the end.
        std::uint64_t liveMax = 0;
        QElapsedTimer waited;
        waited.start();
        while (finished.count() == 0 && waited.elapsed() < 120000) {
            QTest::qWait(10);
            if (finished.count() == 0 && panel.chart()->seriesCount() > 0) {
                liveMax = std::max(liveMax, panel.chart()->maxValue());
            }
        }
        QCOMPARE(finished.count(), 1);
        const auto summary = panel.findChild<QLabel*>(QStringLiteral("loadSummary"))->text();
        QVERIFY2(finished.at(0).at(0).toBool(), qPrintable(summary));
        QVERIFY2(summary.contains(QStringLiteral("B/s")) && !summary.contains(QStringLiteral("0.00 GB/s")),
                 qPrintable(summary));
        QVERIFY2(summary.contains(QStringLiteral("anonymous memory")), qPrintable(summary));

        // The chart plots what the summary names: the rise of ckptscope's own processes, not the
        // machine's RAM (which other programs fill), and its largest value is the one quoted.
        auto* chart = panel.chart();
        QVERIFY(chart->seriesCount() >= 1);  // the CPU first, then each (fake) GPU, dashed
        QVERIFY(chart->chart()->series().at(0)->name().startsWith(QStringLiteral("cpu")));
        QVERIFY2(chart->pointCount(0) >= 2, "the CPU series must hold the load's samples");
        QCOMPARE(chart->valueAt(0, 0), std::uint64_t{0});  // a rise: the first sample is the baseline
        std::uint64_t cpuMax = 0;
        for (int p = 0; p < chart->pointCount(0); ++p) {
            cpuMax = std::max(cpuMax, chart->valueAt(0, p));
        }
        // The chart plots what the tensors added (not LibTorch's start-up), the figure the summary
        // quotes; the process's whole resident set is named beside it.
        QVERIFY2(summary.contains(QStringLiteral("the tensors added %1").arg(humanSize(cpuMax))),
                 qPrintable(summary + QStringLiteral(" / chart max ") + humanSize(cpuMax)));
        QVERIFY2(summary.contains(QStringLiteral("ckptscope's processes held")), qPrintable(summary));
        // The live curve already summed the helper (LibTorch alone is tens of MiB resident): it
        // reached at least half the final curve's peak, not just this process's few pages.
        QVERIFY2(liveMax >= cpuMax / 2,
                 qPrintable(QStringLiteral("live max %1, final max %2").arg(humanSize(liveMax), humanSize(cpuMax))));
    }

    void gpuLoadGoesThroughTheCudaEngine()
    {
        TestLoadPanel panel;
        QVERIFY(showWithDevices(panel, "ddp_sd_cuda0.pt"));
        auto* combo = panel.findChild<QComboBox*>(QStringLiteral("deviceCombo"));
        QCOMPARE(combo->count(), 3);  // the CPU and two fake GPUs
        QCOMPARE(combo->currentData().toString(), QStringLiteral("cuda:0"));
        combo->setCurrentIndex(combo->findData(QStringLiteral("cuda:1")));
        QSignalSpy finished(&panel, &TestLoadPanel::loadFinished);
        QTest::mouseClick(panel.findChild<QPushButton*>(QStringLiteral("loadButton")), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 60000);
        const auto summary = panel.findChild<QLabel*>(QStringLiteral("loadSummary"))->text();
        QVERIFY2(finished.at(0).at(0).toBool(), qPrintable(summary));
        QVERIFY2(summary.contains(QStringLiteral("The CUDA context took 100.0 MiB")), qPrintable(summary));
        QVERIFY2(summary.contains(QStringLiteral("no other GPU was touched")), qPrintable(summary));
    }

    void ddpReplayShowsGpu0PilingUp()
    {
        TestLoadPanel panel;
        QVERIFY(showWithDevices(panel, "ddp_sd_cuda0.pt"));
        panel.findChild<QSpinBox*>(QStringLiteral("ddpRanksSpin"))->setValue(4);
        QSignalSpy finished(&panel, &TestLoadPanel::loadFinished);
        QTest::mouseClick(panel.findChild<QPushButton*>(QStringLiteral("ddpReplayButton")), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 60000);
        const auto summary = panel.findChild<QLabel*>(QStringLiteral("loadSummary"))->text();
        QVERIFY2(finished.at(0).at(0).toBool(), qPrintable(summary));
        QVERIFY2(summary.contains(QStringLiteral("cuda:0 peaks at 4 x (context 100.0 MiB")), qPrintable(summary));
        // The chart shows both GPUs (not system RAM: nothing is loaded there), with samples.
        auto* chart = panel.chart();
        QCOMPARE(chart->seriesCount(), 2);
        QVERIFY(chart->pointCount(0) >= 2);
    }

    void cancelStopsTheLoad()
    {
        TestLoadPanel panel;
        QVERIFY(showWithDevices(panel, "big40k.pt"));
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

    // A job that sees only the machine's second GPU, whose CUDA order is not NVML's: the picker
    // offers it as cuda:0 (what torch calls it there), the first GPU as nvml:0 and not choosable,
    // and the load lands on the GPU the picker named.
    void pickerSpeaksCudasNumbering()
    {
        qputenv("FAKE_CUDA_ORDER", "1,0");
        qputenv("CUDA_VISIBLE_DEVICES", "0");
        auto restore = qScopeGuard([] {
            qunsetenv("FAKE_CUDA_ORDER");
            qunsetenv("CUDA_VISIBLE_DEVICES");
        });
        TestLoadPanel panel;
        QVERIFY(showWithDevices(panel, "ddp_sd_cuda0.pt"));
        auto* combo = panel.findChild<QComboBox*>(QStringLiteral("deviceCombo"));
        QCOMPARE(combo->count(), 3);
        QCOMPARE(combo->currentData().toString(), QStringLiteral("cuda:0"));
        QVERIFY2(combo->itemData(combo->currentIndex(), Qt::ToolTipRole)
                     .toString()
                     .endsWith(QStringLiteral("GPU-00000000-0000-0000-0000-000000000001")),
                 qPrintable(combo->itemData(combo->currentIndex(), Qt::ToolTipRole).toString()));
        const int hidden = combo->findData(QStringLiteral("nvml:0"));
        QVERIFY(hidden > 0);
        auto* items = qobject_cast<QStandardItemModel*>(combo->model());
        QVERIFY(items && !items->item(hidden)->isEnabled());
        QSignalSpy finished(&panel, &TestLoadPanel::loadFinished);
        QTest::mouseClick(panel.findChild<QPushButton*>(QStringLiteral("loadButton")), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 60000);
        const auto summary = panel.findChild<QLabel*>(QStringLiteral("loadSummary"))->text();
        QVERIFY2(finished.at(0).at(0).toBool(), qPrintable(summary));
        QVERIFY2(summary.contains(QStringLiteral("Loaded on cuda:0")), qPrintable(summary));
        // The chart watches only the GPU this job sees.
        for (const auto* series : panel.chart()->chart()->series()) {
            QVERIFY2(!series->name().startsWith(QStringLiteral("nvml")), qPrintable(series->name()));
        }
    }
};

QTEST_MAIN(TestTestLoadPanel)
#include "tst_testloadpanel.moc"
