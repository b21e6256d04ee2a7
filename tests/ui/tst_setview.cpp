// A multi-file checkpoint in the window (issues 13 and 27): dropping a Hugging Face sharded set's
// folder, or opening its index or one shard, gives one ordinary document tab: the set read in place
// as one checkpoint, with the key tree, details saying which file holds each tensor, the set's
// findings beside every single-file rule, Test load, Export and a Files panel. A set that cannot be
// read whole still opens from its listing, and says so. Fixtures: tests/fixtures/gen_sharded.py.
#include "checkpoint/checkpoint.h"
#include "detailspanel.h"
#include "dialogs.h"
#include "documentview.h"
#include "exportpanel.h"
#include "findingspanel.h"
#include "mainwindow.h"
#include "set_tab.h"
#include "setfilespanel.h"
#include "uitest.h"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBrowser>
#include <QTreeView>
#include <QTreeWidget>

#include <algorithm>
#include <vector>

namespace {

using ckpt::ui::DocumentView;
using ckpt::ui::MainWindow;
using ckpt::uitest::setTab;

QString set(const char* name)
{
    return QStringLiteral(CKPTSCOPE_SHARDED_FIXTURE_DIR "/") + QLatin1String(name);
}

QString firstShard(const QString& folder)
{
    const QDir dir(folder);
    return dir.filePath(dir.entryList({QStringLiteral("*-of-*")}, QDir::Files).front());
}

// Tensors in the set's shard files, each opened on its own: what the tab must hold.
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

DocumentView* openSet(MainWindow& w, const QString& path)
{
    QSignalSpy opened(&w, &MainWindow::setOpened);
    w.openFiles({path});
    if (!opened.wait(20000)) {
        return nullptr;
    }
    return setTab(w, w.findChild<QTabWidget*>(QStringLiteral("documentTabs"))->currentIndex());
}

bool waitForFindings(DocumentView* v)
{
    if (v->diagnosis()) {
        return true;
    }
    QSignalSpy ready(v, &DocumentView::findingsReady);
    return ready.wait(20000);
}

QStringList findingCodes(const DocumentView& v)
{
    QStringList codes;
    for (const auto& f : v.diagnosis()->list) {
        codes << QString::fromStdString(f.code);
    }
    return codes;
}

QAction* action(const MainWindow& w, const char* name)
{
    return w.findChild<QAction*>(QLatin1String(name));
}

QByteArray sha256(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    QCryptographicHash h(QCryptographicHash::Sha256);
    h.addData(&f);
    return h.result();
}

// Exports the document to `out` with the panel's default options; the panel's result.
QPair<bool, QString> exportTo(DocumentView* v, const QString& out)
{
    auto* panel = v->exportPanel();
    QSignalSpy planned(panel, &ckpt::ui::ExportPanel::planReady);
    auto* edit = panel->findChild<QLineEdit*>(QStringLiteral("outputEdit"));
    edit->setText(out);
    Q_EMIT edit->textEdited(out);
    auto* button = panel->findChild<QPushButton*>(QStringLiteral("exportButton"));
    if (!button->isEnabled() && !planned.wait(20000)) {
        return {false, QStringLiteral("no plan")};
    }
    QSignalSpy finished(panel, &ckpt::ui::ExportPanel::exportFinished);
    button->click();
    if (!finished.wait(60000)) {
        return {false, QStringLiteral("no result")};
    }
    return {finished.at(0).at(0).toBool(), finished.at(0).at(1).toString()};
}

// Every file in `dir`, dot files (a writer's temporary file) included.
QStringList filesIn(const QString& dir)
{
    return QDir(dir).entryList(QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot);
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
        QTest::newRow("a shard") << firstShard(set("hf_st"));
    }

    void folderIndexOrShardOpensTheSet()
    {
        QFETCH(QString, path);
        MainWindow w;
        auto* v = openSet(w, path);
        QVERIFY(v != nullptr);
        const QString folder = QFileInfo(path).isDir() ? path : QFileInfo(path).absolutePath();
        const std::size_t want = tensorsInShards(folder);
        QVERIFY(want > 0);
        const auto& doc = *v->document();
        QCOMPARE(doc.set->listing.rows.size(), want);
        QCOMPARE(doc.checkpoint->tensors.size(), want);
        QVERIFY(doc.set->notWhole.empty());
        QVERIFY(v->unreadableSetBar() == nullptr);
        QVERIFY(w.windowTitle().startsWith(QFileInfo(folder).fileName()));
        QVERIFY(w.findChild<QLabel*>(QStringLiteral("formatLabel"))->text().contains(QStringLiteral("Hugging Face")));
        // Every file of the set is listed, each read.
        QVERIFY(v->setFiles() != nullptr);
        QCOMPARE(static_cast<std::size_t>(v->setFiles()->count()), doc.set->listing.files.size());
        for (int i = 0; i < v->setFiles()->count(); ++i) {
            QCOMPARE(v->setFiles()->list()->topLevelItem(i)->text(ckpt::ui::SetFilesPanel::State),
                     QStringLiteral("read"));
        }
        // The findings are the single-file rules on the whole model plus the set's own: none here.
        QVERIFY(waitForFindings(v));
        QVERIFY2(std::none_of(v->diagnosis()->list.begin(), v->diagnosis()->list.end(),
                              [](const auto& f) { return f.severity == ckpt::diagnose::Severity::Error; }),
                 qPrintable(findingCodes(*v).join(u',')));
        // Opened from a shard, the tab says so and offers that file alone.
        const bool fromShard = path.contains(QStringLiteral("-of-"));
        QCOMPARE(v->openedFile().isEmpty(), !fromShard);
        QCOMPARE(action(w, "openFileAloneAction")->isEnabled(), fromShard);
        // Everything a file's tab offers, a set's does; and its Files panel.
        for (const char* name : {"exportNowAction", "testLoadAction", "compareAction", "setFilesAction"}) {
            QVERIFY2(action(w, name)->isEnabled(), name);
        }
    }

    // The details of a tensor say which file of the set holds its bytes.
    void detailsNameTheFileHoldingATensor()
    {
        MainWindow w;
        auto* v = openSet(w, set("hf_st"));
        QVERIFY(v != nullptr);
        const auto& doc = *v->document();
        const auto& row = doc.set->listing.rows.front();
        QVERIFY(!row.storedIn.empty());
        QVERIFY(v->selectPath(QString::fromStdString(row.key)));
        const QString html = v->details()->findChild<QTextBrowser*>()->toPlainText();
        QVERIFY2(html.contains(QStringLiteral("Stored in")) && html.contains(QString::fromStdString(row.storedIn)),
                 qPrintable(html));
    }

    // A shard missing: the set still opens from its index and the shards present, with a red strip
    // saying why, the shard-missing finding, the missing file in Files, and no test load or export.
    void anIncompleteSetOpensFromItsListing()
    {
        MainWindow w;
        auto* v = openSet(w, set("hf_missing_shard"));
        QVERIFY(v != nullptr);
        const auto& doc = *v->document();
        QVERIFY(!doc.set->notWhole.empty());
        QVERIFY(v->unreadableSetBar() != nullptr);
        QVERIFY(v->unreadableSetBar()->text().contains(QStringLiteral("cannot be read whole")));
        QVERIFY(!doc.checkpoint->tensors.empty());
        QVERIFY(waitForFindings(v));
        QVERIFY2(findingCodes(*v).contains(QStringLiteral("shard-missing")), qPrintable(findingCodes(*v).join(u',')));
        bool missingListed = false;
        for (int i = 0; i < v->setFiles()->count(); ++i) {
            missingListed = missingListed || v->setFiles()->list()->topLevelItem(i)->text(
                                                 ckpt::ui::SetFilesPanel::State) == QStringLiteral("missing");
        }
        QVERIFY(missingListed);
        QVERIFY(!v->sideTabs()->isTabEnabled(1));
        QVERIFY(!v->sideTabs()->isTabEnabled(2));
        QVERIFY(!action(w, "testLoadAction")->isEnabled());
        QVERIFY(!action(w, "exportNowAction")->isEnabled());
        // Statistics read bytes: refused with the reason, never a crash.
        const auto& t = doc.checkpoint->tensors[ckpt::TensorIndex{0}];
        std::vector<std::byte> scratch;
        QVERIFY(!doc.checkpoint->storageData(t.storage, scratch));
    }

    // A head restored from config.json is the embedding's second name: one storage, viewed twice.
    void tiedHeadSharesItsStorage()
    {
        MainWindow w;
        auto* v = openSet(w, set("hf_tied_dropped"));
        QVERIFY(v != nullptr);
        const auto& ck = *v->document()->checkpoint;
        const ckpt::TensorEntry* head = nullptr;
        const ckpt::TensorEntry* embed = nullptr;
        for (const auto& t : ck.tensors) {
            if (t.path.view() == "lm_head.weight") {
                head = &t;
            } else if (t.path.view() == "model.embed_tokens.weight") {
                embed = &t;
            }
        }
        QVERIFY(head != nullptr && embed != nullptr);
        QVERIFY(head->storage == embed->storage);
    }

    // Export writes the whole set as one file torch.load reads, every tensor in it.
    void exportWritesEveryTensor()
    {
        MainWindow w;
        auto* v = openSet(w, set("hf_st"));
        QVERIFY(v != nullptr);
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("whole.pt"));
        const auto [ok, result] = exportTo(v, out);
        QVERIFY2(ok, qPrintable(result));
        auto c = ckpt::openCheckpoint(out.toStdString());
        QVERIFY2(static_cast<bool>(c), c ? "" : c.error().describe().c_str());
        QCOMPARE((*c)->tensors.size(), v->document()->set->listing.rows.size());
        QCOMPARE(filesIn(tmp.path()), QStringList{QStringLiteral("whole.pt")});
    }

    // The README's picture: CKPTSCOPE_SET_SCREENSHOT=FILE.png saves the window with a DDP set open,
    // a tensor's details naming its shard and the single-file rules' findings on the whole set.
    void readmePicture()
    {
        const QString shot = qEnvironmentVariable("CKPTSCOPE_SET_SCREENSHOT");
        if (shot.isEmpty()) {
            QSKIP("CKPTSCOPE_SET_SCREENSHOT is not set");
        }
        MainWindow w;
        w.resize(1280, 760);
        w.show();
        auto* v = openSet(w, set("hf_ddp_cuda"));
        QVERIFY(v != nullptr);
        QVERIFY(waitForFindings(v));
        QVERIFY(findingCodes(*v).contains(QStringLiteral("device-pinned")));
        QVERIFY(v->selectPath(QStringLiteral("module.layers.0.attn.weight")));
        v->showFindings();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY(w.grab().save(shot));
    }

    // An export onto one of the set's own files would replace a shard while reading it: refused,
    // and the shard is untouched.
    void exportOntoAFileOfTheSetIsRefused()
    {
        QTemporaryDir tmp;
        const QString copy = tmp.filePath(QStringLiteral("hf_st"));
        QVERIFY(QDir().mkpath(copy));
        for (const auto& f : QDir(set("hf_st")).entryList(QDir::Files)) {
            QVERIFY(QFile::copy(QDir(set("hf_st")).filePath(f), QDir(copy).filePath(f)));
        }
        MainWindow w;
        auto* v = openSet(w, copy);
        QVERIFY(v != nullptr);
        const QString shard = firstShard(copy);
        const QByteArray before = sha256(shard);
        ckpt::ui::dialogs::setNextConfirm(true);  // "replace it?": yes, and the write still refuses
        ckpt::ui::dialogs::setNextChoice(1);      // a torch file named .safetensors: kept, and still refused
        const auto [ok, result] = exportTo(v, shard);
        QVERIFY(!ok);
        QVERIFY2(result.contains(QStringLiteral("a file of the set")), qPrintable(result));
        QCOMPARE(sha256(shard), before);
        QCOMPARE(filesIn(copy), QDir(set("hf_st")).entryList(QDir::Files));
    }

    // The Files panel opens a shard by itself in a tab of its own.
    void filesPanelOpensAShardAlone()
    {
        MainWindow w;
        auto* v = openSet(w, set("hf_st"));
        QVERIFY(v != nullptr);
        action(w, "setFilesAction")->trigger();
        QCOMPARE(v->sideTabs()->currentWidget(), static_cast<QWidget*>(v->setFiles()));
        auto* list = v->setFiles()->list();
        QTreeWidgetItem* shard = nullptr;
        for (int i = 0; i < list->topLevelItemCount(); ++i) {
            if (list->topLevelItem(i)->text(0).contains(QStringLiteral("-of-"))) {
                shard = list->topLevelItem(i);
            }
        }
        QVERIFY(shard != nullptr);
        list->setCurrentItem(shard);
        QVERIFY(v->setFiles()->openAloneButton()->isEnabled());
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        v->setFiles()->openAloneButton()->click();
        QVERIFY(opened.wait(20000));
        QCOMPARE(w.documentCount(), 2);
        QVERIFY(w.currentView()->document()->set == nullptr);
        QCOMPARE(QFileInfo(QString::fromStdString(w.currentView()->document()->checkpoint->path)).fileName(),
                 shard->text(0));
        // The index is no checkpoint of its own.
        for (int i = 0; i < list->topLevelItemCount(); ++i) {
            if (list->topLevelItem(i)->text(0).endsWith(QStringLiteral(".index.json"))) {
                list->setCurrentItem(list->topLevelItem(i));
                QVERIFY(!v->setFiles()->openAloneButton()->isEnabled());
            }
        }
    }

    // Issue 40: a DCP set with TransformerEngine _extra_state (Megatron-LM's ShardedObjects, one
    // holding a uint8 tensor) reads whole in the window; its extra-state finding's Fix ticks Drop
    // _extra_state under Export, whose plan then drops every such value, and the export holds none.
    void extraStateIsDroppedByItsFix()
    {
        MainWindow w;
        auto* v = openSet(w, QStringLiteral(CKPTSCOPE_DCP_FIXTURE_DIR "/dcp_extra_state"));
        QVERIFY(v != nullptr);
        QVERIFY(v->unreadableSetBar() == nullptr || !v->unreadableSetBar()->isVisible());
        QTRY_VERIFY_WITH_TIMEOUT(v->diagnosis(), 20000);
        auto* findings = v->findings();
        const int extra = findings->indexOfCode(QStringLiteral("extra-state"));
        QVERIFY(extra >= 0);
        findings->select(extra);
        auto* panel = v->exportPanel();
        auto* check = panel->findChild<QCheckBox*>(QStringLiteral("dropExtraStateCheck"));
        QVERIFY(check != nullptr && !check->isChecked());
        QTest::mouseClick(findings->findChild<QPushButton*>(QStringLiteral("fixButton")), Qt::LeftButton);
        QVERIFY(check->isChecked());
        QTemporaryDir tmp;
        const QString out = tmp.filePath(QStringLiteral("model.pt"));
        const auto done = exportTo(v, out);
        QVERIFY2(done.first, qPrintable(done.second));
        auto back = ckpt::openCheckpoint(out.toStdString());
        QVERIFY(static_cast<bool>(back));
        QVERIFY((*back)->find("decoder.layers.linear_fc1.weight").valid());
        QVERIFY(!(*back)->find("decoder.layers.linear_fc1._extra_state/shard_1_2").valid());
    }

    // Issue 40: a set read by its writer's loader never says "torch.load should read this file": the
    // no-findings text names what reads it (here transformers' from_pretrained).
    void noFindingsNamesWhatReadsTheSet()
    {
        MainWindow w;
        auto* v = openSet(w, set("hf_st"));
        QVERIFY(v != nullptr);
        const QString text = noFindingsText(*v->document());
        QVERIFY2(text.contains(QStringLiteral("from_pretrained")) &&
                     !text.contains(QStringLiteral("torch.load should")),
                 qPrintable(text));
        // The Findings tab shows it once the diagnosis is in, unless the set has findings.
        auto* detail = v->findings()->findChild<QLabel*>(QStringLiteral("findingDetail"));
        QTRY_VERIFY_WITH_TIMEOUT(detail->text() == text || v->findings()->count() > 0, 20000);
    }

    // Issue 40: a head restored as a tie (config.json ties it; no shard stores it) is said to be
    // stored under no name of its own, and the Files panel counts for each shard the tensors its file
    // holds, not the restored name.
    void aRestoredTieIsStoredNowhere()
    {
        MainWindow w;
        auto* v = openSet(w, set("hf_tied_dropped"));
        QVERIFY(v != nullptr);
        QVERIFY(v->selectPath(QStringLiteral("lm_head.weight")));
        const QString html = v->details()->findChild<QTextBrowser*>()->toPlainText();
        QVERIFY2(html.contains(QStringLiteral("none under this name: tied to model.embed_tokens.weight")),
                 qPrintable(html));
        auto* list = v->setFiles()->list();
        int shards = 0;
        for (int i = 0; i < list->topLevelItemCount(); ++i) {
            const QString name = list->topLevelItem(i)->text(0);
            if (!name.contains(QStringLiteral("-of-"))) {
                continue;
            }
            auto c = ckpt::openCheckpoint(QDir(set("hf_tied_dropped")).filePath(name).toStdString());
            QVERIFY(static_cast<bool>(c));
            QCOMPARE(list->topLevelItem(i)->data(ckpt::ui::SetFilesPanel::Tensors, Qt::DisplayRole).toInt(),
                     static_cast<int>((*c)->tensors.size()));
            ++shards;
        }
        QVERIFY(shards > 0);
    }

    // File > Open Folder… opens a set, which File > Open's file dialog cannot pick.
    void openFolderOpensTheSet()
    {
        MainWindow w;
        QSignalSpy opened(&w, &MainWindow::setOpened);
        w.show();
        ckpt::ui::dialogs::setNextOpenFolder(set("hf_st"));
        QVERIFY(action(w, "openFolderAction") != nullptr);
        auto* button = w.findChild<QPushButton*>(QStringLiteral("emptyOpenFolderButton"));
        QVERIFY(button != nullptr && button->isVisible());
        QTest::mouseClick(button, Qt::LeftButton);
        QVERIFY(opened.wait(20000));
        QVERIFY(setTab(w, 0) != nullptr);
    }

    // Ctrl+F on a set's tab goes to its filter, which keeps only the matching keys.
    void filterKeysOnASetTab()
    {
        MainWindow w;
        w.show();
        QVERIFY(QTest::qWaitForWindowActive(&w));
        auto* v = openSet(w, set("hf_st"));
        QVERIFY(v != nullptr);
        action(w, "filterAction")->trigger();
        auto* filter = v->findChild<QLineEdit*>(QStringLiteral("filterEdit"));
        QTRY_COMPARE(QApplication::focusWidget(), static_cast<QWidget*>(filter));
        QSignalSpy applied(v, &DocumentView::filterApplied);
        QTest::keyClicks(filter, QStringLiteral("bias"));
        QVERIFY(applied.wait(5000));
        QVERIFY2(v->filterStatus().contains(QStringLiteral(" of ")), qPrintable(v->filterStatus()));
    }
};

QTEST_MAIN(TestSetView)
#include "tst_setview.moc"
