// The window walked again as a new user (issue 39): settings that changed by themselves (the wheel
// over an unfocused combo box, a preset carried from one tab to the next), a size saved on a larger
// screen, errors of command-line files lost behind the next tab, model folders without their files,
// names cut where they differ, the export panel scrolling away from its result, and the smaller
// things: a file opened twice, where Open starts, Ctrl+PgDown, a status line about no tab, the Help
// menu, Simulate DDP Ranks in the Run menu, the remap row, the strip field, plain words for a text
// file and an empty folder.
#include "columnfit.h"
#include "compareview.h"
#include "dialogs.h"
#include "document.h"
#include "documentview.h"
#include "exportpanel.h"
#include "findingspanel.h"
#include "folderfilespanel.h"
#include "helpdialogs.h"
#include "keytreemodel.h"
#include "mainwindow.h"
#include "planmodel.h"
#include "screenfit.h"
#include "testloadpanel.h"
#include "uitest.h"
#include "window_open.h"

#include <QAction>
#include <QApplication>
#include <QComboBox>
#include <QDialog>
#include <QDir>
#include <QFile>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSet>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QTreeView>
#include <QTreeWidget>
#include <QWheelEvent>
#include <QtTest>

using namespace ckpt;
using namespace ckpt::ui;

namespace {

QAction* action(const MainWindow& w, const char* name)
{
    return w.findChild<QAction*>(QLatin1String(name));
}

// A turn of the wheel over the middle of `target`, as the mouse sends it; whether it was taken.
bool wheel(QWidget* target)
{
    const QPointF pos = QRectF(target->rect()).center();
    QWheelEvent event(pos, target->mapToGlobal(pos), QPoint(), QPoint(0, -120), Qt::NoButton, Qt::NoModifier,
                      Qt::NoScrollPhase, false);
    QCoreApplication::sendEvent(target, &event);
    return event.isAccepted();
}

// A state dict with the keys of a Llama model's first layers, written by PyTorch.
bool writeLlamaLike(const QString& path, int layers = 3)
{
    QProcess python;
    python.start(QStringLiteral(CKPTSCOPE_PYTHON), {QStringLiteral("-c"), QStringLiteral(R"(
import sys, torch
sd = {"model.embed_tokens.weight": torch.zeros(128, 64)}
for i in range(int(sys.argv[2])):
    p = f"model.layers.{i}."
    for n in ("q", "k", "v", "o"):
        sd[p + f"self_attn.{n}_proj.weight"] = torch.zeros(64, 64)
    for n, s in (("gate", (128, 64)), ("up", (128, 64)), ("down", (64, 128))):
        sd[p + f"mlp.{n}_proj.weight"] = torch.zeros(*s)
    sd[p + "input_layernorm.weight"] = torch.ones(64)
    sd[p + "post_attention_layernorm.weight"] = torch.ones(64)
sd["model.norm.weight"] = torch.ones(64)
sd["lm_head.weight"] = torch.zeros(128, 64)
torch.save(sd, sys.argv[1])
)"),
                                                    path, QString::number(layers)});
    return python.waitForFinished(120000) && python.exitCode() == 0;
}

QString copied(const QTemporaryDir& dir, const char* fixture, const QString& as)
{
    const QString to = dir.filePath(as);
    QDir().mkpath(QFileInfo(to).absolutePath());
    return QFile::copy(uitest::fixture(fixture), to) ? to : QString();
}

DocumentView* waitForPlan(DocumentView* view)
{
    if (view == nullptr) {
        return nullptr;
    }
    // Export is enabled once the plan is made.
    auto* exportButton = view->exportPanel()->findChild<QPushButton*>(QStringLiteral("exportButton"));
    if (!QTest::qWaitFor([&] { return exportButton->isEnabled(); }, 20000)) {
        return nullptr;
    }
    return view;
}

// The view's own item options, which it keeps protected: reached through a pointer to the member.
struct ViewOption : QTreeView {
    using QTreeView::initViewItemOption;
};

}  // namespace

class TestNewUser : public QObject {
    Q_OBJECT
public:
    static void initMain() { uitest::initMain(); }

private Q_SLOTS:
    void init()
    {
        QSettings().clear();
        dialogs::setRecordErrors(true);
    }

    // 1. One pass of the wheel over the Export panel turned Format into safetensors and Preset into
    // Custom. An unfocused combo or spin box now leaves the wheel to the panel's scroll area (the event
    // is not taken, so Qt hands it on); one the user clicked into still turns with it.
    void wheelOverUnfocusedControlsChangesNothing()
    {
        MainWindow w;
        w.resize(1024, 700);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* view = waitForPlan(uitest::openOne(w, uitest::fixture("ddp_sd_cuda0.pt")));
        QVERIFY(view != nullptr);
        view->showExport();
        auto* panel = view->exportPanel();
        auto* format = panel->findChild<QComboBox*>(QStringLiteral("formatCombo"));
        auto* preset = panel->findChild<QComboBox*>(QStringLiteral("presetCombo"));
        view->tree()->setFocus();
        for (auto* box : {format, preset}) {
            const int before = box->currentIndex();
            QVERIFY2(!wheel(box), qPrintable(box->objectName()));  // left to the scroll area
            QCOMPARE(box->currentIndex(), before);
            QCOMPARE(box->focusPolicy(), Qt::StrongFocus);  // the wheel gives it no focus either
        }
        QCOMPARE(panel->preset(), ExportPanel::SingleCard);
        QCOMPARE(panel->options().format, transform::OutputFormat::Torch);

        view->showTestLoad();
        auto* ranks = view->testLoad()->findChild<QSpinBox*>(QStringLiteral("ddpRanksSpin"));
        auto* device = view->testLoad()->findChild<QComboBox*>(QStringLiteral("deviceCombo"));
        const int rankCount = ranks->value();
        QVERIFY(!wheel(ranks));
        QCOMPARE(ranks->value(), rankCount);
        QVERIFY(!wheel(device));

        // Clicked into, the control is the user's, and the wheel turns it.
        view->showExport();
        format->setFocus();
        QVERIFY(format->hasFocus());
        QVERIFY(wheel(format));
        QCOMPARE(format->currentIndex(), 1);
    }

    // 1. A safetensors file named llama.pt: neither torch.load nor `check` said anything. Export
    // asks, and renames, keeps or writes nothing as answered.
    void exportAsksWhenTheNameSaysTheOtherFormat()
    {
        QTemporaryDir dir;
        const QString in = copied(dir, "ddp_sd_cuda0.pt", QStringLiteral("ddp.pt"));
        MainWindow w;
        w.show();
        auto* view = waitForPlan(uitest::openOne(w, in));
        QVERIFY(view != nullptr);
        auto* panel = view->exportPanel();
        panel->findChild<QComboBox*>(QStringLiteral("formatCombo"))->setCurrentIndex(1);  // safetensors
        auto* output = panel->findChild<QLineEdit*>(QStringLiteral("outputEdit"));
        auto* result = panel->findChild<QLabel*>(QStringLiteral("exportResult"));
        QVERIFY(waitForPlan(view) != nullptr);
        const QString llama = dir.filePath(QStringLiteral("llama.pt"));
        output->setText(llama);

        dialogs::setNextChoice(-1);  // closed: nothing written
        panel->requestExport();
        QVERIFY2(dialogs::lastChoiceText().contains(QStringLiteral("llama.pt is a torch.save name")) &&
                     dialogs::lastChoiceText().contains(QStringLiteral("torch.load cannot read")),
                 qPrintable(dialogs::lastChoiceText()));
        QVERIFY(dialogs::lastChoiceAnswers().value(0).contains(QStringLiteral("llama.safetensors")));
        QVERIFY(result->text().contains(QStringLiteral("Not written")));
        QVERIFY(!QFileInfo::exists(llama));

        QSignalSpy exported(panel, &ExportPanel::exportFinished);
        dialogs::setNextChoice(0);  // renamed
        panel->requestExport();
        QVERIFY(exported.wait(30000));
        QCOMPARE(exported.at(0).at(1).toString(), dir.filePath(QStringLiteral("llama.safetensors")));
        QCOMPARE(output->text(), dir.filePath(QStringLiteral("llama.safetensors")));
        QVERIFY(!QFileInfo::exists(llama));

        // A name that agrees asks nothing (asked, the armed answer would have written nothing).
        dialogs::setNextChoice(-1);
        output->setText(dir.filePath(QStringLiteral("again.safetensors")));
        panel->requestExport();
        QVERIFY(exported.wait(30000));
        QVERIFY(QFileInfo::exists(dir.filePath(QStringLiteral("again.safetensors"))));
        dialogs::setNextChoice(std::nullopt);
    }

    // 2. After 1600×1000, the window reopened at 1600×960 on a 1366×768 screen: the right column,
    // the Fix buttons and the status bar were off it.
    void savedGeometryFitsASmallerScreen()
    {
        const QRect available(0, 0, 1366, 768);
        const QRect fitted = MainWindow::fittedGeometry(QRect(20, 55, 1600, 960), available);
        QVERIFY2(available.contains(fitted), qPrintable(QStringLiteral("%1,%2 %3x%4")
                                                            .arg(fitted.x())
                                                            .arg(fitted.y())
                                                            .arg(fitted.width())
                                                            .arg(fitted.height())));
        QCOMPARE(fitted.size(), QSize(1366 * 95 / 100, 768 * 92 / 100));  // a first size's room, the rest the frame's
        // A geometry that fits is kept as it is.
        QCOMPARE(MainWindow::fittedGeometry(QRect(40, 60, 1000, 600), available), QRect(40, 60, 1000, 600));

        const QRect screen = QGuiApplication::primaryScreen()->availableGeometry();
        {
            MainWindow big;
            big.setGeometry(QRect(screen.topLeft() + QPoint(20, 40), screen.size() * 2));
            QSettings().setValue(QStringLiteral("window/geometry"), big.saveGeometry());
        }
        MainWindow w;
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY2(screen.contains(w.geometry()), qPrintable(QStringLiteral("%1x%2 at %3,%4 on %5x%6")
                                                               .arg(w.width())
                                                               .arg(w.height())
                                                               .arg(w.x())
                                                               .arg(w.y())
                                                               .arg(screen.width())
                                                               .arg(screen.height())));
    }

    // 3. Of 11 files on the command line, the errors of a Lua .t7 and a 3-byte file were never seen
    // once a later file opened. Every error of the batch stays in the banner.
    void everyErrorOfTheCommandLineStays()
    {
        QTemporaryDir dir;
        const QString tiny = dir.filePath(QStringLiteral("tiny.pt"));
        {
            QFile f(tiny);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("\x80\x02}", 3);
        }
        const QString html = dir.filePath(QStringLiteral("login.pt"));
        {
            QFile f(html);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("<!DOCTYPE html><html><body>Sign in</body></html>\n");
        }
        MainWindow w;
        w.show();
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        QSignalSpy failed(&w, &MainWindow::openFailed);
        w.openFiles(
            {uitest::fixture("plain_sd.pt"), tiny, uitest::fixture("big40k.pt"), html, uitest::fixture("views.pt")});
        QTRY_COMPARE_WITH_TIMEOUT(opened.count() + failed.count(), 5, 30000);
        QCOMPARE(w.documentCount(), 3);
        const QStringList errors = w.bannerErrors();
        QCOMPARE(errors.size(), 2);
        QVERIFY2(errors.join(u'\n').contains(QStringLiteral("tiny.pt")) &&
                     errors.join(u'\n').contains(QStringLiteral("shorter than any checkpoint")),
                 qPrintable(errors.join(u'\n')));
        QVERIFY(errors.join(u'\n').contains(QStringLiteral("login.pt")));
        auto* text = w.findChild<QLabel*>(QStringLiteral("errorText"));
        QVERIFY(text->isVisible());
        QVERIFY2(text->text().contains(QStringLiteral("2 files could not be opened")), qPrintable(text->text()));

        // The next act of the user starts afresh.
        w.openFiles({uitest::fixture("train_ckpt.pt")});
        QVERIFY(w.bannerErrors().isEmpty());
        QVERIFY(!text->isVisible());
    }

    // 5b. A PEFT adapter folder: the Files panel's heading and the finding name the base model
    // adapter_config.json gives, as text (a name that looks like markup stays text).
    void peftFolderNamesItsBaseModel()
    {
        QTemporaryDir dir;
        const QString folder = dir.filePath(QStringLiteral("lora"));
        QVERIFY(!copied(dir, "model.safetensors", QStringLiteral("lora/adapter_model.safetensors")).isEmpty());
        {
            QFile config(dir.filePath(QStringLiteral("lora/adapter_config.json")));
            QVERIFY(config.open(QIODevice::WriteOnly));
            config.write("{\"base_model_name_or_path\": \"org/<b>base</b>\", \"peft_type\": \"LORA\", \"r\": 8, "
                         "\"target_modules\": [\"q_proj\", \"v_proj\"]}");
        }
        MainWindow w;
        w.show();
        auto* view = uitest::openOne(w, folder);
        QVERIFY2(view != nullptr, qPrintable(w.errorText()));
        auto* files = view->folderFiles();
        QVERIFY(files != nullptr);
        const QString heading = files->header()->text();
        QVERIFY2(heading.contains(QStringLiteral("base model 'org/&lt;b&gt;base&lt;/b&gt;'")) &&
                     heading.contains(QStringLiteral("LORA, r 8, target modules q_proj, v_proj")),
                 qPrintable(heading));
        if (!view->diagnosis()) {
            QSignalSpy ready(view, &DocumentView::findingsReady);
            QVERIFY(ready.wait(20000));
        }
        view->findings()->select(view->findings()->indexOfCode(QStringLiteral("model-folder")));
        const QString detail = view->findings()->detailText();
        QVERIFY2(detail.contains(QStringLiteral("org/&lt;b&gt;base&lt;/b&gt;")), qPrintable(detail));
    }

    // 5. A Trainer checkpoint-N/ folder: the tab says which folder, a Files panel lists every file with
    // what it is and opens the optimizer, and the finding's file names are links that open them.
    void modelFolderHasItsFiles()
    {
        QTemporaryDir dir;
        const QString folder = dir.filePath(QStringLiteral("checkpoint-500"));
        QVERIFY(!copied(dir, "model.safetensors", QStringLiteral("checkpoint-500/model.safetensors")).isEmpty());
        QVERIFY(!copied(dir, "train_ckpt.pt", QStringLiteral("checkpoint-500/optimizer.pt")).isEmpty());
        QVERIFY(!copied(dir, "plain_sd.pt", QStringLiteral("checkpoint-500/scheduler.pt")).isEmpty());
        {
            QFile state(dir.filePath(QStringLiteral("checkpoint-500/trainer_state.json")));
            QVERIFY(state.open(QIODevice::WriteOnly));
            state.write("{\"global_step\": 500}");
        }
        MainWindow w;
        w.show();
        auto* view = uitest::openOne(w, folder);
        QVERIFY2(view != nullptr, qPrintable(w.errorText()));
        auto* tabs = w.findChild<QTabWidget*>(QStringLiteral("documentTabs"));
        QCOMPARE(tabs->tabText(tabs->currentIndex()), QStringLiteral("checkpoint-500/model.safetensors"));
        QVERIFY2(w.windowTitle().startsWith(QStringLiteral("checkpoint-500/model.safetensors")),
                 qPrintable(w.windowTitle()));

        auto* files = view->folderFiles();
        QVERIFY(files != nullptr);
        QCOMPARE(files->count(), 4);
        QVERIFY(action(w, "setFilesAction")->isEnabled());
        action(w, "setFilesAction")->trigger();
        QCOMPARE(view->sideTabs()->currentWidget(), files);
        QTreeWidgetItem* optimizer = nullptr;
        for (int i = 0; i < files->count(); ++i) {
            auto* item = files->list()->topLevelItem(i);
            if (item->text(FolderFilesPanel::File) == QStringLiteral("optimizer.pt")) {
                optimizer = item;
            }
            if (item->text(FolderFilesPanel::File) == QStringLiteral("trainer_state.json")) {
                files->list()->setCurrentItem(item);
                QVERIFY(!files->openButton()->isEnabled());  // a JSON file opens as no checkpoint
            }
        }
        QVERIFY(optimizer != nullptr);
        QCOMPARE(optimizer->text(FolderFilesPanel::Role), QStringLiteral("optimizer"));
        files->list()->setCurrentItem(optimizer);
        QVERIFY(files->openButton()->isEnabled());
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        files->openButton()->click();
        QVERIFY(opened.wait(20000));
        QCOMPARE(w.documentCount(), 2);
        QCOMPARE(tabs->tabText(tabs->currentIndex()), QStringLiteral("checkpoint-500/optimizer.pt"));

        // The finding names each file; those that open are links.
        tabs->setCurrentIndex(0);
        if (!view->diagnosis()) {
            QSignalSpy ready(view, &DocumentView::findingsReady);
            QVERIFY(ready.wait(20000));
        }
        view->findings()->select(view->findings()->indexOfCode(QStringLiteral("model-folder")));
        const QString detail = view->findings()->detailText();
        QVERIFY2(detail.contains(QStringLiteral(">scheduler.pt</a>")) &&
                     detail.contains(QStringLiteral(">optimizer.pt</a>")) &&
                     !detail.contains(QStringLiteral(">trainer_state.json</a>")),
                 qPrintable(detail));
        auto* label = view->findings()->findChild<QLabel*>(QStringLiteral("findingDetail"));
        const QRegularExpression href(QStringLiteral("href='([^']*scheduler.pt)'"));
        const auto link = href.match(detail);
        QVERIFY(link.hasMatch());
        Q_EMIT label->linkActivated(link.captured(1));
        QVERIFY(opened.wait(20000));
        QCOMPARE(tabs->tabText(tabs->currentIndex()), QStringLiteral("checkpoint-500/scheduler.pt"));
    }

    // 6. After Multi-card on one file, a new tab opened with Multi-card and renamed every key to
    // module.*: each tab starts from Single-card and keeps its own choice.
    void thePresetBelongsToItsTab()
    {
        MainWindow w;
        w.show();
        auto* first = waitForPlan(uitest::openOne(w, uitest::fixture("ddp_sd_cuda0.pt")));
        QVERIFY(first != nullptr);
        first->exportPanel()->setPreset(ExportPanel::MultiCard);
        auto* second = waitForPlan(uitest::openOne(w, uitest::fixture("plain_sd.pt")));
        QVERIFY(second != nullptr);
        QCOMPARE(second->exportPanel()->preset(), ExportPanel::SingleCard);
        QVERIFY(!second->exportPanel()->options().singleModulePrefix);
        QCOMPARE(first->exportPanel()->preset(), ExportPanel::MultiCard);
        MainWindow again;  // nor does it come back in the next session
        auto* third = waitForPlan(uitest::openOne(again, uitest::fixture("plain_sd.pt")));
        QVERIFY(third != nullptr);
        QCOMPARE(third->exportPanel()->preset(), ExportPanel::SingleCard);
    }

    // 6. The default output was next to the input, which may be read-only (a read-only mount, the
    // packaged sample): it falls back to a folder that takes the file.
    void theDefaultOutputIsWritable()
    {
        QVERIFY(!canWriteIn(QStringLiteral("/proc/self")));
        QVERIFY(canWriteIn(QDir::tempPath()));
        ExportPanel panel;
        const QString out = panel.defaultOutputFor(QStringLiteral("/proc/self/ddp.pt"));
        QCOMPARE(QFileInfo(out).fileName(), QStringLiteral("ddp.fixed.pt"));
        QVERIFY2(canWriteIn(QFileInfo(out).absolutePath()), qPrintable(out));
        QCOMPARE(QFileInfo(out).absolutePath(), QFileInfo(writableFallbackFolder()).absoluteFilePath());
        // A folder that takes files keeps the copy beside its input.
        const QString beside = panel.defaultOutputFor(uitest::fixture("plain_sd.pt"));
        QCOMPARE(QFileInfo(beside).absolutePath(), QFileInfo(uitest::fixture("plain_sd.pt")).absolutePath());
    }

    // 7. At 1024 wide, names were cut on the left ("…post_attention_layernorm.weight" in every
    // layer), Shape read "[12…64]" and Size "64" without its unit. Each row now reads differently,
    // with its layer's index, and the values are whole.
    void namesKeepWhatTellsThemApartAt1024()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("llama.pt"));
        QVERIFY(writeLlamaLike(file));
        MainWindow w;
        w.resize(MainWindow::initialSize({1024, 700}));  // its first size on a 1024×700 screen
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* view = uitest::openOne(w, file);
        QVERIFY(view != nullptr);
        auto* tree = view->tree();
        QCoreApplication::processEvents();
        auto* delegate = dynamic_cast<KeyNameDelegate*>(tree->itemDelegateForColumn(KeyTreeModel::Name));
        QVERIFY(delegate != nullptr);
        const auto* m = tree->model();
        QSet<QString> shown;
        int cut = 0;
        for (int r = 0; r < m->rowCount(); ++r) {
            const auto index = m->index(r, KeyTreeModel::Name);
            QStyleOptionViewItem option;
            (tree->*&ViewOption::initViewItemOption)(&option);  // as the view paints the cell
            option.rect = tree->visualRect(index);
            const QString text = delegate->shownText(option, index);
            const QString key = index.data().toString();
            QVERIFY2(!shown.contains(text), qPrintable(text));  // no two rows read the same
            shown.insert(text);
            cut += text != key ? 1 : 0;
            const auto layer = QRegularExpression(QStringLiteral("layers\\.(\\d+)\\.")).match(key);
            if (layer.hasMatch()) {
                QVERIFY2(text.contains(layer.captured(1) + QLatin1Char('.')),
                         qPrintable(key + QStringLiteral(" -> ") + text));
            }
            QVERIFY2(text.endsWith(key.section(QLatin1Char('.'), -1)), qPrintable(text));
        }
        QVERIFY2(cut > 0, "at 1024 wide some names are cut: the test would prove nothing");
        // Short values are whole, and every column is in view.
        const QFontMetrics fm = tree->fontMetrics();
        for (const int column : {KeyTreeModel::Shape, KeyTreeModel::Size, KeyTreeModel::DType}) {
            int widest = 0;
            for (int r = 0; r < m->rowCount(); ++r) {
                widest = std::max(widest, fm.horizontalAdvance(m->index(r, column).data().toString()));
            }
            QVERIFY2(tree->columnWidth(column) > widest, qPrintable(QString::number(column)));
        }
        const int columns = tree->header()->length();
        QVERIFY2(columns <= tree->viewport()->width(),
                 qPrintable(QStringLiteral("%1 > %2").arg(columns).arg(tree->viewport()->width())));
    }

    void elidedKeysAreCutWhereTheyAreAlike()
    {
        const QFontMetrics fm(QApplication::font());
        const QString key = QStringLiteral("model.layers.12.post_attention_layernorm.weight");
        QCOMPARE(elidedKey(key, fm, fm.horizontalAdvance(key)), key);
        const QString dropped = QStringLiteral("…12.post_attention_layernorm.weight");
        QCOMPARE(elidedKey(key, fm, fm.horizontalAdvance(dropped)), dropped);
        const int narrow = fm.horizontalAdvance(QStringLiteral("…12.…layernorm.weight"));
        const QString middle = elidedKey(key, fm, narrow);
        QVERIFY2(middle.startsWith(QStringLiteral("…12.…")) && middle.endsWith(QStringLiteral("norm.weight")),
                 qPrintable(middle));
        QVERIFY(fm.horizontalAdvance(middle) <= narrow);
        QCOMPARE(shortestKey(key), dropped);
        QCOMPARE(shortestKey(QStringLiteral("module.conv1.weight")), QStringLiteral("…conv1.weight"));
    }

    // 8. The compare window went to y=335 with its 680 pixels on a 1000-pixel screen. It opens over
    // the main window, inside the screen.
    void theCompareWindowOpensOnTheScreen()
    {
        const QRect screen = QGuiApplication::primaryScreen()->availableGeometry();
        MainWindow w;
        w.resize(screen.width() / 2, screen.height() / 2);
        w.move(screen.left() + screen.width() / 2 - 10, screen.top() + screen.height() / 2 - 10);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* view = uitest::openOne(w, uitest::fixture("plain_sd.pt"));
        QVERIFY(view != nullptr);
        dialogs::setNextOpenFileNames({uitest::fixture("plain_sd.pt")});
        auto* compare = openCompareWindow(&w, view->document()->checkpoint);
        QVERIFY(compare != nullptr);
        QVERIFY(QTest::qWaitForWindowExposed(compare));
        QVERIFY2(screen.contains(compare->frameGeometry()), qPrintable(QStringLiteral("%1,%2 %3x%4")
                                                                           .arg(compare->frameGeometry().x())
                                                                           .arg(compare->frameGeometry().y())
                                                                           .arg(compare->frameGeometry().width())
                                                                           .arg(compare->frameGeometry().height())));
        // Over the main window: as near its centre as the screen lets it be.
        QRect over(QPoint(), compare->frameGeometry().size());
        over.moveCenter(w.frameGeometry().center());
        const QRect want = fittedInto(over, screen);
        QVERIFY2((compare->frameGeometry().topLeft() - want.topLeft()).manhattanLength() <= 2,
                 qPrintable(QStringLiteral("at %1,%2, not %3,%4")
                                .arg(compare->frameGeometry().x())
                                .arg(compare->frameGeometry().y())
                                .arg(want.x())
                                .arg(want.y())));
        compare->close();
    }

    // 9. After Export the panel scrolled to the bottom: the "Wrote …" line went out of view and a
    // click aimed at Cancel landed on a plan row. A stale "Wrote …" stayed after the preset changed.
    void exportKeepsItsResultInView()
    {
        QTemporaryDir dir;
        const QString in = copied(dir, "ddp_sd_cuda0.pt", QStringLiteral("ddp.pt"));
        MainWindow w;
        w.resize(1024, 700);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* view = waitForPlan(uitest::openOne(w, in));
        QVERIFY(view != nullptr);
        view->showExport();
        auto* panel = view->exportPanel();
        auto* area = view->findChild<QScrollArea*>(QStringLiteral("exportPanelScroll"));
        QVERIFY(area != nullptr);
        QCOMPARE(area->verticalScrollBar()->value(), 0);
        auto* button = panel->findChild<QPushButton*>(QStringLiteral("exportButton"));
        auto* cancel = panel->findChild<QPushButton*>(QStringLiteral("cancelExportButton"));
        auto* result = panel->findChild<QLabel*>(QStringLiteral("exportResult"));
        QSignalSpy exported(panel, &ExportPanel::exportFinished);
        QTest::mouseClick(button, Qt::LeftButton);  // the button takes the focus, as a click gives it
        QCoreApplication::processEvents();
        QCOMPARE(area->verticalScrollBar()->value(), 0);  // Cancel is where it was, under the mouse
        QVERIFY(cancel->hasFocus() || exported.count() > 0);
        QVERIFY(exported.wait(30000) || exported.count() > 0);
        QCoreApplication::processEvents();
        QCOMPARE(area->verticalScrollBar()->value(), 0);
        QVERIFY2(result->text().contains(QStringLiteral("Wrote")), qPrintable(result->text()));
        QVERIFY(!result->visibleRegion().isEmpty());
        QVERIFY(button->hasFocus());

        panel->setPreset(ExportPanel::MultiCard);
        QVERIFY2(result->text().isEmpty(), qPrintable(result->text()));
    }

    // 10. The same file opened twice gave two identical tabs.
    void aFileOpenedTwiceIsOneTab()
    {
        MainWindow w;
        w.show();
        QVERIFY(uitest::openOne(w, uitest::fixture("plain_sd.pt")) != nullptr);
        QVERIFY(uitest::openOne(w, uitest::fixture("views.pt")) != nullptr);
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({uitest::fixture("plain_sd.pt"), QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/./plain_sd.pt")});
        QTest::qWait(300);
        QCOMPARE(opened.count(), 0);
        QCOMPARE(w.documentCount(), 2);
        QCOMPARE(w.currentView()->document()->checkpoint->path,
                 QFileInfo(uitest::fixture("plain_sd.pt")).absoluteFilePath().toStdString());
        // Twice in one drop, before the first read ends: still one tab.
        w.openFiles({uitest::fixture("train_ckpt.pt"), uitest::fixture("train_ckpt.pt")});
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 20000);
        QTest::qWait(300);
        QCOMPARE(w.documentCount(), 3);
    }

    // 10. The Open dialog started in the working folder, not the current file's.
    void openStartsInTheCurrentFilesFolder()
    {
        QTemporaryDir dir;
        const QString in = copied(dir, "plain_sd.pt", QStringLiteral("runs/a/plain.pt"));
        MainWindow w;
        QVERIFY(uitest::openOne(w, in) != nullptr);
        dialogs::setNextOpenFileNames({});
        action(w, "openAction")->trigger();
        QCOMPARE(dialogs::lastOpenFolder(), dir.filePath(QStringLiteral("runs/a")));
        dialogs::setNextOpenFolder(QString());
        action(w, "openFolderAction")->trigger();
        QCOMPARE(dialogs::lastOpenFolder(), dir.filePath(QStringLiteral("runs/a")));
        dialogs::setNextOpenFileNames({});
        action(w, "compareAction")->trigger();
        QCOMPARE(dialogs::lastOpenFolder(), dir.filePath(QStringLiteral("runs/a")));
    }

    // 10. Ctrl+PgUp/PgDn did not switch tabs (the tree took them).
    void controlPageDownSwitchesTabs()
    {
        MainWindow w;
        w.show();
        QVERIFY(QTest::qWaitForWindowActive(&w));
        QVERIFY(uitest::openOne(w, uitest::fixture("plain_sd.pt")) != nullptr);
        auto* second = uitest::openOne(w, uitest::fixture("views.pt"));
        QVERIFY(second != nullptr);
        auto* tabs = w.findChild<QTabWidget*>(QStringLiteral("documentTabs"));
        QCOMPARE(tabs->currentIndex(), 1);
        second->tree()->setFocus();
        QTest::keyClick(second->tree(), Qt::Key_PageDown, Qt::ControlModifier);
        QCOMPARE(tabs->currentIndex(), 0);  // round the end
        QTest::keyClick(w.currentView()->tree(), Qt::Key_PageUp, Qt::ControlModifier);
        QCOMPARE(tabs->currentIndex(), 1);
    }

    // 10. The status bar said "Opened in 1 ms" with no tab open.
    void noStatusAboutATabThatIsGone()
    {
        MainWindow w;
        w.show();
        QVERIFY(uitest::openOne(w, uitest::fixture("plain_sd.pt")) != nullptr);
        QVERIFY(w.statusBar()->currentMessage().startsWith(QStringLiteral("Opened in")));
        Q_EMIT w.findChild<QTabWidget*>(QStringLiteral("documentTabs"))->tabCloseRequested(0);
        QCOMPARE(w.documentCount(), 0);
        QVERIFY2(w.statusBar()->currentMessage().isEmpty(), qPrintable(w.statusBar()->currentMessage()));
    }

    // 10. Help had only an About box: a guide (the README's tour), the shortcuts and where the docs
    // are. The shortcuts page is read from the menus, and the README's table says the same.
    void helpHasAGuideAndTheShortcuts()
    {
        MainWindow w;
        w.show();
        QCOMPARE(action(w, "guideAction")->shortcut(), QKeySequence(Qt::Key_F1));
        action(w, "guideAction")->trigger();
        auto* guide = w.findChild<QDialog*>(QStringLiteral("guideDialog"));
        QVERIFY(guide != nullptr);
        const QString tour = guide->findChild<QTextBrowser*>()->toPlainText();
        for (const char* part : {"Open.", "Diagnose.", "Test-load.", "Export.", "Ctrl+O"}) {
            QVERIFY2(tour.contains(QLatin1String(part)), part);
        }
        QVERIFY(!help::guideMarkdown().contains(QStringLiteral("](docs/screenshots")));  // no pictures

        action(w, "shortcutsAction")->trigger();
        auto* keys = w.findChild<QDialog*>(QStringLiteral("shortcutsDialog"));
        QVERIFY(keys != nullptr);
        const QString page = keys->findChild<QTextBrowser*>()->toPlainText();
        QVERIFY(page.contains(QStringLiteral("Simulate DDP Ranks")) && page.contains(QStringLiteral("Next Tab")));
        action(w, "documentationAction")->trigger();
        auto* docs = w.findChild<QDialog*>(QStringLiteral("documentationDialog"));
        QVERIFY(docs != nullptr);
        QVERIFY(docs->findChild<QTextBrowser*>()->toPlainText().contains(QStringLiteral("man ckptscope")));

        // The README's table lists each shortcut of the menus, and none they do not have.
        QFile readme(QStringLiteral(CKPTSCOPE_SOURCE_DIR "/README.md"));
        QVERIFY(readme.open(QIODevice::ReadOnly));
        const QString text = QString::fromUtf8(readme.readAll());
        const qsizetype table = text.indexOf(QStringLiteral("| Keys | Does |"));
        QVERIFY(table > 0);
        const QString rows = text.mid(table, text.indexOf(QStringLiteral("\n\n"), table) - table);
        QSet<QString> documented;
        const QRegularExpression key(QStringLiteral("((?:Ctrl\\+|Shift\\+|Alt\\+)*(?:F\\d+|PgUp|PgDown|Tab|Esc|\\w))"
                                                    "(?=[ |/,)]|$)"));
        for (const auto& line : rows.split(u'\n').mid(2)) {
            for (auto it = key.globalMatch(line.section(u'|', 1, 1)); it.hasNext();) {
                const QString k = it.next().captured(1);
                if (k.contains(u'+') || k == QStringLiteral("Esc") || k.startsWith(u'F')) {
                    documented.insert(k);
                }
            }
        }
        QSet<QString> held;
        for (const auto& [what, keys] : help::shortcuts(w.menuBar())) {
            for (const auto& one : keys.split(QStringLiteral(" or "))) {
                held.insert(QKeySequence(one, QKeySequence::NativeText).toString(QKeySequence::PortableText));
            }
        }
        held.insert(QStringLiteral("Esc"));
        QStringList missing;
        for (const auto& k : held) {
            if (!documented.contains(k)) {
                missing << k;
            }
        }
        QStringList extra;
        for (const auto& k : documented) {
            if (!held.contains(k)) {
                extra << k;
            }
        }
        QVERIFY2(missing.isEmpty(), qPrintable(QStringLiteral("not in the README: ") + missing.join(u' ')));
        QVERIFY2(extra.isEmpty(), qPrintable(QStringLiteral("in the README, not the window: ") + extra.join(u' ')));
    }

    // 10. Simulate DDP ranks was missing from the Run menu, and its ranks and map_location stayed
    // enabled while it was disabled (no GPU).
    void simulateIsInTheRunMenuAndItsControlsFollowIt()
    {
        qputenv("CKPTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");  // no GPU, whatever the host has
        MainWindow w;
        w.show();
        auto* view = uitest::openOne(w, uitest::fixture("ddp_sd_cuda0.pt"));
        QVERIFY(view != nullptr);
        auto* panel = view->testLoad();
        QSignalSpy ready(panel, &TestLoadPanel::devicesReady);
        panel->refreshDevices();
        QVERIFY(ready.wait(20000));
        qunsetenv("CKPTSCOPE_NVML_LIBRARY");
        auto* replay = action(w, "ddpReplayAction");
        QVERIFY(replay != nullptr);
        QCOMPARE(replay->shortcut(), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_L));
        QVERIFY(!panel->offersReplay());
        QVERIFY(!replay->isEnabled());
        for (const char* name : {"ddpReplayButton", "ddpRanksSpin", "ddpMapLocationCombo"}) {
            QVERIFY2(!panel->findChild<QWidget*>(QLatin1String(name))->isEnabled(), name);
        }
        QVERIFY(panel->findChild<QPushButton*>(QStringLiteral("ddpReplayButton"))->shortcut().isEmpty());
    }

    // 10. The remap row was labelled with one key while it moved 36 storages.
    void theRemapRowSaysHowManyStorages()
    {
        MainWindow w;
        auto* view = waitForPlan(uitest::openOne(w, uitest::fixture("ddp_sd_cuda0.pt")));
        QVERIFY(view != nullptr);
        auto* table = view->exportPanel()->findChild<QTableView*>(QStringLiteral("planTable"));
        const auto* m = table->model();
        bool found = false;
        for (int r = 0; r < m->rowCount(); ++r) {
            if (m->index(r, PlanModel::Step).data().toString() == QStringLiteral("remap")) {
                const QString key = m->index(r, PlanModel::Key).data().toString();
                const QString storages = m->index(r, PlanModel::Detail).data().toString().section(u' ', 0, 0);
                QVERIFY2(storages.toInt() > 1, qPrintable(storages));
                QCOMPARE(key, QStringLiteral("all %1 storages on cuda:0").arg(storages));
                QVERIFY(m->index(r, PlanModel::Key).data(Qt::ToolTipRole).toString().contains(QStringLiteral("first")));
                found = true;
            }
        }
        QVERIFY(found);
    }

    // 10. Plan cells were cut mid-word ("load_s…_dict"): a name longer than its column breaks after
    // '.', '/' or '_' in Detail too, and its row is as tall as the lines it takes.
    void planCellsBreakLongNamesInsteadOfCuttingThem()
    {
        auto doc = loadDocument(uitest::fixture("whole_model.pt").toStdString());
        QVERIFY(doc);
        ExportPanel panel;
        panel.resize(380, 700);
        panel.show();
        QSignalSpy planned(&panel, &ExportPanel::planReady);
        panel.setDocument(*doc);
        QVERIFY(planned.wait(20000));
        auto* table = panel.findChild<QTableView*>(QStringLiteral("planTable"));
        QVERIFY(table->itemDelegateForColumn(PlanModel::Detail) != nullptr);
        const int width = table->columnWidth(PlanModel::Detail) - 8;
        const QFontMetrics fm = table->fontMetrics();
        bool named = false;
        for (int r = 0; r < table->model()->rowCount(); ++r) {
            QString text = table->model()->index(r, PlanModel::Detail).data().toString();
            named = named || text.contains(QStringLiteral("load_state_dict"));
            for (const QChar c : {QLatin1Char('.'), QLatin1Char('/'), QLatin1Char('_')}) {
                text.replace(c, QString(c) + QChar(0x200B));
            }
            // Every piece between break points fits the column, so nothing is elided...
            for (const auto& piece : QString(text).replace(QChar(0x200B), QLatin1Char(' ')).split(u' ')) {
                QVERIFY2(fm.horizontalAdvance(piece) <= width, qPrintable(piece));
            }
            // ...and the row shows every line.
            const int need = fm.boundingRect(QRect(0, 0, width, 100000), Qt::TextWordWrap, text).height();
            QVERIFY2(table->rowHeight(r) >= need, qPrintable(text));
        }
        QVERIFY(named);
    }

    // 10. The Strip prefixes field showed only the end of its list.
    void theStripFieldShowsItsStart()
    {
        ExportPanel panel;
        panel.resize(360, 600);
        panel.show();
        auto* strip = panel.findChild<QLineEdit*>(QStringLiteral("stripEdit"));
        panel.setPreset(ExportPanel::MultiCard);
        QVERIFY(strip->text().size() > 40);
        QCOMPARE(strip->cursorPosition(), 0);
        QCOMPARE(strip->toolTip(), strip->text());
    }

    // 10. /etc/hostname was "truncated (an interrupted save or download?)" and an empty folder "is a
    // directory, and none of the checkpoint sets ckptscope reads (...)".
    void aTextFileAndAnEmptyFolderAreSaidPlainly()
    {
        QTemporaryDir dir;
        const QString host = dir.filePath(QStringLiteral("hostname"));
        {
            QFile f(host);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("gpu-node-7\n");
        }
        const QString empty = dir.filePath(QStringLiteral("empty"));
        QVERIFY(QDir().mkdir(empty));
        MainWindow w;
        QSignalSpy failed(&w, &MainWindow::openFailed);
        w.openFiles({host, empty});
        QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 2, 20000);
        const QString errors = w.bannerErrors().join(u'\n');
        QVERIFY2(errors.contains(QStringLiteral("is a text file, not a PyTorch checkpoint (it begins \"gpu-node-7\")")),
                 qPrintable(errors));
        QVERIFY2(errors.contains(QStringLiteral("is an empty folder")), qPrintable(errors));
        QVERIFY(!errors.contains(QStringLiteral("truncated")) && !errors.contains(QStringLiteral("none of the")));
    }
};

QTEST_MAIN(TestNewUser)
#include "tst_newuser.moc"
