// The export panel's "Dequantize FP8" (issue 40): a block-quantized FP8 weight written as bfloat16,
// its scale left out, the written file read back with core's reader. The panel offers Dequantize FP8
// and Drop _extra_state only to a document that holds what they act on, and a preset's "Strip
// prefixes" shows the wrapper prefixes the document's keys carry, planning what the full list plans.
#include "detailspanel.h"
#include "documentview.h"
#include "exportpanel.h"
#include "mainwindow.h"
#include "python_file.h"
#include "transform/transform.h"
#include "uitest.h"
#include "window_open.h"

#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include <cstring>

using namespace ckpt;
using namespace ckpt::ui;

class TestFp8Export : public QObject {
    Q_OBJECT
public:
    static void initMain() { uitest::initMain(); }

private Q_SLOTS:
    void dequantizesToBf16()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("fp8.safetensors"));
        // A [256, 128] float8_e4m3fn weight of 1.0 (0x38) with a [2, 1] float32 scale per 128x128
        // block, 0.5 and 2.0: the safetensors layout written byte for byte.
        const QString wrote = ckpt::test::writeWithPython(
            QStringLiteral("import json, struct, sys\n"
                           "w = bytes([0x38]) * (256 * 128)\n"
                           "s = struct.pack('<2f', 0.5, 2.0)\n"
                           "h = json.dumps({'m.weight': {'dtype': 'F8_E4M3', 'shape': [256, 128], "
                           "'data_offsets': [0, len(w)]}, 'm.weight_scale_inv': {'dtype': 'F32', 'shape': [2, 1], "
                           "'data_offsets': [len(w), len(w) + 8]}}).encode()\n"
                           "h += b' ' * (-len(h) % 8)\n"
                           "open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + w + s)\n"),
            file);
        QVERIFY2(wrote.isEmpty(), qPrintable(wrote));

        MainWindow w;
        auto* view = uitest::openOne(w, file);
        QVERIFY(view != nullptr);
        // The details show the weight's scale and block, and the scale whose it is.
        const auto& opened = *view->document()->checkpoint;
        view->details()->showNode(opened.find("m.weight"));
        QVERIFY2(view->details()->text().contains(QStringLiteral("FP8 blocks")) &&
                     view->details()->text().contains(QStringLiteral("m.weight_scale_inv")) &&
                     view->details()->text().contains(QStringLiteral("128x128")),
                 qPrintable(view->details()->text()));
        view->details()->showNode(opened.find("m.weight_scale_inv"));
        QVERIFY2(view->details()->text().contains(QStringLiteral("Scale of")), qPrintable(view->details()->text()));
        auto* panel = view->exportPanel();
        auto* combo = panel->findChild<QComboBox*>(QStringLiteral("dequantizeCombo"));
        QVERIFY(combo != nullptr);
        QSignalSpy planned(panel, &ExportPanel::planReady);
        combo->setCurrentIndex(combo->findText(QStringLiteral("bfloat16")));
        QVERIFY(panel->options().dequantize == DType::BFloat16);
        QTRY_VERIFY(planned.count() >= 1);
        const auto out = dir.filePath(QStringLiteral("bf16.pt"));
        auto* output = panel->findChild<QLineEdit*>(QStringLiteral("outputEdit"));
        output->clear();
        QTest::keyClicks(output, out);
        QSignalSpy exported(panel, &ExportPanel::exportFinished);
        QTest::mouseClick(panel->findChild<QPushButton*>(QStringLiteral("exportButton")), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(exported.count(), 1, 30000);
        QVERIFY2(exported.at(0).at(0).toBool(), qPrintable(exported.at(0).at(1).toString()));

        auto back = openCheckpoint(out.toStdString());
        QVERIFY2(back, back ? "" : back.error().describe().c_str());
        const auto& ck = **back;
        QCOMPARE(ck.tensors.size(), 1U);
        QVERIFY(!ck.find("m.weight_scale_inv").valid());
        const auto& t = ck.tensors[TensorIndex{0}];
        QCOMPARE(t.dtype, DType::BFloat16);
        std::vector<std::byte> scratch;
        auto bytes = ck.storageData(t.storage, scratch);
        QVERIFY(bytes && bytes->size() == 256U * 128U * 2U);
        auto at = [&](std::size_t i) {
            std::uint16_t v = 0;
            std::memcpy(&v, bytes->data() + 2 * i, 2);
            return v;
        };
        QCOMPARE(at(0), std::uint16_t{0x3F00});          // 1.0 x 0.5, the first block row
        QCOMPARE(at(128 * 128), std::uint16_t{0x4000});  // 1.0 x 2.0, the second
        QCOMPARE(at(256 * 128 - 1), std::uint16_t{0x4000});
    }

    void choicesFollowTheDocument()
    {
        QTemporaryDir dir;
        const QString fp8 = dir.filePath(QStringLiteral("fp8.safetensors"));
        QString wrote = ckpt::test::writeWithPython(
            QStringLiteral("import json, struct, sys\n"
                           "w = bytes([0x38]) * (128 * 128)\n"
                           "s = struct.pack('<f', 0.5)\n"
                           "h = json.dumps({'m.weight': {'dtype': 'F8_E4M3', 'shape': [128, 128], "
                           "'data_offsets': [0, len(w)]}, 'm.weight_scale_inv': {'dtype': 'F32', 'shape': [1, 1], "
                           "'data_offsets': [len(w), len(w) + 4]}}).encode()\n"
                           "h += b' ' * (-len(h) % 8)\n"
                           "open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + w + s)\n"),
            fp8);
        QVERIFY2(wrote.isEmpty(), qPrintable(wrote));
        // torch.compile inside DDP (module._orig_mod.) with a TransformerEngine-like _extra_state.
        const QString wrapped = dir.filePath(QStringLiteral("wrapped.pt"));
        wrote = ckpt::test::writeWithPython(
            QStringLiteral("import sys, torch\n"
                           "torch.save({'module._orig_mod.fc.weight': torch.ones(2, 2), "
                           "'module._orig_mod.fc._extra_state': torch.zeros(0, dtype=torch.uint8)}, sys.argv[1])\n"),
            wrapped);
        QVERIFY2(wrote.isEmpty(), qPrintable(wrote));

        auto check = [](const QString& file, bool dequantize, bool extraState, const QString& strips) {
            MainWindow w;
            auto* view = uitest::openOne(w, file);
            QVERIFY(view != nullptr);
            auto* panel = view->exportPanel();
            QSignalSpy planned(panel, &ExportPanel::planReady);
            panel->setPreset(ExportPanel::SingleCard);
            QTRY_VERIFY(planned.count() >= 1);
            auto* combo = panel->findChild<QComboBox*>(QStringLiteral("dequantizeCombo"));
            auto* box = panel->findChild<QCheckBox*>(QStringLiteral("dropExtraStateCheck"));
            QVERIFY(combo != nullptr && box != nullptr);
            QCOMPARE(combo->isVisibleTo(panel), dequantize);
            QCOMPARE(box->isVisibleTo(panel), extraState);
            QCOMPARE(panel->findChild<QLineEdit*>(QStringLiteral("stripEdit"))->text(), strips);
            QCOMPARE(panel->preset(), ExportPanel::SingleCard);
            // The prefixes shown plan exactly what the preset's whole list plans.
            const auto& ck = *view->document()->checkpoint;
            auto mine = transform::makePlan(ck, panel->options());
            auto full = transform::makePlan(ck, transform::singleCardPreset());
            QVERIFY(mine && full);
            QCOMPARE(mine->steps.size(), full->steps.size());
            for (std::size_t i = 0; i < mine->steps.size(); ++i) {
                const auto& a = mine->steps[i];
                const auto& b = full->steps[i];
                QVERIFY(a.kind == b.kind && a.path == b.path && a.before == b.before && a.after == b.after &&
                        a.detail == b.detail);
            }
        };
        check(fp8, true, false, QString());
        check(wrapped, false, true, QStringLiteral("module._orig_mod."));
        // DistributedDataParallel's state dict with its _metadata, the bundled sample.
        check(QStringLiteral(CKPTSCOPE_SOURCE_DIR "/resources/sample/ddp_checkpoint.pt"), false, false,
              QStringLiteral("module."));
    }
};

QTEST_MAIN(TestFp8Export)
#include "tst_fp8export.moc"
