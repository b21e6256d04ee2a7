// The window's compare view over real torch pairs: the comparison runs in a worker and fills a
// tree whose rows carry each status's colour and icon, the differences-only filter, a selected
// changed tensor's statistics and difference histogram, Cancel, and a drop of the second file.
#include "compareview.h"
#include "dialogs.h"
#include "histogramwidget.h"
#include "mainwindow.h"

#include <QAbstractItemModelTester>
#include <QAction>
#include <QCoreApplication>
#include <QLabel>
#include <QMimeData>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QStandardPaths>
#include <QTest>
#include <QTreeView>
#include <QUrl>

#include <numeric>

namespace {

QString fx(const char* name)
{
    return QStringLiteral(CKPTSCOPE_DIFF_FIXTURE_DIR "/") + QLatin1String(name);
}

ckpt::CheckpointPtr open(const char* name)
{
    auto c = ckpt::openCheckpoint(fx(name).toStdString());
    return c ? *c : nullptr;
}

// The proxy index of the row whose first column (A's key component) is `leaf`, searched depth first.
QModelIndex findRow(const QAbstractItemModel* m, const QString& leaf, const QModelIndex& parent = {})
{
    for (int r = 0; r < m->rowCount(parent); ++r) {
        const QModelIndex i = m->index(r, 0, parent);
        if (i.data().toString() == leaf) {
            return i;
        }
        if (auto found = findRow(m, leaf, i); found.isValid()) {
            return found;
        }
    }
    return {};
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

}  // namespace

class TestCompareView : public QObject {
    Q_OBJECT

public:
    static void initMain()
    {
        if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
            qputenv("QT_QPA_PLATFORM", "offscreen");
        }
        QCoreApplication::setAttribute(Qt::AA_Use96Dpi);
        QStandardPaths::setTestModeEnabled(true);
    }

private Q_SLOTS:
    void statusesColoursAndFilter()
    {
        ckpt::ui::CompareView view(open("base.pt"));
        QSignalSpy done(&view, &ckpt::ui::CompareView::comparisonDone);
        view.compareWith(fx("extra.pt"));
        QVERIFY(done.wait(20000));
        QAbstractItemModelTester tester(view.tree()->model());
        const auto* m = view.tree()->model();
        struct Want {
            const char* leaf;
            const char* status;
            ckpt::diff::Status s;
        };
        for (const Want& w : {Want{"bn.running_mean", "only in A", ckpt::diff::Status::OnlyA},
                              Want{"bn.running_var", "only in B", ckpt::diff::Status::OnlyB},
                              Want{"fc.bias", "changed", ckpt::diff::Status::Changed},
                              Want{"emb.weight", "equal", ckpt::diff::Status::Equal}}) {
            const QModelIndex i = findRow(m, QLatin1String(w.leaf));
            QVERIFY2(i.isValid(), w.leaf);
            QCOMPARE(i.siblingAtColumn(2).data().toString(), QLatin1String(w.status));
            QCOMPARE(i.data(Qt::BackgroundRole).value<QBrush>().color(), ckpt::ui::CompareView::statusColor(w.s));
            QVERIFY(!i.data(Qt::DecorationRole).value<QIcon>().isNull());
        }
        // base.pt has 5 tensors and 4 values; extra.pt drops one key and adds one.
        QCOMPARE(leafRows(m), 10);
        view.setDifferencesOnly(true);
        QCOMPARE(leafRows(m), 3);
        QVERIFY(!findRow(m, QStringLiteral("emb.weight")).isValid());
        view.setDifferencesOnly(false);
        QCOMPARE(leafRows(m), 10);
    }

    void changedTensorStatsAndHistogram()
    {
        ckpt::ui::CompareView view(open("base.pt"));
        QSignalSpy done(&view, &ckpt::ui::CompareView::comparisonDone);
        view.compareWith(fx("changed.pt"));
        QVERIFY(done.wait(20000));
        const QModelIndex i = findRow(view.tree()->model(), QStringLiteral("emb.weight"));
        QVERIFY(i.isValid());
        QVERIFY(i.siblingAtColumn(3).data().toString().contains(QStringLiteral("2 of 80 differ")));
        QSignalSpy stats(&view, &ckpt::ui::CompareView::statsShown);
        view.tree()->setCurrentIndex(i);
        QVERIFY(stats.wait(20000));
        const auto& counts = view.histogram()->counts();
        QCOMPARE(std::accumulate(counts.begin(), counts.end(), std::uint64_t{0}), std::uint64_t{80});
        QVERIFY(view.statsText().contains(QStringLiteral("<b>A</b> float32, 80 elements")));
        QVERIFY(view.statsText().contains(QStringLiteral("<b>B</b> float32, 80 elements")));
    }

    // The README's picture: CKPTSCOPE_COMPARE_SCREENSHOT=FILE.png saves the view comparing a pair with
    // every kind of difference, the changed tensor selected.
    void everyCategory()
    {
        ckpt::ui::CompareView view(open("base.pt"));
        QSignalSpy done(&view, &ckpt::ui::CompareView::comparisonDone);
        view.compareWith(fx("mixed.pt"));
        QVERIFY(done.wait(20000));
        const auto& c = view.result()->counts;
        QCOMPARE(c.renamed, std::uint64_t{1});
        QCOMPARE(c.onlyA, std::uint64_t{1});
        QCOMPARE(c.onlyB, std::uint64_t{1});
        QCOMPARE(c.changed, std::uint64_t{4});  // emb.weight, bn.running_mean (bf16), epoch, lr
        QSignalSpy stats(&view, &ckpt::ui::CompareView::statsShown);
        view.tree()->setCurrentIndex(findRow(view.tree()->model(), QStringLiteral("bn.running_mean")));
        QVERIFY(stats.wait(20000));
        QVERIFY(view.statsText().contains(QStringLiteral("<b>B</b> bfloat16, 8 elements")));
        const auto& counts = view.histogram()->counts();
        QCOMPARE(std::accumulate(counts.begin(), counts.end(), std::uint64_t{0}), std::uint64_t{8});
        const QString shot = qEnvironmentVariable("CKPTSCOPE_COMPARE_SCREENSHOT");
        if (!shot.isEmpty()) {
            view.resize(1100, 600);
            view.show();
            QVERIFY(view.grab().save(shot));
        }
    }

    void renamedAndPrefixHeader()
    {
        ckpt::ui::CompareView view(open("ddp.pt"));
        QSignalSpy done(&view, &ckpt::ui::CompareView::comparisonDone);
        view.compareWith(fx("renamed.pt"));
        QVERIFY(done.wait(20000));
        const QModelIndex i = findRow(view.tree()->model(), QStringLiteral("module.fc.weight"));
        QVERIFY(i.isValid());
        QCOMPARE(i.siblingAtColumn(2).data().toString(), QStringLiteral("renamed"));
        QCOMPARE(i.siblingAtColumn(1).data().toString(), QStringLiteral("state_dict/head.weight"));
        QCOMPARE(view.result()->prefixesA, std::vector<std::string>{"module."});
    }

    // The header gives `ckptscope diff`'s verdict: a transposed view of the same weights is "Same
    // weights, stored differently", a changed value "Differ", a separate save "Equal".
    void headerVerdict_data()
    {
        QTest::addColumn<QString>("b");
        QTest::addColumn<QString>("verdict");
        QTest::newRow("stride only") << QStringLiteral("strided.pt")
                                     << QStringLiteral("Same weights, stored differently: 1 changed, 1 only in how "
                                                       "they are stored; 0 renamed");
        QTest::newRow("values") << QStringLiteral("changed.pt") << QStringLiteral("Differ: 1 changed, 0 renamed");
        QTest::newRow("separate save") << QStringLiteral("same.pt") << QStringLiteral("Equal: 0 changed, 0 renamed");
    }
    void headerVerdict()
    {
        QFETCH(QString, b);
        QFETCH(QString, verdict);
        ckpt::ui::CompareView view(open("base.pt"));
        QSignalSpy done(&view, &ckpt::ui::CompareView::comparisonDone);
        view.compareWith(fx(b.toUtf8().constData()));
        QVERIFY(done.wait(20000));
        QStringList labels;
        for (const auto* label : view.findChildren<QLabel*>()) {
            labels << label->text();
        }
        QVERIFY2(labels.join(QLatin1Char('\n')).contains(verdict), qPrintable(labels.join(QLatin1Char('\n'))));
    }

    void cancel()
    {
        ckpt::ui::CompareView view(open("big_a.pt"));
        QSignalSpy failed(&view, &ckpt::ui::CompareView::failed);
        QSignalSpy done(&view, &ckpt::ui::CompareView::comparisonDone);
        view.compareWith(fx("big_b.pt"));
        view.cancel();
        QTRY_VERIFY_WITH_TIMEOUT(failed.count() + done.count() == 1, 20000);
        QCOMPARE(failed.count(), 1);
        QVERIFY(failed.front().front().toString().contains(QStringLiteral("cancelled")));
        QVERIFY(view.result() == nullptr);
    }

    // File > Compare With… on the current tab: B comes from the dialogs seam, and the compare
    // window shows the pair.
    void fromTheMainWindow()
    {
        ckpt::ui::MainWindow w;
        QSignalSpy opened(&w, &ckpt::ui::MainWindow::documentOpened);
        w.openFiles({fx("ddp.pt")});
        QVERIFY(opened.wait(20000));
        auto* action = w.findChild<QAction*>(QStringLiteral("compareAction"));
        QVERIFY(action != nullptr);
        ckpt::ui::dialogs::setNextOpenFileNames({fx("base.pt")});
        action->trigger();
        auto* view = w.findChild<ckpt::ui::CompareView*>(QStringLiteral("compareView"));
        QVERIFY(view != nullptr);
        QTRY_VERIFY_WITH_TIMEOUT(view->result() != nullptr, 20000);
        QVERIFY(view->result()->equal());
        QCOMPARE(view->result()->prefixesA, std::vector<std::string>{"module."});
        QVERIFY(view->isWindow());
    }

    void dropSecondFile()
    {
        ckpt::ui::CompareView view(open("base.pt"));
        QSignalSpy done(&view, &ckpt::ui::CompareView::comparisonDone);
        QMimeData mime;
        mime.setUrls({QUrl::fromLocalFile(fx("epoch20.pt"))});
        QDragEnterEvent enter(QPoint(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QCoreApplication::sendEvent(&view, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent drop(QPointF(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QCoreApplication::sendEvent(&view, &drop);
        QVERIFY(done.wait(20000));
        QCOMPARE(view.result()->counts.changed, std::uint64_t{2});
        const QModelIndex epoch = findRow(view.tree()->model(), QStringLiteral("epoch"));
        QCOMPARE(epoch.siblingAtColumn(3).data().toString(), QStringLiteral("10 → 20"));
    }

    // A dropped folder holding a Hugging Face sharded set is compared as the one state dict it makes
    // up; selecting a tensor from the second shard shows its statistics from that shard.
    void dropShardedSetFolder()
    {
        ckpt::ui::CompareView view(open("flat.pt"));
        QSignalSpy done(&view, &ckpt::ui::CompareView::comparisonDone);
        QMimeData mime;
        mime.setUrls({QUrl::fromLocalFile(fx("hf_st_changed"))});
        QDragEnterEvent enter(QPoint(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QCoreApplication::sendEvent(&view, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent drop(QPointF(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QCoreApplication::sendEvent(&view, &drop);
        QVERIFY(done.wait(20000));
        QCOMPARE(view.result()->counts.changed, std::uint64_t{1});
        QCOMPARE(view.result()->counts.equal, std::uint64_t{4});
        for (const auto& e : view.result()->entries) {
            const QModelIndex i = findRow(view.tree()->model(), QString::fromStdString(e.key));
            QVERIFY2(i.isValid(), e.key.c_str());
            QSignalSpy stats(&view, &ckpt::ui::CompareView::statsShown);
            view.tree()->setCurrentIndex(i);
            QVERIFY(stats.wait(20000));
            QVERIFY2(view.statsText().contains(QStringLiteral("<b>B</b> ")), qPrintable(view.statsText()));
            QVERIFY2(!view.statsText().contains(QStringLiteral("error")), qPrintable(view.statsText()));
        }
    }
};

QTEST_MAIN(TestCompareView)
#include "tst_compareview.moc"
