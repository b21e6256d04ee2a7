// Key tree columns (issue 25): Name never collapses to stubs ("modu…ight"), a long value is
// elided before it, every border can be dragged, and the widths dragged are kept.
#include "columnfit.h"
#include "documentview.h"
#include "keytreemodel.h"
#include "mainwindow.h"
#include "uitest.h"

#include <QHeaderView>
#include <QMouseEvent>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardItemModel>
#include <QTreeView>
#include <QtTest>

using namespace ckpt::ui;

namespace {

const QString kLongKey = QStringLiteral("model.encoder.layers.11.self_attention.linear_qkv.layer_norm_weight");

// A tree of long keys beside a column holding a 300-character value (a Lightning callback's state).
void fill(QStandardItemModel& model)
{
    model.setHorizontalHeaderLabels({QStringLiteral("Name"), QStringLiteral("Kind"), QStringLiteral("Value")});
    for (int i = 0; i < 5; ++i) {
        model.appendRow({new QStandardItem(kLongKey + QString::number(i)), new QStandardItem(QStringLiteral("tensor")),
                         new QStandardItem(QString(300, QLatin1Char('x')))});
    }
}

int nameNeeds(const QTreeView& tree, const QString& key)
{
    return tree.fontMetrics().horizontalAdvance(ColumnFitter::lastTwoSegments(key));
}

// Drags the right border of `section` by `dx` as a mouse does.
void dragBorder(QHeaderView* header, int section, int dx)
{
    const int x = header->sectionViewportPosition(section) + header->sectionSize(section) - 1;
    const QPoint at(x, header->height() / 2);
    auto send = [header](QEvent::Type type, QPoint pos, Qt::MouseButton button, Qt::MouseButtons buttons) {
        QMouseEvent e(type, QPointF(pos), header->viewport()->mapToGlobal(QPointF(pos)), button, buttons,
                      Qt::NoModifier);
        QCoreApplication::sendEvent(header->viewport(), &e);
    };
    send(QEvent::MouseButtonPress, at, Qt::LeftButton, Qt::LeftButton);
    send(QEvent::MouseMove, at + QPoint(dx / 2, 0), Qt::NoButton, Qt::LeftButton);
    send(QEvent::MouseMove, at + QPoint(dx, 0), Qt::NoButton, Qt::LeftButton);
    send(QEvent::MouseButtonRelease, at + QPoint(dx, 0), Qt::LeftButton, Qt::NoButton);
}

}  // namespace

class TestColumns : public QObject {
    Q_OBJECT
public:
    static void initMain() { ckpt::uitest::initMain(); }

private Q_SLOTS:
    void init() { QSettings().clear(); }

    void aLongValueIsElidedBeforeName()
    {
        QStandardItemModel model;
        fill(model);
        QTreeView tree;
        tree.setModel(&model);
        auto* fitter = new ColumnFitter(&tree, 0, QStringLiteral("test/header"));
        tree.resize(560, 400);
        tree.show();
        QVERIFY(QTest::qWaitForWindowExposed(&tree));
        fitter->refit();
        QVERIFY2(tree.columnWidth(0) >= nameNeeds(tree, kLongKey), qPrintable(QString::number(tree.columnWidth(0))));
        QVERIFY(tree.columnWidth(2) <= fitter->valueColumnCap());
        for (int c = 0; c < model.columnCount(); ++c) {
            QCOMPARE(tree.header()->sectionResizeMode(c), QHeaderView::Interactive);
        }
    }

    // Making room for Name took everything from the widest column first, so at 1024×700 a shape
    // "[16, 3, 3, 3]" became "[1…3]" and sizes "21…iB": columns now give in proportion, and a
    // column whose content is short ("tensor") keeps all of it while the long value gives.
    void shortColumnsKeepTheirContent()
    {
        QStandardItemModel model;
        fill(model);
        QTreeView tree;
        tree.setModel(&model);
        auto* fitter = new ColumnFitter(&tree, 0, QStringLiteral("test/header"));
        tree.resize(420, 400);
        tree.show();
        QVERIFY(QTest::qWaitForWindowExposed(&tree));
        fitter->refit();
        const int kindNeeds = tree.fontMetrics().horizontalAdvance(QStringLiteral("tensor"));
        QVERIFY2(tree.columnWidth(1) > kindNeeds, qPrintable(QString::number(tree.columnWidth(1))));
        QVERIFY2(tree.columnWidth(0) >= nameNeeds(tree, kLongKey), qPrintable(QString::number(tree.columnWidth(0))));
    }

    // The name column kept room for the last two segments but cut the middle ("module.bn…ning_mean"),
    // so the segments it kept room for did not show; then it cut the start, and every layer's row
    // read alike (issue 39). A key keeps its end and its layer's index.
    void nameKeepsTheEndAndTheIndexOfLongKeys()
    {
        QStandardItemModel model;
        fill(model);
        QTreeView tree;
        tree.setModel(&model);
        tree.setTextElideMode(Qt::ElideMiddle);
        new ColumnFitter(&tree, 0, QStringLiteral("test/header"));
        auto* delegate = dynamic_cast<KeyNameDelegate*>(tree.itemDelegateForColumn(0));
        QVERIFY(delegate != nullptr);
        const QFontMetrics fm = tree.fontMetrics();
        const QString shown = elidedKey(kLongKey + QStringLiteral("0"), fm, nameNeeds(tree, kLongKey) + 20);
        QVERIFY2(shown.endsWith(QStringLiteral("layer_norm_weight0")) && shown.contains(QStringLiteral("11.")),
                 qPrintable(shown));
        QVERIFY(fm.horizontalAdvance(shown) <= nameNeeds(tree, kLongKey) + 20);
        QCOMPARE(tree.itemDelegateForColumn(1), nullptr);  // values keep the view's own mode
    }

    void widthsDraggedByHandAreKept()
    {
        QStandardItemModel model;
        fill(model);
        int dragged = 0;
        {
            QTreeView tree;
            tree.setModel(&model);
            new ColumnFitter(&tree, 0, QStringLiteral("test/header"));
            tree.resize(900, 400);
            tree.show();
            QVERIFY(QTest::qWaitForWindowExposed(&tree));
            const int before = tree.columnWidth(1);
            dragBorder(tree.header(), 1, 60);
            dragged = tree.columnWidth(1);
            QVERIFY2(dragged > before + 30, qPrintable(QStringLiteral("%1 -> %2").arg(before).arg(dragged)));
            tree.resize(700, 400);  // a fit no longer overrides the user's widths
            QCoreApplication::processEvents();
            QCOMPARE(tree.columnWidth(1), dragged);
        }
        QTreeView again;
        again.setModel(&model);
        auto* fitter = new ColumnFitter(&again, 0, QStringLiteral("test/header"));
        again.resize(900, 400);
        again.show();
        QVERIFY(QTest::qWaitForWindowExposed(&again));
        QVERIFY(fitter->widthsSetByHand());
        QCOMPARE(again.columnWidth(1), dragged);
    }

    // The window at 1024×700: the raw tree's Name column holds the last two segments of every
    // key on screen.
    void nameHoldsTwoSegmentsAt1024x700()
    {
        MainWindow w;
        w.resize(1024, 700);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({ckpt::uitest::fixture("ddp_sd_cuda0.pt")});
        QVERIFY(opened.wait(20000));
        auto* view = w.currentView();
        QVERIFY(view != nullptr);
        auto* tree = view->tree();
        QCoreApplication::processEvents();
        const auto* m = tree->model();
        for (int r = 0; r < m->rowCount(); ++r) {
            const QString key = m->index(r, KeyTreeModel::Name).data().toString();
            QVERIFY2(tree->columnWidth(KeyTreeModel::Name) >= nameNeeds(*tree, key), qPrintable(key));
        }
        for (int c = 0; c < m->columnCount(); ++c) {
            QCOMPARE(tree->header()->sectionResizeMode(c), QHeaderView::Interactive);
        }
    }
};

QTEST_MAIN(TestColumns)
#include "tst_columns.moc"
