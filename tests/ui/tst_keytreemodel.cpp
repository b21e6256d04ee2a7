// The key tree model and its proxy: QAbstractItemModelTester over real fixtures, columns and raw
// sort values, the filter, and the timings the issue sets for the 40k-key file.
#include "document.h"
#include "keytreemodel.h"
#include "keytreeproxy.h"
#include "uitest.h"

#include <QAbstractItemModelTester>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QTreeView>
#include <QtTest>

#include <chrono>
#include <ctime>
#include <future>
#include <utility>

using namespace ckpt;
using namespace ckpt::ui;

namespace {

DocumentPtr load(const char* name)
{
    auto doc = loadDocument(uitest::fixture(name).toStdString());
    if (!doc) {
        qWarning("%s", doc.error().describe().c_str());
        return {};
    }
    return *doc;
}

// Every source row reachable below `parent`, depth first.
void collect(const QAbstractItemModel& m, const QModelIndex& parent, QList<QModelIndex>& out)
{
    for (int r = 0; r < m.rowCount(parent); ++r) {
        const auto i = m.index(r, 0, parent);
        out << i;
        collect(m, i, out);
    }
}

}  // namespace

class TestKeyTreeModel : public QObject {
    Q_OBJECT
public:
    static void initMain() { uitest::initMain(); }

private Q_SLOTS:
    void passesModelTester_data()
    {
        QTest::addColumn<QString>("file");
        for (const char* f : {"plain_sd.pt", "ddp_sd.pt", "train_ckpt.pt", "whole_model.pt", "views.pt",
                              "empty_scalar.pt", "legacy_sd.pt", "multi_gpu.pt"}) {
            QTest::newRow(f) << QString::fromLatin1(f);
        }
    }

    void passesModelTester()
    {
        QFETCH(QString, file);
        auto doc = load(file.toLatin1().constData());
        QVERIFY(doc);
        KeyTreeModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.setDocument(doc);
        KeyTreeProxy proxy;
        QAbstractItemModelTester proxyTester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
        proxy.setSourceModel(&model);
        proxy.sort(KeyTreeModel::Size, Qt::DescendingOrder);
        proxy.setFilterText(QStringLiteral("weight"));
        proxy.setFilterText(QString());
        proxy.sort(KeyTreeModel::Name, Qt::AscendingOrder);

        // Every node of the checkpoint is reachable exactly once, the root only when it is a row: a
        // lone value, or an object (the module of a whole-model pickle) that findings point at.
        QList<QModelIndex> all;
        collect(model, {}, all);
        const auto& ck = *doc->checkpoint;
        const auto& root = ck.nodes[kRootNode];
        const bool rootRow = root.childCount == 0 || root.kind == NodeKind::Module || root.kind == NodeKind::Object;
        const auto expected = rootRow ? ck.nodes.size() : ck.nodes.size() - 1;
        QVERIFY(rootRow || file != QLatin1String("whole_model.pt"));
        QCOMPARE(static_cast<std::size_t>(all.size()), expected);
        for (const auto& i : all) {
            QCOMPARE(model.parent(i), i.parent());
            QCOMPARE(i.data(KeyTreeModel::PathRole).toString(),
                     QString::fromStdString(ck.pathOf(KeyTreeModel::nodeOf(i))));
        }
        model.setDocument({});
        QCOMPARE(model.rowCount(), 0);
    }

    void columnsShowTensorFacts()
    {
        auto doc = load("ddp_sd_cuda0.pt");
        QVERIFY(doc);
        KeyTreeModel model;
        model.setDocument(doc);
        const auto& ck = *doc->checkpoint;
        const auto node = ck.find("module.conv.weight");
        QVERIFY(node.valid());
        const auto& t = ck.tensors[ck.nodes[node].tensor];
        const auto idx = model.indexOfNode(node);
        QCOMPARE(idx.data().toString(), QStringLiteral("module.conv.weight"));
        QCOMPARE(model.index(idx.row(), KeyTreeModel::DType, idx.parent()).data().toString(),
                 QStringLiteral("float32"));
        QCOMPARE(model.index(idx.row(), KeyTreeModel::Device, idx.parent()).data().toString(),
                 QStringLiteral("cuda:0"));
        QCOMPARE(model.index(idx.row(), KeyTreeModel::Shape, idx.parent()).data(KeyTreeModel::SortRole).toULongLong(),
                 t.numel);
        QCOMPARE(model.index(idx.row(), KeyTreeModel::Size, idx.parent()).data(KeyTreeModel::SortRole).toULongLong(),
                 t.nbytes);
        QVERIFY(!idx.data(Qt::DecorationRole).value<QIcon>().pixmap(16, 16).isNull());  // the resources are linked in
    }

    // numpy scalars are objects to the pickle; the value column showed nothing for them while
    // inspect printed 1.5.
    void numpyScalarsShowTheirValue()
    {
        auto doc = load("numpy_namespace.pt");
        QVERIFY(doc);
        KeyTreeModel model;
        model.setDocument(doc);
        const auto& ck = *doc->checkpoint;
        for (const auto& [key, text] : {std::pair{"np_float", "1.5"}, std::pair{"np_int", "3"}}) {
            const auto node = ck.find(key);
            QVERIFY2(node.valid(), key);
            const auto idx = model.indexOfNode(node);
            QCOMPARE(model.index(idx.row(), KeyTreeModel::Shape, idx.parent()).data().toString(),
                     QString::fromLatin1(text));
        }
    }

    void stateDictsAndModulesStandOut()
    {
        auto doc = load("whole_model.pt");
        QVERIFY(doc);
        KeyTreeModel model;
        model.setDocument(doc);
        bool sawModule = false;
        QList<QModelIndex> all;
        collect(model, {}, all);
        all.prepend(model.index(0, 0));
        for (const auto& i : all) {
            const auto& n = doc->checkpoint->nodes[KeyTreeModel::nodeOf(i)];
            if (n.kind == NodeKind::Module) {
                sawModule = true;
                QVERIFY(i.data(Qt::FontRole).value<QFont>().bold());
            }
        }
        // The root of a whole-model pickle is the module itself: shown as the only top row.
        QVERIFY(sawModule || doc->checkpoint->nodes[kRootNode].kind == NodeKind::Module);
    }

    void sortsOnRawValuesNotText()
    {
        auto doc = load("train_ckpt.pt");
        QVERIFY(doc);
        KeyTreeModel model;
        model.setDocument(doc);
        KeyTreeProxy proxy;
        proxy.setSourceModel(&model);
        proxy.sort(KeyTreeModel::Size, Qt::DescendingOrder);
        QVERIFY(proxy.rowCount() > 1);
        quint64 previous = std::numeric_limits<quint64>::max();
        for (int r = 0; r < proxy.rowCount(); ++r) {
            const auto bytes = proxy.index(r, KeyTreeModel::Size).data(KeyTreeModel::SortRole).toULongLong();
            QVERIFY2(bytes <= previous, "sizes must sort as integers (\"9 KiB\" > \"10 MiB\" as text)");
            previous = bytes;
        }
    }

    void filterKeepsAncestorsOfMatches()
    {
        auto doc = load("train_ckpt.pt");
        QVERIFY(doc);
        KeyTreeModel model;
        model.setDocument(doc);
        KeyTreeProxy proxy;
        proxy.setSourceModel(&model);
        proxy.setFilterText(QStringLiteral("CONV.WEIGHT"));  // case-insensitive
        QList<QModelIndex> visible;
        collect(proxy, {}, visible);
        QVERIFY(!visible.isEmpty());
        int leaves = 0;
        for (const auto& i : visible) {
            const auto path = i.data(KeyTreeModel::PathRole).toString().toLower();
            if (proxy.rowCount(i) == 0) {
                ++leaves;
                QVERIFY2(path.contains(QStringLiteral("conv.weight")), qPrintable(path));
            }
        }
        QVERIFY(leaves >= 1);
        proxy.setFilterText(QStringLiteral("no-such-key-anywhere"));
        QCOMPARE(proxy.rowCount(), 0);
    }

    void big40kOpensAndFiltersFast()
    {
        const auto path = uitest::fixture("big40k.pt");
        if (!QFileInfo::exists(path)) {
            QSKIP("big40k.pt not generated");
        }
        QElapsedTimer timer;
        timer.start();
        const auto t0 = std::chrono::steady_clock::now();
        const auto cpu0 = std::clock();
        auto doc = loadDocument(path.toStdString());
        const auto loadCpuMs = static_cast<long long>((std::clock() - cpu0) * 1000 / CLOCKS_PER_SEC);
        QVERIFY(doc);
        const auto loadMs = timer.elapsed();
        // As the window does: diagnose in the background while the tree is built and shown.
        auto diagnosis = std::async(std::launch::async, [d = *doc] {
            auto findings = diagnoseDocument(*d);
            return std::make_pair(findings, std::chrono::steady_clock::now());
        });
        KeyTreeModel model;
        KeyTreeProxy proxy;
        QTreeView view;
        view.setUniformRowHeights(true);
        view.resize(900, 700);
        model.setDocument(*doc);
        proxy.setSourceModel(&model);
        view.setModel(&proxy);
        view.setSortingEnabled(true);
        view.sortByColumn(-1, Qt::AscendingOrder);
        view.show();
        view.expandToDepth(0);
        (void)view.grab();  // forces layout and a paint of the visible rows
        const auto shownMs = timer.elapsed();
        const auto [findings, diagnosed] = diagnosis.get();
        QVERIFY2(findings->error.empty(), findings->error.c_str());
        const auto findingsMs = std::chrono::duration_cast<std::chrono::milliseconds>(diagnosed - t0).count();

        timer.restart();
        proxy.setFilterText(QStringLiteral("layers.3999"));
        (void)view.grab();
        const auto filterMs = timer.elapsed();
        QList<QModelIndex> visible;
        collect(proxy, {}, visible);
        int leaves = 0;
        for (const auto& i : visible) {
            leaves += proxy.rowCount(i) == 0 ? 1 : 0;
        }
        QCOMPARE(leaves, 11);  // layers.3999 and layers.39990..39999

        timer.restart();
        proxy.setFilterText(QStringLiteral("layers.39"));
        (void)view.grab();
        const auto broadFilterMs = timer.elapsed();
        timer.restart();
        proxy.setFilterText(QString());
        (void)view.grab();
        const auto clearMs = timer.elapsed();
        timer.restart();
        view.sortByColumn(KeyTreeModel::Size, Qt::DescendingOrder);
        (void)view.grab();
        const auto sortMs = timer.elapsed();

        qInfo("big40k: read+index %lld ms (%lld ms CPU), time-to-tree %lld ms; time-to-findings %lld ms (diagnose "
              "%.0f ms, in the background); filter keystroke %lld ms (narrow), %lld ms (broad), clear %lld ms; sort "
              "by size %lld ms",
              loadMs, loadCpuMs, shownMs, static_cast<long long>(findingsMs), findings->seconds * 1000.0, filterMs,
              broadFilterMs, clearMs, sortMs);
        // Targets are 1 s and 100 ms; the bounds are generous for loaded, shared CI machines.
        QVERIFY2(shownMs < 5000, "showing the 40k-key tree took far longer than 1 s");
        QVERIFY2(filterMs < 1000 && broadFilterMs < 1000, "a filter keystroke took far longer than 100 ms");
    }
};

QTEST_MAIN(TestKeyTreeModel)
#include "tst_keytreemodel.moc"
