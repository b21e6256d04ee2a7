// The window's busy text follows the command line's progress rule (issue 43: "the command line and
// the window share one rule"): an export under way says the bytes written of the total and the
// percentage in the panel's result line, as `convert` says them on a terminal, and the result line
// says what was written once it ends. CKPTSCOPE_PROGRESS_AFTER_MS=0 (set before anything reads it,
// as tst_progress_tty sets it for the command line) shows work that lasts less than a second.
#include "documentview.h"
#include "exportpanel.h"
#include "mainwindow.h"
#include "python_file.h"
#include "uitest.h"
#include "window_open.h"

#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

using namespace ckpt;
using namespace ckpt::ui;

class TestBusyText : public QObject {
    Q_OBJECT
public:
    static void initMain()
    {
        qputenv("CKPTSCOPE_PROGRESS_AFTER_MS", "0");
        uitest::initMain();
    }

private Q_SLOTS:
    void exportSaysWhatTheCommandLineSays()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("ddp.pt"));
        const QString wrote = ckpt::test::writeWithPython(
            QStringLiteral(
                "import sys, torch\n"
                "torch.save({f'module.l{i}.weight': torch.ones(512, 1024) for i in range(8)}, sys.argv[1])\n"),
            file);
        QVERIFY2(wrote.isEmpty(), qPrintable(wrote));
        MainWindow w;
        auto* view = uitest::openOne(w, file);
        QVERIFY(view != nullptr);
        auto* panel = view->exportPanel();
        QSignalSpy planned(panel, &ExportPanel::planReady);
        panel->setPreset(ExportPanel::SingleCard);
        QTRY_VERIFY(planned.count() >= 1);
        const QString out = dir.filePath(QStringLiteral("single.pt"));
        auto* output = panel->findChild<QLineEdit*>(QStringLiteral("outputEdit"));
        output->clear();
        QTest::keyClicks(output, out);
        QSignalSpy progress(panel, &ExportPanel::exportProgress);
        QSignalSpy exported(panel, &ExportPanel::exportFinished);
        QTest::mouseClick(panel->findChild<QPushButton*>(QStringLiteral("exportButton")), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(exported.count(), 1, 60000);
        QVERIFY2(exported.at(0).at(0).toBool(), qPrintable(exported.at(0).at(1).toString()));
        // "Writing OUT: 4.00 MiB of 16.0 MiB (25%)", a rate and the time left once measured.
        QVERIFY(progress.count() >= 1);
        const QRegularExpression line(
            QStringLiteral("^Writing .*single\\.pt: [0-9.]+ [KMG]?i?B of 16\\.0 MiB \\([0-9]+%\\)"));
        for (const auto& args : progress) {
            QVERIFY2(line.match(args.at(0).toString()).hasMatch(), qPrintable(args.at(0).toString()));
        }
        // Once written, the result line says so, not the last progress text.
        bool wroteShown = false;
        for (auto* label : panel->findChildren<QLabel*>()) {
            wroteShown = wroteShown || label->text().startsWith(QStringLiteral("Wrote <b>"));
        }
        QVERIFY(wroteShown);
    }
};

QTEST_MAIN(TestBusyText)
#include "tst_busytext.moc"
