// One file of a multi-file checkpoint in the window (issue 13): dropping a DeepSpeed ZeRO rank file
// opens its whole set, as `ckptscope inspect FILE` does, and the set tab says so and opens the file
// alone, as `ckptscope inspect --file-only FILE` lists it; the file tab goes back to the set. An FSDP
// rank file, which opens alone, offers its set; a Megatron rank file, whose set is not read, offers
// itself from the error banner. Open Recent reopens a file the way it was opened: alone or as its
// set. Fixtures: tests/sharded/gen_zero.py, gen_fsdp.py (real torch.save).
#include "cli/cmd_inspect.h"
#include "documentview.h"
#include "keytreemodel.h"
#include "mainwindow.h"
#include "set_tab.h"
#include "setmembership.h"
#include "uitest.h"

#include <QAction>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QMenu>
#include <QMimeData>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTreeView>
#include <QUrl>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

namespace {

using ckpt::ui::MainWindow;
using ckpt::uitest::setTab;

const QString kRankFile =
    QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR "/zero2_w3/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt");

void dropFile(MainWindow& w, const QString& file)
{
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(file)});
    const QPoint pos = w.rect().center();
    QDragEnterEvent enter(pos, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QCoreApplication::sendEvent(&w, &enter);
    QDropEvent drop(QPointF(pos), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QCoreApplication::sendEvent(&w, &drop);
}

QAction* action(MainWindow& w, const char* name)
{
    return w.findChild<QAction*>(QLatin1String(name));
}

// The tensor paths `ckptscope inspect --file-only --json FILE` prints, sorted.
QStringList inspectFileOnlyTensors(const QString& file)
{
    std::ostringstream out;
    std::ostringstream err;
    if (ckpt::cli::cmdInspect({"--file-only", "--json", file.toStdString()}, out, err) != 0) {
        qWarning("inspect --file-only: %s", err.str().c_str());
        return {};
    }
    const auto json = nlohmann::json::parse(out.str());
    QStringList paths;
    for (const auto& t : json.at("tensors")) {
        paths << QString::fromStdString(t.at("path").get<std::string>());
    }
    paths.sort();
    return paths;
}

void tensorRows(const QAbstractItemModel& m, const QModelIndex& parent, QStringList& out)
{
    for (int r = 0; r < m.rowCount(parent); ++r) {
        const auto i = m.index(r, 0, parent);
        const QString kind = i.sibling(r, ckpt::ui::KeyTreeModel::Kind).data().toString();
        if (kind == QLatin1String("tensor") || kind == QLatin1String("parameter")) {
            out << i.data(ckpt::ui::KeyTreeModel::PathRole).toString();
        }
        tensorRows(m, i, out);
    }
}

QStringList shownTensors(const ckpt::ui::DocumentView& view)
{
    QStringList paths;
    tensorRows(*view.tree()->model(), {}, paths);
    paths.sort();
    return paths;
}

bool barShown(const ckpt::ui::SetMembershipBar* bar)
{
    return bar != nullptr && !bar->isHidden();
}

}  // namespace

class TestSetFile : public QObject {
    Q_OBJECT

public:
    static void initMain() { ckpt::uitest::initMain(); }

private Q_SLOTS:
    void droppedRankFileOpensTheSetAndThenItself()
    {
        MainWindow w;
        QSignalSpy setOpened(&w, &MainWindow::setOpened);
        QSignalSpy fileOpened(&w, &MainWindow::documentOpened);
        dropFile(w, kRankFile);
        QVERIFY(setOpened.wait(20000));
        auto* set = setTab(w, 0);
        QVERIFY(set != nullptr);
        QVERIFY(w.currentView() == set);

        // The set tab says where it came from and offers the file alone, in the tab and the menu.
        QVERIFY(barShown(set->membershipBar()));
        const QString sentence = set->membershipBar()->label()->text();
        QVERIFY2(
            sentence.contains(QStringLiteral("DeepSpeed ZeRO checkpoint")) &&
                sentence.contains(QDir::toNativeSeparators(QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR "/zero2_w3"))) &&
                sentence.contains(QFileInfo(kRankFile).fileName()),
            qPrintable(sentence));
        QVERIFY(set->membershipBar()->button()->toolTip().contains(QFileInfo(kRankFile).fileName()));
        QVERIFY(action(w, "openFileAloneAction")->isEnabled());
        QVERIFY(!action(w, "openWholeSetAction")->isEnabled());
        // The set's tree is the consolidated model: no optimizer keys of its own.
        QVERIFY(std::none_of(set->document()->set->listing.rows.begin(), set->document()->set->listing.rows.end(),
                             [](const auto& r) { return r.key.rfind("optimizer_state_dict", 0) == 0; }));

        // CKPTSCOPE_SETFILE_SCREENSHOT=FILE.png saves the set tab with its bar, and FILE-alone.png the
        // file's own tab, to look at.
        const QString shot = qEnvironmentVariable("CKPTSCOPE_SETFILE_SCREENSHOT");
        if (!shot.isEmpty()) {
            w.resize(1280, 760);
            w.show();
            QVERIFY(QTest::qWaitForWindowExposed(&w));
            QVERIFY(w.grab().save(shot));
        }

        action(w, "openFileAloneAction")->trigger();
        QVERIFY(fileOpened.wait(20000));
        QCOMPARE(w.documentCount(), 2);
        auto* file = w.currentView();
        QVERIFY(file != nullptr);
        QCOMPARE(QFileInfo(QString::fromStdString(file->document()->checkpoint->path)).absoluteFilePath(),
                 QFileInfo(kRankFile).absoluteFilePath());
        // Exactly what `inspect --file-only` lists, the rank file's own optimizer partitions among it.
        const QStringList want = inspectFileOnlyTensors(kRankFile);
        QVERIFY(!want.isEmpty());
        QVERIFY(want.filter(QRegularExpression(QStringLiteral("^optimizer_state_dict/"))).size() > 0);
        QCOMPARE(shownTensors(*file), want);

        if (!shot.isEmpty()) {
            QVERIFY(w.grab().save(QString(shot).replace(QStringLiteral(".png"), QStringLiteral("-alone.png"))));
        }

        // The file tab goes back to the set's tab, already open: no second set tab.
        QVERIFY(barShown(file->membershipBar()));
        QVERIFY(file->membershipBar()->label()->text().contains(QStringLiteral("--file-only")));
        QVERIFY(action(w, "openWholeSetAction")->isEnabled());
        QVERIFY(!action(w, "openFileAloneAction")->isEnabled());
        QTest::mouseClick(file->membershipBar()->button(), Qt::LeftButton);
        QCOMPARE(w.documentCount(), 2);
        QVERIFY(w.findChild<QTabWidget*>(QStringLiteral("documentTabs"))->currentWidget() == set);

        // And the set tab's own button switches back to the file's tab, not a third one.
        QTest::mouseClick(set->membershipBar()->button(), Qt::LeftButton);
        QCOMPARE(w.documentCount(), 2);
        QVERIFY(w.currentView() == file);
    }

    void recentReopensAsOpened()
    {
        QSettings().remove(QStringLiteral("recentFiles"));
        QSettings().remove(QStringLiteral("recentFilesAlone"));
        const QString rank = QFileInfo(kRankFile).absoluteFilePath();
        {
            MainWindow w;
            QSignalSpy fileOpened(&w, &MainWindow::documentOpened);
            w.openFileAlone(rank);
            QVERIFY(fileOpened.wait(20000));
        }
        // Open Recent opens the file alone again, and says so.
        {
            MainWindow w;
            QSignalSpy fileOpened(&w, &MainWindow::documentOpened);
            QSignalSpy setOpened(&w, &MainWindow::setOpened);
            const auto entries = w.findChild<QMenu*>(QStringLiteral("recentMenu"))->actions();
            QCOMPARE(entries.size(), 1);
            QCOMPARE(entries[0]->text(), MainWindow::recentTitle(rank) + QStringLiteral(" (this file alone)"));
            entries[0]->trigger();
            QVERIFY(fileOpened.wait(20000));
            QCOMPARE(setOpened.size(), 0);
            QCOMPARE(w.documentCount(), 1);
            QVERIFY(setTab(w, 0) == nullptr);

            // Opened as its set now, the same path is a set again in the list.
            dropFile(w, rank);
            QVERIFY(setOpened.wait(20000));
        }
        MainWindow w;
        QSignalSpy setOpened(&w, &MainWindow::setOpened);
        const auto entries = w.findChild<QMenu*>(QStringLiteral("recentMenu"))->actions();
        QCOMPARE(entries.size(), 1);
        QCOMPARE(entries[0]->text(), MainWindow::recentTitle(rank));
        entries[0]->trigger();
        QVERIFY(setOpened.wait(20000));
        QVERIFY(setTab(w, 0) != nullptr);
    }

    void folderOpensTheSetWithoutTheOffer()
    {
        MainWindow w;
        QSignalSpy setOpened(&w, &MainWindow::setOpened);
        w.openFiles({QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR "/zero2_w3")});
        QVERIFY(setOpened.wait(20000));
        QVERIFY(!barShown(setTab(w, 0)->membershipBar()));
        QVERIFY(!action(w, "openFileAloneAction")->isEnabled());
        // `latest` opens the set too (the tab it has already: one tab per set, issue 39), and is no
        // checkpoint to open alone.
        const QString latest = QStringLiteral(CKPTSCOPE_ZERO_FIXTURE_DIR "/zero2_w3/latest");
        w.openFiles({latest});
        QCOMPARE(w.documentCount(), 1);
        MainWindow fresh;
        QSignalSpy freshOpened(&fresh, &MainWindow::setOpened);
        fresh.openFiles({latest});
        QVERIFY(freshOpened.wait(20000));
        QVERIFY(!barShown(setTab(fresh, 0)->membershipBar()));
    }

    // Any shard of a set is offered alone; a DCP data file (several torch.save records back to back)
    // is not, as no single-file reader opens it.
    void whichFilesOfferThemselves_data()
    {
        QTest::addColumn<QString>("path");
        QTest::addColumn<bool>("offered");
        const QDir hf(QStringLiteral(CKPTSCOPE_SHARDED_FIXTURE_DIR "/hf_st"));
        QTest::newRow("safetensors shard")
            << hf.filePath(hf.entryList({QStringLiteral("*-of-*")}, QDir::Files).front()) << true;
        QTest::newRow("safetensors index")
            << hf.filePath(hf.entryList({QStringLiteral("*.index.json")}).front()) << false;
        QTest::newRow("dcp data file") << QStringLiteral(CKPTSCOPE_DCP_FIXTURE_DIR "/dcp_basic/__0_0.distcp") << false;
    }

    void whichFilesOfferThemselves()
    {
        QFETCH(QString, path);
        QFETCH(bool, offered);
        MainWindow w;
        QSignalSpy setOpened(&w, &MainWindow::setOpened);
        w.openFiles({path});
        QVERIFY(setOpened.wait(20000));
        QCOMPARE(barShown(setTab(w, 0)->membershipBar()), offered);
        QCOMPARE(action(w, "openFileAloneAction")->isEnabled(), offered);
    }

    void fsdpRankFileOffersItsSet()
    {
        const QString rank = QStringLiteral(CKPTSCOPE_FSDP_FIXTURE_DIR "/fsdp_st/pytorch_model_fsdp_0_rank0.bin");
        MainWindow w;
        QSignalSpy fileOpened(&w, &MainWindow::documentOpened);
        QSignalSpy setOpened(&w, &MainWindow::setOpened);
        w.openFiles({rank});
        QVERIFY(fileOpened.wait(20000));
        auto* file = w.currentView();
        QVERIFY(file != nullptr);
        QVERIFY(barShown(file->membershipBar()));
        QVERIFY(file->membershipBar()->label()->text().contains(QStringLiteral("FSDP per-rank state dicts")));
        action(w, "openWholeSetAction")->trigger();
        QVERIFY(setOpened.wait(20000));
        QCOMPARE(w.documentCount(), 2);
        auto* set = setTab(w, 1);
        QVERIFY(set != nullptr);
        QCOMPARE(set->document()->set->location.kind, ckpt::sharded::SetKind::FsdpRanks);
        QVERIFY(!set->document()->set->listing.rows.empty());
    }

    void loneDcpDataFileIsNamed()
    {
        // A .distcp copied away from its .metadata: read as one zip, its last record's directory is
        // all that would show. The banner names the DCP folder and what it lacks instead.
        QTemporaryDir tmp;
        const QString lone = QDir(tmp.path()).filePath(QStringLiteral("__0_0.distcp"));
        QVERIFY(QFile::copy(QStringLiteral(CKPTSCOPE_DCP_FIXTURE_DIR "/dcp_basic/__0_0.distcp"), lone));
        MainWindow w;
        QSignalSpy failed(&w, &MainWindow::openFailed);
        dropFile(w, lone);
        QVERIFY(failed.wait(20000));
        QVERIFY2(w.errorText().contains(QStringLiteral("torch.distributed.checkpoint (DCP)")) &&
                     w.errorText().contains(QStringLiteral("no readable .metadata")),
                 qPrintable(w.errorText()));
        QCOMPARE(w.documentCount(), 0);
    }

    void unreadSetOffersTheFileFromTheError()
    {
        // A Megatron save dir: the set is named, not read; its rank file is a torch.save file.
        QTemporaryDir tmp;
        QDir dir(tmp.path());
        QVERIFY(dir.mkpath(QStringLiteral("iter_0000001/mp_rank_00")));
        QFile latest(dir.filePath(QStringLiteral("latest_checkpointed_iteration.txt")));
        QVERIFY(latest.open(QIODevice::WriteOnly));
        latest.write("1\n");
        latest.close();
        const QString rank = dir.filePath(QStringLiteral("iter_0000001/mp_rank_00/model_optim_rng.pt"));
        QVERIFY(QFile::copy(ckpt::uitest::fixture("plain_sd.pt"), rank));

        MainWindow w;
        QSignalSpy failed(&w, &MainWindow::openFailed);
        QSignalSpy fileOpened(&w, &MainWindow::documentOpened);
        w.openFiles({rank});
        QVERIFY(failed.wait(20000));
        QVERIFY(w.errorText().contains(QStringLiteral("Megatron")));
        auto* text = w.findChild<QLabel*>(QStringLiteral("errorText"));
        QVERIFY(text->text().contains(QStringLiteral("alone")));
        const auto href = QRegularExpression(QStringLiteral("href='([^']+)'")).match(text->text()).captured(1);
        QVERIFY(!href.isEmpty());
        Q_EMIT text->linkActivated(href);
        QVERIFY(fileOpened.wait(20000));
        QCOMPARE(w.documentCount(), 1);
        QCOMPARE(QString::fromStdString(w.currentView()->document()->checkpoint->path), rank);
        QVERIFY(!barShown(w.currentView()->membershipBar()));  // its set is not one the window reads
    }
};

QTEST_MAIN(TestSetFile)
#include "tst_setfile.moc"
