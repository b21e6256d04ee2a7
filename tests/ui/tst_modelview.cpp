// Model view (issue 25): a dict that holds a model beside other keys (YOLO's best.pt: model, date,
// train_args, optimizer) shows those keys as rows beside the model, and a selected finding's keys
// are tinted there as in the raw tree.
#include "documentview.h"
#include "findingspanel.h"
#include "mainwindow.h"
#include "moduletreemodel.h"
#include "uitest.h"
#include "window_open.h"

#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

using namespace ckpt;
using namespace ckpt::ui;

namespace {

using uitest::openOne;

// The top-level row named `name` in Model view, or an invalid index.
QModelIndex topRow(const ModuleTreeModel& m, const QString& name)
{
    for (int r = 0; r < m.rowCount(); ++r) {
        if (m.index(r, ModuleTreeModel::Name).data().toString() == name) {
            return m.index(r, ModuleTreeModel::Name);
        }
    }
    return {};
}

}  // namespace

class TestModelView : public QObject {
    Q_OBJECT
public:
    static void initMain() { uitest::initMain(); }

private Q_SLOTS:
    void otherTopLevelKeysShowBesideTheModel()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("best.pt"));
        // What ultralytics saves, in small: the model pickled whole beside plain keys.
        QProcess py;
        py.setProcessChannelMode(QProcess::MergedChannels);
        py.start(QStringLiteral(CKPTSCOPE_PYTHON),
                 {QStringLiteral("-c"),
                  QStringLiteral("import sys, torch, torch.nn as nn\n"
                                 "torch.save({'epoch': 3, 'model': nn.Sequential(nn.Linear(2, 2)), "
                                 "'date': '2024-05-01', 'train_args': {'lr': 0.01, 'imgsz': 640}}, sys.argv[1])\n"),
                  file});
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitStatus() == QProcess::NormalExit && py.exitCode() == 0, py.readAll().constData());

        MainWindow w;
        auto* view = openOne(w, file);
        QVERIFY(view != nullptr);
        QVERIFY(view->modelViewShown());
        const auto& m = *view->moduleModel();
        QVERIFY(topRow(m, QStringLiteral("model")).isValid());
        for (const char* key : {"epoch", "date", "train_args"}) {
            const auto row = topRow(m, QLatin1String(key));
            QVERIFY2(row.isValid(), key);
            QVERIFY(row.data(ModuleTreeModel::OtherKeyRole).toBool());
        }
        QCOMPARE(topRow(m, QStringLiteral("date")).siblingAtColumn(ModuleTreeModel::Shape).data().toString(),
                 QStringLiteral("'2024-05-01'"));
        QCOMPARE(topRow(m, QStringLiteral("train_args")).siblingAtColumn(ModuleTreeModel::Shape).data().toString(),
                 QStringLiteral("2 item(s)"));  // as the raw tree says it
    }

    // Selecting a finding tints its keys' rows in Model view, and selecting none clears them.
    void findingKeysAreHighlightedInModelView()
    {
        MainWindow w;
        auto* view = openOne(w, uitest::fixture("whole_model_dp.pt"));
        QVERIFY(view != nullptr);
        QVERIFY(view->modelViewShown());
        QTRY_VERIFY_WITH_TIMEOUT(view->diagnosis() != nullptr, 20000);
        const auto& ck = *view->document()->checkpoint;
        const auto& list = view->diagnosis()->list;
        bool checked = false;
        for (std::size_t i = 0; i < list.size(); ++i) {
            view->findings()->select(static_cast<int>(i));
            for (const auto& path : list[i].paths) {
                const auto row = view->moduleModel()->indexOfNode(ck.find(path));
                if (row.isValid()) {
                    QVERIFY2(row.data(Qt::BackgroundRole).isValid(), path.c_str());
                    checked = true;
                }
            }
        }
        QVERIFY2(checked, "no finding of whole_model_dp.pt names a row of Model view");
    }
};

QTEST_MAIN(TestModelView)
#include "tst_modelview.moc"
