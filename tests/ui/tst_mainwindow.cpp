// The window end to end, as a user drives it: a bad file and a DDP checkpoint dropped on the
// window (real drag-enter/drop events), filtering, selecting, a finding's fix added to the export
// plan, the export written and read back with core's reader, and a batch drop of two files.
#include "checkpoint/checkpoint.h"
#include "detailspanel.h"
#include "dialogs.h"
#include "documentview.h"
#include "exportpanel.h"
#include "findingspanel.h"
#include "keytreemodel.h"
#include "keytreeproxy.h"
#include "mainwindow.h"
#include "uitest.h"

#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QMimeData>
#include <QPointer>
#include <QPushButton>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QTreeView>
#include <QTreeWidget>
#include <QtTest>

#include <memory>

using namespace ckpt;
using namespace ckpt::ui;

namespace {

// Sends the events a file manager's drag produces; returns whether the drop was accepted.
bool dropFiles(QWidget* target, const QStringList& files)
{
    QMimeData mime;
    QList<QUrl> urls;
    for (const auto& f : files) {
        urls << QUrl::fromLocalFile(f);
    }
    mime.setUrls(urls);
    const QPoint pos = target->rect().center();
    QDragEnterEvent enter(pos, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QCoreApplication::sendEvent(target, &enter);
    if (!enter.isAccepted()) {
        return false;
    }
    QDropEvent drop(QPointF(pos), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QCoreApplication::sendEvent(target, &drop);
    return drop.isAccepted();
}

QString copyInto(const QTemporaryDir& dir, const char* fixtureName)
{
    const auto to = dir.filePath(QLatin1String(fixtureName));
    QFile::remove(to);
    if (!QFile::copy(uitest::fixture(fixtureName), to)) {
        return {};
    }
    return to;
}

}  // namespace

class TestMainWindow : public QObject {
    Q_OBJECT
public:
    static void initMain() { uitest::initMain(); }

private Q_SLOTS:
    void init() { QSettings().clear(); }

    void emptyStateSaysWhatToDo()
    {
        MainWindow w;
        w.show();
        auto* hint = w.findChild<QLabel*>(QStringLiteral("dropHint"));
        QVERIFY(hint);
        QVERIFY(hint->isVisible());
        QVERIFY(hint->text().contains(QStringLiteral(".safetensors")));
        QCOMPARE(w.documentCount(), 0);
    }

    void badFileShowsTheCommandLinesError()
    {
        QTemporaryDir dir;
        const auto bad = dir.filePath(QStringLiteral("model.pt"));
        {
            QFile f(bad);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12345\n");
        }
        const auto expected = openCheckpoint(bad.toStdString());
        QVERIFY(!expected);

        MainWindow w;
        w.show();
        QSignalSpy failed(&w, &MainWindow::openFailed);
        QVERIFY(dropFiles(&w, {bad}));
        QTRY_COMPARE(failed.count(), 1);
        QCOMPARE(w.errorText(), QString::fromStdString(expected.error().describe()));
        QCOMPARE(w.documentCount(), 0);

        // The window stays usable: a good file opens afterwards and the banner goes away.
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({uitest::fixture("plain_sd.pt")});
        QTRY_COMPARE(opened.count(), 1);
        QCOMPARE(w.documentCount(), 1);
        QVERIFY(w.errorText().isEmpty());
    }

    void dropFilterSelectFixExportReadBack()
    {
        QTemporaryDir dir;
        MainWindow w;
        w.resize(1400, 900);
        w.show();
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        QVERIFY(dropFiles(&w, {uitest::fixture("ddp_sd_cuda0.pt")}));
        QTRY_COMPARE(opened.count(), 1);
        auto* view = w.currentView();
        QVERIFY(view);
        const auto& in = *view->document()->checkpoint;

        // Status bar: format, tensor count, bytes per device.
        auto* devices = w.findChild<QLabel*>(QStringLiteral("devicesLabel"));
        QVERIFY(devices->text().contains(QStringLiteral("cuda:0")));
        QVERIFY(
            w.findChild<QLabel*>(QStringLiteral("tensorsLabel"))->text().contains(QString::number(in.tensors.size())));

        // Filter as the user types: only keys containing "conv" stay.
        auto* filter = view->findChild<QLineEdit*>(QStringLiteral("filterEdit"));
        QSignalSpy filtered(view, &DocumentView::filterApplied);
        QTest::keyClicks(filter, QStringLiteral("conv"));
        QTRY_VERIFY(filtered.count() >= 1);
        QTRY_COMPARE(view->proxy()->filterText(), QStringLiteral("conv"));
        QVERIFY(view->proxy()->rowCount() > 0);
        QVERIFY(view->proxy()->rowCount() < view->model()->rowCount());
        for (int r = 0; r < view->proxy()->rowCount(); ++r) {
            QVERIFY(
                view->proxy()->index(r, 0).data(KeyTreeModel::PathRole).toString().contains(QStringLiteral("conv")));
        }

        // Select a tensor: its details appear.
        QVERIFY(view->selectPath(QStringLiteral("module.conv.weight")));
        const auto details = view->details()->text();
        QVERIFY2(details.contains(QStringLiteral("float32")), qPrintable(details));
        QVERIFY(details.contains(QStringLiteral("cuda:0")));
        filter->clear();

        // The module-prefix finding: selecting it highlights its keys; Fix adds its fix to the plan.
        // Diagnosis runs after the tree is shown, so its findings may still be on their way.
        QTRY_VERIFY(view->diagnosis());
        auto* findings = view->findings();
        const int prefix = findings->indexOfCode(QStringLiteral("module-prefix"));
        QVERIFY2(prefix >= 0, "ddp_sd_cuda0.pt must report module-prefix");
        findings->select(prefix);
        const auto conv = view->model()->indexOfNode(in.find("module.conv.weight"));
        QVERIFY(conv.data(Qt::BackgroundRole).isValid());

        auto* exportPanel = view->exportPanel();
        exportPanel->setPreset(ExportPanel::Custom);
        QSignalSpy planned(exportPanel, &ExportPanel::planReady);
        QTest::mouseClick(findings->findChild<QPushButton*>(QStringLiteral("fixButton")), Qt::LeftButton);
        QCOMPARE(view->sideTabs()->currentIndex(), 2);  // Export, in its scroll area
        QVERIFY(view->sideTabs()->currentWidget()->isAncestorOf(exportPanel));
        QVERIFY(exportPanel->preset() == ExportPanel::Custom);
        const auto strip = exportPanel->findChild<QLineEdit*>(QStringLiteral("stripEdit"))->text();
        QVERIFY2(strip.split(QStringLiteral(", ")).contains(QStringLiteral("module.")), qPrintable(strip));
        QTRY_VERIFY(planned.count() >= 1);
        QVERIFY(exportPanel->planRowCount() >= 1);

        // The device-pinned finding's fix too (map to cpu), then export.
        if (const int pinned = findings->indexOfCode(QStringLiteral("device-pinned")); pinned >= 0) {
            findings->select(pinned);
            QTest::mouseClick(findings->findChild<QPushButton*>(QStringLiteral("fixButton")), Qt::LeftButton);
        }
        const auto out = dir.filePath(QStringLiteral("fixed.pt"));
        auto* output = exportPanel->findChild<QLineEdit*>(QStringLiteral("outputEdit"));
        output->clear();
        QTest::keyClicks(output, out);
        QSignalSpy exported(exportPanel, &ExportPanel::exportFinished);
        QTest::mouseClick(exportPanel->findChild<QPushButton*>(QStringLiteral("exportButton")), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(exported.count(), 1, 30000);
        QVERIFY2(exported.at(0).at(0).toBool(), qPrintable(exported.at(0).at(1).toString()));
        QVERIFY(exportPanel->findChild<QLabel*>(QStringLiteral("exportResult"))->text().contains(out));

        // Read the written file back with core's reader.
        auto back = openCheckpoint(out.toStdString());
        QVERIFY2(back, back ? "" : back.error().describe().c_str());
        QCOMPARE((*back)->tensors.size(), in.tensors.size());
        for (const auto& t : (*back)->tensors) {
            QVERIFY2(t.path.rfind("module.", 0) != 0, t.path.c_str());
        }
        QVERIFY((*back)->find("conv.weight").valid());
        if (findings->indexOfCode(QStringLiteral("device-pinned")) >= 0) {
            for (const auto& s : (*back)->storages) {
                QCOMPARE(QString::fromStdString(s.location), QStringLiteral("cpu"));
            }
        }
    }

    void batchDropConvertsTwoFiles()
    {
        QTemporaryDir dir;
        const auto a = copyInto(dir, "ddp_sd.pt");
        const auto b = copyInto(dir, "compile_sd.pt");
        QVERIFY(!a.isEmpty() && !b.isEmpty());
        MainWindow w;
        w.show();
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({a});
        QTRY_COMPARE(opened.count(), 1);
        auto* exportPanel = w.currentView()->exportPanel();
        w.currentView()->showExport();
        exportPanel->setPreset(ExportPanel::SingleCard);
        QSignalSpy done(exportPanel, &ExportPanel::batchFinished);
        QVERIFY(dropFiles(exportPanel, {a, b}));
        QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 30000);
        QCOMPARE(w.documentCount(), 1);  // the drop went to the batch, not to "open"

        for (const auto& input : {a, b}) {
            const auto out = exportPanel->defaultOutputFor(input);
            auto back = openCheckpoint(out.toStdString());
            QVERIFY2(back, back ? "" : back.error().describe().c_str());
            QVERIFY(!(*back)->tensors.empty());
            for (const auto& t : (*back)->tensors) {
                QVERIFY2(t.path.rfind("module.", 0) != 0 && t.path.rfind("_orig_mod.", 0) != 0, t.path.c_str());
            }
        }
    }

    // m.pt converts to m.fixed.pt; dropping that file too must not let the first conversion
    // replace the second input (nor convert anything onto a file of the batch).
    void batchNeverReplacesAFileItWasGiven()
    {
        QTemporaryDir dir;
        const auto a = copyInto(dir, "ddp_sd.pt");
        QVERIFY(!a.isEmpty());
        MainWindow w;
        w.show();
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({a});
        QTRY_COMPARE(opened.count(), 1);
        auto* exportPanel = w.currentView()->exportPanel();
        w.currentView()->showExport();
        exportPanel->setPreset(ExportPanel::SingleCard);
        const QString b = exportPanel->defaultOutputFor(a);
        QVERIFY(QFile::copy(a, b));
        const QByteArray before = [&] {
            QFile f(b);
            return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
        }();
        QSignalSpy done(exportPanel, &ExportPanel::batchFinished);
        QVERIFY(dropFiles(exportPanel, {a, b}));
        QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 30000);
        auto* table = exportPanel->findChild<QTableView*>(QStringLiteral("batchTable"));
        QVERIFY(table);
        QCOMPARE(table->model()->rowCount(), 2);
        for (int row = 0; row < 2; ++row) {
            const auto status = table->model()->index(row, 1).data().toString();
            QVERIFY2(status.startsWith(QStringLiteral("refused")), qPrintable(status));
        }
        QFile f(b);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.readAll(), before);
    }

    void severalFilesOpenInTabs()
    {
        MainWindow w;
        w.show();
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        QVERIFY(dropFiles(&w, {uitest::fixture("plain_sd.pt"), uitest::fixture("views.pt")}));
        QTRY_COMPARE(opened.count(), 2);
        QCOMPARE(w.documentCount(), 2);
        // Recent files remember both.
        QCOMPARE(QSettings().value(QStringLiteral("recentFiles")).toStringList().size(), 2);
    }

    // A finding's fix reads as convert's flags, or as what a bare rewrite does: never the options'
    // JSON ("Fix: {}" for legacy-format, {"strip_prefix": ...} for the others).
    void findingsShowTheirFixAsFlags()
    {
        MainWindow w;
        w.show();
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({uitest::fixture("legacy_sd.pt"), uitest::fixture("ddp_sd_cuda0.pt")});
        QTRY_COMPARE(opened.count(), 2);
        for (int tab = 0; tab < 2; ++tab) {
            auto* view = w.documentView(tab);
            QVERIFY(view);
            QTRY_VERIFY(view->diagnosis());
            auto* findings = view->findings();
            QVERIFY(findings->count() > 0);
            for (int i = 0; i < findings->count(); ++i) {
                findings->select(i);
                const QString text = findings->detailText();
                const QString fix = text.mid(text.lastIndexOf(QStringLiteral("Fix: ")));
                QVERIFY2(!fix.contains(QLatin1Char('{')) && !fix.contains(QStringLiteral("&quot;")), qPrintable(fix));
            }
        }
        // The Keys column counts keys, not the state dict named beside them ("All 10 keys": 10).
        for (int tab = 0; tab < 2; ++tab) {
            auto* findings = w.documentView(tab)->findings();
            const int i = findings->indexOfCode(QStringLiteral("module-prefix"));
            if (i >= 0) {
                const auto& ck = *w.documentView(tab)->document()->checkpoint;
                auto* list = findings->findChild<QTreeWidget*>();
                QCOMPARE(list->topLevelItem(i)->text(2), QString::number(ck.tensors.size()));
                QVERIFY(
                    list->topLevelItem(i)->toolTip(0).contains(QStringLiteral("All %1 keys").arg(ck.tensors.size())));
            }
        }
        // Tabs may come in either order: each finding is looked for in both.
        for (const auto& [code, fix] : {std::pair{"module-prefix", "Fix: convert with --strip-prefix module."},
                                        std::pair{"legacy-format", "Fix: write a new copy"}}) {
            int seen = 0;
            for (int tab = 0; tab < 2; ++tab) {
                auto* findings = w.documentView(tab)->findings();
                const int i = findings->indexOfCode(QLatin1String(code));
                if (i >= 0) {
                    findings->select(i);
                    QVERIFY2(findings->detailText().contains(QLatin1String(fix)), qPrintable(findings->detailText()));
                    ++seen;
                }
            }
            QCOMPARE(seen, 1);
        }
    }

    void findingsArriveAfterTheTree()
    {
        MainWindow w;
        w.show();
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({uitest::fixture("ddp_sd_cuda0.pt")});
        QTRY_COMPARE(opened.count(), 1);
        auto* view = w.currentView();
        QVERIFY(view);
        QVERIFY(view->model()->rowCount() > 0);  // the tree does not wait for diagnose
        QSignalSpy ready(view, &DocumentView::findingsReady);
        QTRY_VERIFY(view->diagnosis());
        QVERIFY(ready.count() <= 1);
        QVERIFY(view->findings()->count() > 0);
        QCOMPARE(view->sideTabs()->tabText(view->sideTabs()->indexOf(view->findings())),
                 QStringLiteral("Findings (%1)").arg(view->findings()->count()));
    }

    void closingATabMidDiagnosisIsSafe()
    {
        MainWindow w;
        w.show();
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({uitest::fixture("big40k.pt")});
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 30000);
        delete w.currentView();  // joins the diagnosis; its result must not reach the deleted panels
        QCoreApplication::processEvents();
        QCOMPARE(w.documentCount(), 0);
    }

    void closingDuringWorkIsSafe()
    {
        auto* w = new MainWindow;
        w->show();
        QSignalSpy opened(w, &MainWindow::documentOpened);
        // One document open (its diagnosis may still be running) and two files still loading.
        w->openFiles({uitest::fixture("train_ckpt.pt")});
        QTRY_COMPARE(opened.count(), 1);
        QPointer<DocumentView> view = w->documentView(0);
        QVERIFY(view);
        const std::weak_ptr<const Document> doc = view->document();
        w->openFiles({uitest::fixture("big40k.pt"), uitest::fixture("train_ckpt.pt")});
        QVERIFY(w->isOpening());

        w->close();
        QCOMPARE(w->documentCount(), 0);
        QVERIFY(!view);  // the tab's view is deleted at once, not later
        QVERIFY(w->findChildren<DocumentView*>().isEmpty());
        QVERIFY(!w->isOpening());  // every open job was stopped and joined
        // A load that was not really stopped would now deliver its document and add a tab.
        QTest::qWait(300);
        QCOMPARE(w->documentCount(), 0);
        QCOMPARE(opened.count(), 1);

        delete w;  // nothing may reach the deleted window
        QCoreApplication::processEvents();
        // Only a joined diagnosis lets the last reference go: a worker thread may still be dropping
        // its copy of the task a moment after the join, hence the short retry.
        QTRY_VERIFY_WITH_TIMEOUT(doc.expired(), 1000);
    }
};

QTEST_MAIN(TestMainWindow)
#include "tst_mainwindow.moc"
