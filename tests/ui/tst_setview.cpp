// A multi-file checkpoint in the window (issue 13): dropping a Hugging Face sharded set's folder,
// or opening its index or one shard, gives one tab with the consolidated tree, the set's findings
// and a Consolidate button whose file holds every tensor. Fixtures: tests/fixtures/gen_sharded.py.
#include "checkpoint/checkpoint.h"
#include "dialogs.h"
#include "mainwindow.h"
#include "setview.h"
#include "sharded/listing.h"
#include "text.h"
#include "uitest.h"

#include <QAction>
#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSemaphore>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QThreadPool>
#include <QTreeView>
#include <QTreeWidget>

#include <atomic>
#include <cstdint>
#include <functional>

namespace {

QString set(const char* name)
{
    return QStringLiteral(CKPTSCOPE_SHARDED_FIXTURE_DIR "/") + QLatin1String(name);
}

// Tensors in the set's shard files, each opened on its own: what the tab must list.
std::size_t tensorsInShards(const QString& folder)
{
    std::size_t n = 0;
    const QDir dir(folder);
    for (const auto& f : dir.entryList({QStringLiteral("*-of-*")}, QDir::Files)) {
        auto c = ckpt::openCheckpoint(dir.filePath(f).toStdString());
        if (c) {
            n += (*c)->tensors.size();
        }
    }
    return n;
}

int leafRows(const QAbstractItemModel* m, const QModelIndex& parent = {})
{
    int n = 0;
    for (int r = 0; r < m->rowCount(parent); ++r) {
        const QModelIndex i = m->index(r, 0, parent);
        n += m->rowCount(i) == 0 ? 1 : leafRows(m, i);
    }
    return n;
}

int collapsedFolders(const QTreeView& tree, const QModelIndex& parent = {})
{
    int n = 0;
    const auto* m = tree.model();
    for (int r = 0; r < m->rowCount(parent); ++r) {
        const QModelIndex i = m->index(r, 0, parent);
        if (m->rowCount(i) > 0) {
            n += (tree.isExpanded(i) ? 0 : 1) + collapsedFolders(tree, i);
        }
    }
    return n;
}

ckpt::ui::SetView* openSet(ckpt::ui::MainWindow& w, const QString& path)
{
    QSignalSpy opened(&w, &ckpt::ui::MainWindow::setOpened);
    w.openFiles({path});
    if (!opened.wait(20000)) {
        return nullptr;
    }
    return w.setView(w.documentCount() - 1);
}

// Holds a consolidation's worker at its first progress report past 1 % of the set, until the
// test lets it go on (SetView's test seam); `reached` says it is held.
struct HeldConsolidation {
    QSemaphore reached;
    QSemaphore proceed;
    std::atomic<bool> held{false};

    explicit HeldConsolidation(std::uint64_t total)
    {
        ckpt::ui::SetView::setConsolidateObserverForTest([this, total](std::uint64_t written) {
            if (written * 100 >= total && !held.exchange(true)) {
                reached.release();
                proceed.tryAcquire(1, 30000);  // never forever, even when the test failed
            }
        });
    }
    ~HeldConsolidation() { ckpt::ui::SetView::setConsolidateObserverForTest({}); }
    HeldConsolidation(const HeldConsolidation&) = delete;
    HeldConsolidation& operator=(const HeldConsolidation&) = delete;
    HeldConsolidation(HeldConsolidation&&) = delete;
    HeldConsolidation& operator=(HeldConsolidation&&) = delete;
};

// Every file in `dir`, dot files (a writer's temporary file) included.
QStringList filesIn(const QString& dir)
{
    return QDir(dir).entryList(QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot);
}

QAction* action(const ckpt::ui::MainWindow& w, const char* name)
{
    return w.findChild<QAction*>(QLatin1String(name));
}

}  // namespace

class TestSetView : public QObject {
    Q_OBJECT

public:
    static void initMain() { ckpt::uitest::initMain(); }

private Q_SLOTS:
    void folderIndexOrShardOpensTheSet_data()
    {
        QTest::addColumn<QString>("path");
        QTest::newRow("bin folder") << set("hf_bin");
        QTest::newRow("safetensors folder") << set("hf_st");
        QTest::newRow("index") << set("hf_bin/pytorch_model.bin.index.json");
        const QDir st(set("hf_st"));
        QTest::newRow("a shard") << st.filePath(st.entryList({QStringLiteral("*-of-*")}, QDir::Files).front());
    }

    void folderIndexOrShardOpensTheSet()
    {
        QFETCH(QString, path);
        ckpt::ui::MainWindow w;
        auto* view = openSet(w, path);
        QVERIFY(view != nullptr);
        const QString folder = QFileInfo(path).isDir() ? path : QFileInfo(path).absolutePath();
        const std::size_t want = tensorsInShards(folder);
        QVERIFY(want > 0);
        QCOMPARE(view->listing().rows.size(), want);
        QCOMPARE(static_cast<std::size_t>(leafRows(view->tree()->model())), want);
        // A set this small opens with every folder expanded: each tensor row is in view.
        QCOMPARE(collapsedFolders(*view->tree()), 0);
        QVERIFY(w.windowTitle().startsWith(QFileInfo(folder).fileName()));
        QCOMPARE(view->findingsList()->topLevelItemCount(), 1);  // "No problems found"
        QVERIFY(view->consolidateButton()->isEnabled());
        QVERIFY(view->findingsList()->topLevelItem(0)->toolTip(0).isEmpty());
    }

    void findingsOfAnIncompleteSet()
    {
        ckpt::ui::MainWindow w;
        auto* view = openSet(w, set("hf_missing_shard"));
        QVERIFY(view != nullptr);
        bool missing = false;
        for (int i = 0; i < view->findingsList()->topLevelItemCount(); ++i) {
            missing = missing || view->findingsList()->topLevelItem(i)->toolTip(0) == QStringLiteral("shard-missing");
        }
        QVERIFY(missing);
        // The button does not offer a write that can only fail, and says why.
        QVERIFY(!view->consolidateButton()->isEnabled());
        QVERIFY2(view->consolidateButton()->toolTip().contains(QStringLiteral("cannot be consolidated")),
                 qPrintable(view->consolidateButton()->toolTip()));
        // Consolidating refuses an incomplete set and writes nothing.
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("whole.pt"));
        QSignalSpy failed(view, &ckpt::ui::SetView::failed);
        view->consolidateTo(out);
        QVERIFY(failed.wait(20000));
        QVERIFY(!QFileInfo::exists(out));
    }

    // A head restored from config.json is labelled as its input's second name, and neither its
    // folder nor the set header counts its bytes again.
    void tiedHeadIsLabelledInTheTree()
    {
        const auto loc = ckpt::sharded::detectSet(set("hf_tied_dropped").toStdString());
        auto listing = ckpt::sharded::listSet(loc);
        QVERIFY(static_cast<bool>(listing));
        const auto shared = std::make_shared<const ckpt::sharded::SetListing>(std::move(*listing));
        ckpt::ui::SetView view(loc, shared);
        const auto* model = view.tree()->model();
        QModelIndex head;
        for (int r = 0; r < model->rowCount(); ++r) {
            if (model->index(r, 0).data().toString() == QStringLiteral("lm_head")) {
                head = model->index(r, 0);
            }
        }
        QVERIFY(head.isValid());
        QCOMPARE(model->index(0, 0, head).data().toString(), QStringLiteral("weight"));
        QCOMPARE(model->index(0, 5, head).data().toString(), QStringLiteral("tied to model.embed_tokens.weight"));
        QCOMPARE(model->index(head.row(), 4).data().toString(), ckpt::ui::humanSize(0));
        bool headerHasTotal = false;
        for (const auto* label : view.findChildren<QLabel*>()) {
            headerHasTotal = headerHasTotal || label->text().contains(ckpt::ui::humanSize(shared->totalBytes()));
        }
        QVERIFY(headerHasTotal);
    }

    // The README's picture: CKPTSCOPE_SET_SCREENSHOT=FILE.png saves the window with a set open.
    void consolidateWritesEveryTensor()
    {
        ckpt::ui::MainWindow w;
        auto* view = openSet(w, set("hf_st"));
        QVERIFY(view != nullptr);
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("whole.pt"));
        QSignalSpy done(view, &ckpt::ui::SetView::consolidated);
        view->consolidateTo(out);
        QVERIFY(done.wait(60000));
        auto c = ckpt::openCheckpoint(out.toStdString());
        QVERIFY2(static_cast<bool>(c), c ? "" : c.error().describe().c_str());
        QCOMPARE((*c)->tensors.size(), view->listing().rows.size());
        QVERIFY(view->statusText().startsWith(QStringLiteral("Wrote whole.pt")));
        const QString shot = qEnvironmentVariable("CKPTSCOPE_SET_SCREENSHOT");
        if (!shot.isEmpty()) {
            w.resize(1280, 760);
            w.show();
            QVERIFY(QTest::qWaitForWindowExposed(&w));
            QVERIFY(w.grab().save(shot));
        }
    }

    // File > Open Folder… opens a set, which File > Open's file dialog cannot pick.
    void openFolderOpensTheSet()
    {
        ckpt::ui::MainWindow w;
        QSignalSpy opened(&w, &ckpt::ui::MainWindow::setOpened);
        w.show();
        ckpt::ui::dialogs::setNextOpenFolder(set("hf_st"));
        QVERIFY(action(w, "openFolderAction") != nullptr);
        // The empty window offers it beside Open a file….
        auto* button = w.findChild<QPushButton*>(QStringLiteral("emptyOpenFolderButton"));
        QVERIFY(button != nullptr && button->isVisible());
        QTest::mouseClick(button, Qt::LeftButton);
        QVERIFY(opened.wait(20000));
        QVERIFY(w.setView(0) != nullptr);
    }

    // A set tab has no test load, export or compare: the menus do not offer them there, and do
    // again on a file's tab.
    void setTabMenusOfferOnlyWhatWorks()
    {
        ckpt::ui::MainWindow w;
        QVERIFY(openSet(w, set("hf_st")) != nullptr);
        const char* fileOnly[] = {"exportNowAction", "testLoadAction", "compareAction"};
        for (const char* name : fileOnly) {
            QVERIFY2(!action(w, name)->isEnabled(), name);
        }
        QSignalSpy opened(&w, &ckpt::ui::MainWindow::documentOpened);
        w.openFiles({ckpt::uitest::fixture("plain_sd.pt")});
        QVERIFY(opened.wait(20000));
        for (const char* name : fileOnly) {
            QVERIFY2(action(w, name)->isEnabled(), name);
        }
        w.findChild<QTabWidget*>(QStringLiteral("documentTabs"))->setCurrentIndex(0);
        for (const char* name : fileOnly) {
            QVERIFY2(!action(w, name)->isEnabled(), name);
        }
    }

    // Ctrl+F on a set tab goes to its filter, which keeps only the matching keys.
    void filterKeysOnASetTab()
    {
        ckpt::ui::MainWindow w;
        w.show();
        QVERIFY(QTest::qWaitForWindowActive(&w));
        auto* view = openSet(w, set("hf_st"));
        QVERIFY(view != nullptr);
        action(w, "filterAction")->trigger();
        QTRY_COMPARE(QApplication::focusWidget(), view->filterEdit());
        const int all = leafRows(view->tree()->model());
        QTest::keyClicks(view->filterEdit(), QStringLiteral("bias"));
        const int kept = leafRows(view->tree()->model());
        QVERIFY(kept > 0);
        QVERIFY(kept < all);
        const auto* m = view->tree()->model();
        std::function<void(const QModelIndex&)> check = [&](const QModelIndex& parent) {
            for (int r = 0; r < m->rowCount(parent); ++r) {
                const QModelIndex i = m->index(r, 0, parent);
                if (m->rowCount(i) == 0) {
                    QVERIFY(i.data(Qt::ToolTipRole).toString().contains(QStringLiteral("bias")));
                }
                check(i);
            }
        };
        check({});
    }

    // A finding's explanation is readable in full, not cut at one line with only its code as a
    // tooltip: the details beside the list wrap the selected one's whole text.
    void findingTextIsReadableInFull()
    {
        ckpt::ui::MainWindow w;
        w.resize(1024, 700);
        w.show();
        auto* view = openSet(w, set("hf_missing_shard"));
        QVERIFY(view != nullptr);
        QVERIFY(!view->listing().findings.empty());
        auto* list = view->findingsList();
        for (int i = 0; i < list->topLevelItemCount(); ++i) {
            list->setCurrentItem(list->topLevelItem(i));
            const auto& f = view->listing().findings.at(static_cast<std::size_t>(i));
            const QString shown = view->findingDetails()->text();
            QVERIFY2(shown.contains(QString::fromStdString(f.detail).toHtmlEscaped()), qPrintable(shown));
            QVERIFY(shown.contains(QString::fromStdString(f.code)));
        }
        QVERIFY(view->findingDetails()->wordWrap());
        QVERIFY(view->findingDetails()->isVisible());
    }

    // Consolidate's progress moves while it writes, and Cancel stops it leaving no file behind.
    void consolidateShowsProgressAndCancels()
    {
        ckpt::ui::MainWindow w;
        w.show();
        auto* view = openSet(w, set("hf_st"));
        QVERIFY(view != nullptr);
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("whole.pt"));
        HeldConsolidation hold(view->listing().totalBytes());
        QSignalSpy failed(view, &ckpt::ui::SetView::failed);
        view->consolidateTo(out);
        QVERIFY(hold.reached.tryAcquire(1, 20000));
        QVERIFY(view->cancelButton()->isVisible());
        QTRY_VERIFY(view->progressBar()->value() > 0);
        QTest::mouseClick(view->cancelButton(), Qt::LeftButton);
        hold.proceed.release();
        QVERIFY(failed.wait(20000));
        QVERIFY2(failed.at(0).at(0).toString().contains(QStringLiteral("Cancelled")),
                 qPrintable(failed.at(0).at(0).toString()));
        QVERIFY(!view->isConsolidating());
        QVERIFY(view->consolidateButton()->isEnabled());
        QCOMPARE(filesIn(tmp.path()), QStringList());
    }

    // Closing the tab mid-write neither waits for the writer (it is held here: a close that
    // waited would not return) nor leaves its file.
    void closingTheTabStopsConsolidateWithoutWaiting()
    {
        ckpt::ui::MainWindow w;
        w.show();
        auto* view = openSet(w, set("hf_st"));
        QVERIFY(view != nullptr);
        QTemporaryDir tmp;
        HeldConsolidation hold(view->listing().totalBytes());
        view->consolidateTo(tmp.filePath(QStringLiteral("whole.pt")));
        QVERIFY(hold.reached.tryAcquire(1, 20000));
        QElapsedTimer closing;
        closing.start();
        Q_EMIT w.findChild<QTabWidget*>(QStringLiteral("documentTabs"))->tabCloseRequested(0);
        QVERIFY2(closing.elapsed() < 5000, "closing the tab waited for the consolidation");
        QCOMPARE(w.documentCount(), 0);
        hold.proceed.release();
        QVERIFY(QThreadPool::globalInstance()->waitForDone(20000));
        QCOMPARE(filesIn(tmp.path()), QStringList());
    }
};

QTEST_MAIN(TestSetView)
#include "tst_setview.moc"
