// The window's menus as a new user meets them (issue 25, "The window"): Open and Compare list
// every kind of checkpoint file from the one list, Run > Export says where it wrote, files opened
// together come in the order asked for, Open Recent tells same-named files apart, and the compare
// window fits a small screen and closes with Esc.
#include "checkpoint/extensions.h"
#include "compareview.h"
#include "dialogs.h"
#include "documentview.h"
#include "exportpanel.h"
#include "findingspanel.h"
#include "mainwindow.h"
#include "memorychart.h"
#include "planmodel.h"
#include "testloadpanel.h"
#include "uitest.h"
#include "window_open.h"

#include <QAction>
#include <QFile>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPointer>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QSettings>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>

using namespace ckpt;
using namespace ckpt::ui;

namespace {

QAction* action(const MainWindow& w, const char* name)
{
    return w.findChild<QAction*>(QLatin1String(name));
}

using uitest::openOne;

}  // namespace

class TestWindowMenus : public QObject {
    Q_OBJECT
public:
    static void initMain() { uitest::initMain(); }

private Q_SLOTS:
    void init() { QSettings().clear(); }

    // File > Open and Compare With… ask with the same filter, and it names every extension of
    // core's one list: the files of a DCP folder (.metadata, .distcp) too.
    void openAndCompareListEveryKindOfFile()
    {
        const QString filter = dialogs::checkpointFilter();
        for (const char* ext : {".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".pt2", ".ptl", ".t7", ".gz", ".tar",
                                ".distcp", ".th", ".metadata"}) {
            QVERIFY2(filter.contains(QStringLiteral("*") + QLatin1String(ext)), ext);
        }
        for (const auto ext : kCheckpointFileExtensions) {
            QVERIFY(dialogs::checkpointPatterns().contains(QStringLiteral("*") + QLatin1String(ext.data())));
        }
        // A DCP folder's `.metadata` is a name the filter matches (QDir's wildcard).
        QVERIFY(QDir::match(dialogs::openablePatterns(), QStringLiteral(".metadata")));
        QVERIFY(QDir::match(dialogs::openablePatterns(), QStringLiteral("__0_0.distcp")));

        MainWindow w;
        dialogs::setNextOpenFileNames({});
        action(w, "openAction")->trigger();
        QCOMPARE(dialogs::lastOpenFilter(), filter);
        QVERIFY(openOne(w, uitest::fixture("plain_sd.pt")) != nullptr);
        dialogs::setNextOpenFileNames({});
        action(w, "compareAction")->trigger();
        QCOMPARE(dialogs::lastOpenFilter(), filter);
    }

    // Run > Export the Fixed Copy (Ctrl+Shift+E) writes without the panel in view: the status
    // bar says where.
    void exportShortcutSaysWhereItWrote()
    {
        QTemporaryDir dir;
        const QString in = dir.filePath(QStringLiteral("ddp.pt"));
        QVERIFY(QFile::copy(uitest::fixture("ddp_sd_cuda0.pt"), in));
        MainWindow w;
        w.show();
        auto* view = openOne(w, in);
        QVERIFY(view != nullptr);
        auto* panel = view->exportPanel();
        QTRY_VERIFY_WITH_TIMEOUT(panel->findChild<QPushButton*>(QStringLiteral("exportButton"))->isEnabled(), 20000);
        const QString out = dir.filePath(QStringLiteral("written.pt"));
        auto* output = panel->findChild<QLineEdit*>(QStringLiteral("outputEdit"));
        output->clear();
        QTest::keyClicks(output, out);  // typed: the panel keeps it when the plan changes
        QSignalSpy exported(panel, &ExportPanel::exportFinished);
        action(w, "exportNowAction")->trigger();
        QVERIFY(exported.wait(30000));
        QVERIFY2(exported.at(0).at(0).toBool(), qPrintable(exported.at(0).at(1).toString()));
        QVERIFY(QFileInfo::exists(out));
        QVERIFY2(w.statusBar()->currentMessage().contains(out), qPrintable(w.statusBar()->currentMessage()));
    }

    // Files are read in parallel and the small ones finish first; the tabs still come in the order
    // of the command line's arguments.
    void filesOpenedTogetherKeepTheirOrder()
    {
        const QStringList files{uitest::fixture("big40k.pt"), uitest::fixture("train_ckpt.pt"),
                                uitest::fixture("plain_sd.pt"), uitest::fixture("views.pt")};
        MainWindow w;
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles(files);
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), files.size(), 30000);
        QStringList tabs;
        for (int i = 0; i < w.documentCount(); ++i) {
            tabs << QFileInfo(QString::fromStdString(w.documentView(i)->document()->checkpoint->path)).fileName();
        }
        QStringList want;
        for (const auto& f : files) {
            want << QFileInfo(f).fileName();
        }
        QCOMPARE(tabs, want);
    }

    // Every rank file is model_states.pt: Open Recent names the folder as well.
    void openRecentNamesTheFolder()
    {
        QTemporaryDir dir;
        QVERIFY(QDir(dir.path()).mkpath(QStringLiteral("rank0")));
        const QString file = dir.filePath(QStringLiteral("rank0/model_states.pt"));
        QVERIFY(QFile::copy(uitest::fixture("plain_sd.pt"), file));
        MainWindow w;
        QVERIFY(openOne(w, file) != nullptr);
        auto* recent = w.findChild<QMenu*>(QStringLiteral("recentMenu"));
        QVERIFY(!recent->actions().isEmpty());
        const QString text = recent->actions().front()->text();
        QVERIFY2(text.contains(QStringLiteral("model_states.pt")), qPrintable(text));
        QVERIFY2(text.contains(QStringLiteral("rank0")), qPrintable(text));
    }

    // At 1024×700 the findings list has at least three rows in view, and the selected finding's
    // text (down to its fix line) is never clipped: it wraps and scrolls.
    void findingsReadableAt1024x700()
    {
        MainWindow w;
        w.resize(1024, 700);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* view = openOne(w, uitest::fixture("ddp_sd_cuda0.pt"));
        QVERIFY(view != nullptr);
        QTRY_VERIFY_WITH_TIMEOUT(view->diagnosis() != nullptr, 20000);
        view->showFindings();
        QCoreApplication::processEvents();
        auto* list = view->findings()->findChild<QTreeWidget*>(QStringLiteral("findingsList"));
        QVERIFY(list->topLevelItemCount() > 0);
        const int rowHeight = list->visualItemRect(list->topLevelItem(0)).height();
        QVERIFY(rowHeight > 0);
        QVERIFY2(list->viewport()->height() >= 3 * rowHeight,
                 qPrintable(QStringLiteral("%1 px for rows of %2").arg(list->viewport()->height()).arg(rowHeight)));
        view->findings()->select(view->findings()->indexOfCode(QStringLiteral("module-prefix")));
        QCoreApplication::processEvents();
        auto* detail = view->findings()->findChild<QLabel*>(QStringLiteral("findingDetail"));
        auto* scroll = view->findings()->findChild<QScrollArea*>(QStringLiteral("findingDetailScroll"));
        QVERIFY(scroll != nullptr);
        QVERIFY(scroll->isAncestorOf(detail));
        QVERIFY(detail->text().contains(QStringLiteral("Fix:")));
        QVERIFY(detail->height() >= detail->heightForWidth(detail->width()));
    }

    // At 1366×768 (less a title bar) the Export button is in view when the Export tab is shown, and
    // the test load's summary when that tab is.
    void exportAndTestLoadResultsInViewAt1366x768()
    {
        MainWindow w;
        w.resize(1366, 740);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* view = openOne(w, uitest::fixture("ddp_sd_cuda0.pt"));
        QVERIFY(view != nullptr);
        view->showExport();
        QCoreApplication::processEvents();
        auto* button = view->exportPanel()->findChild<QPushButton*>(QStringLiteral("exportButton"));
        QVERIFY(button->isVisible());
        QCOMPARE(button->visibleRegion().boundingRect().size(), button->size());

        // The test load's summary is in view too, above its chart.
        view->showTestLoad();
        QCoreApplication::processEvents();
        auto* summary = view->testLoad()->findChild<QLabel*>(QStringLiteral("loadSummary"));
        auto* chart = view->testLoad()->chart();
        QVERIFY(summary->geometry().bottom() <= chart->geometry().top());
        QVERIFY(!summary->visibleRegion().isEmpty() || summary->height() == 0);
    }

    // A plan row shows the whole key it is about: a key wraps at its dots, never elided.
    void planKeysWrapInsteadOfEliding()
    {
        MainWindow w;
        w.resize(1024, 700);
        w.show();
        auto* view = openOne(w, uitest::fixture("ddp_sd_cuda0.pt"));
        QVERIFY(view != nullptr);
        view->showExport();
        auto* table = view->exportPanel()->findChild<QTableView*>(QStringLiteral("planTable"));
        QTRY_VERIFY_WITH_TIMEOUT(table->model()->rowCount() > 0, 20000);
        int row = -1;
        for (int r = 0; r < table->model()->rowCount() && row < 0; ++r) {
            if (table->model()->index(r, PlanModel::Key).data().toString().startsWith(QStringLiteral("module."))) {
                row = r;
            }
        }
        QVERIFY(row >= 0);
        const QString key = table->model()->index(row, PlanModel::Key).data().toString();
        const int narrow = table->fontMetrics().horizontalAdvance(key) / 2;
        table->horizontalHeader()->resizeSection(PlanModel::Key, narrow);
        table->resizeRowsToContents();
        QVERIFY2(table->rowHeight(row) >= 2 * table->fontMetrics().height(),
                 qPrintable(QStringLiteral("%1: %2 px").arg(key).arg(table->rowHeight(row))));
    }

    // The compare window is never larger than the screen it opens on, and Esc closes it.
    void compareWindowFitsTheScreenAndEscCloses()
    {
        MainWindow w;
        w.show();
        QVERIFY(openOne(w, uitest::fixture("plain_sd.pt")) != nullptr);
        const QSize available = w.screen()->availableGeometry().size();
        QVERIFY(compareWindowSize(&w).width() <= available.width());
        QVERIFY(compareWindowSize(&w).height() < available.height());

        dialogs::setNextOpenFileNames({uitest::fixture("views.pt")});
        QPointer<CompareView> compare = openCompareWindow(&w, w.currentView()->document()->checkpoint);
        QVERIFY(compare);
        QVERIFY(compare->width() <= available.width());
        QVERIFY(compare->height() < available.height());
        // The window manager activates a new window; the offscreen platform needs telling.
        QApplication::setActiveWindow(compare);
        QTRY_COMPARE(QApplication::activeWindow(), compare.data());
        QTest::keyClick(compare, Qt::Key_Escape);
        QTRY_VERIFY(!compare);  // closed, and deleted on close
    }
};

QTEST_MAIN(TestWindowMenus)
#include "tst_windowmenus.moc"
