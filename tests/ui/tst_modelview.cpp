// Model view (issue 25): a dict that holds a model beside other keys (YOLO's best.pt: model, date,
// train_args, optimizer) shows those keys as rows beside the model, and a selected finding's keys
// are tinted there as in the raw tree.
#include "detailspanel.h"
#include "documentview.h"
#include "findingspanel.h"
#include "keytreemodel.h"
#include "mainwindow.h"
#include "moduletreemodel.h"
#include "python_file.h"
#include "uitest.h"
#include "window_open.h"

#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>

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

// `file`, written by the tests' Python running `script`, opened in `w`; null (Python's words warned)
// when Python could not write it.
DocumentView* openWritten(MainWindow& w, const QString& file, const QString& script)
{
    const QString wrote = ckpt::test::writeWithPython(script, file);
    if (!wrote.isEmpty()) {
        qWarning("%s", qPrintable(wrote));
        return nullptr;
    }
    return openOne(w, file);
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
        MainWindow w;
        auto* view = openWritten(
            w, file,
            QStringLiteral("import sys, torch, torch.nn as nn\n"
                           "torch.save({'epoch': 3, 'model': nn.Sequential(nn.Linear(2, 2)), "
                           "'date': '2024-05-01', 'train_args': {'lr': 0.01, 'imgsz': 640}}, sys.argv[1])\n"));
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

    // A dynamically quantized model keeps each Linear's weight and bias packed (LinearPackedParams,
    // not _parameters): Model view counts and lists them as the module's parameters, as its
    // state_dict() holds them (before, the model said 0 parameters).
    void packedParametersAreCounted()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("dynamic.pt"));
        MainWindow w;
        auto* view = openWritten(
            w, file,
            QStringLiteral("import sys, torch, torch.nn as nn\n"
                           "m = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 4), nn.LayerNorm(4))\n"
                           "q = torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8)\n"
                           "torch.save(q, sys.argv[1])\n"));
        QVERIFY(view != nullptr);
        QVERIFY(view->modelViewShown());
        const auto& m = *view->moduleModel();
        const auto model = m.index(0, ModuleTreeModel::Name);
        // 8*6+6 and 6*4+4 packed, 4+4 in the LayerNorm's _parameters
        QCOMPARE(ModuleTreeModel::parameterCount(model), std::uint64_t{54 + 28 + 8});
    }

    // A quantized tensor's details hold its quantizer: per tensor the scale and zero point, per channel
    // the axis and the range of its scales and zero points (what q_per_channel_scales() gives).
    void quantizersShowTheirScales()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("q.pt"));
        MainWindow w;
        auto* view = openWritten(
            w, file,
            QStringLiteral("import sys, torch\n"
                           "x = torch.linspace(-1, 1, 12).reshape(3, 4)\n"
                           "torch.save({'q': torch.quantize_per_tensor(x, 0.25, 3, torch.quint8),\n"
                           "            'qc': torch.quantize_per_channel(x, torch.tensor([0.5, 0.125, 0.25], "
                           "dtype=torch.float64), torch.tensor([1, 0, -1]), 0, torch.qint8)}, sys.argv[1])\n"));
        QVERIFY(view != nullptr);
        const auto& ck = *view->document()->checkpoint;
        view->details()->showNode(ck.find("q"));
        QVERIFY2(view->details()->text().contains(QStringLiteral("scale 0.25, zero point 3")),
                 qPrintable(view->details()->text()));
        view->details()->showNode(ck.find("qc"));
        const QString perChannel = view->details()->text();
        QVERIFY2(perChannel.contains(QStringLiteral("on axis 0")) && perChannel.contains(QStringLiteral("3 scales")) &&
                     perChannel.contains(QStringLiteral("0.125 to 0.5")) &&
                     perChannel.contains(QStringLiteral("zero points -1 to 1")),
                 qPrintable(perChannel));
    }

    // A meta tensor holds no data: the key tree's size column and the details say so, and the
    // findings name it (meta-tensors), rather than 16.0 KiB and no word.
    void metaTensorsSayNoData()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("meta.pt"));
        MainWindow w;
        auto* view = openWritten(w, file,
                                 QStringLiteral("import sys, torch, torch.nn as nn\n"
                                                "m = nn.Linear(64, 64, device='meta')\n"
                                                "torch.save(m.state_dict(), sys.argv[1])\n"));
        QVERIFY(view != nullptr);
        const auto& ck = *view->document()->checkpoint;
        const auto node = ck.find("weight");
        QVERIFY(node.valid());
        bool sized = false;
        const auto* model = view->model();
        for (int r = 0; r < model->rowCount(); ++r) {
            const auto index = model->index(r, KeyTreeModel::Name);
            if (index.data().toString() == QStringLiteral("weight")) {
                QCOMPARE(index.siblingAtColumn(KeyTreeModel::Size).data().toString(), QStringLiteral("no data"));
                sized = true;
            }
        }
        QVERIFY(sized);
        view->details()->showNode(node);
        QVERIFY2(view->details()->text().contains(QStringLiteral("no data: a meta tensor")),
                 qPrintable(view->details()->text()));
        QTRY_VERIFY_WITH_TIMEOUT(view->diagnosis() != nullptr, 20000);
        const auto& list = view->diagnosis()->list;
        QVERIFY(std::any_of(list.begin(), list.end(), [](const auto& f) { return f.code == "meta-tensors"; }));
    }
};

QTEST_MAIN(TestModelView)
#include "tst_modelview.moc"
