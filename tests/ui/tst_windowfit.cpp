// What issue 17 found a user tripping over, each held as a behaviour: the findings' advice names
// the call that loads the format; a class used as a dict key shows as a class; the memory chart
// plots a rise in a unit that fits, on round ticks; small loads are not "0.00 GB/s"; no GPU claim
// without NVML; the window fits the screen and does not grow from inside; the filter expands to
// every match, counts them and gives the tree back as it was; the tree's context menu; Fix adds
// only its fix.
#include "detailspanel.h"
#include "device/nvml.h"
#include "device/testload.h"
#include "dialogs.h"
#include "document.h"
#include "documentview.h"
#include "exportpanel.h"
#include "findingspanel.h"
#include "keytreemodel.h"
#include "keytreeproxy.h"
#include "mainwindow.h"
#include "memorychart.h"
#include "moduletreemodel.h"
#include "planmodel.h"
#include "testloadpanel.h"
#include "text.h"
#include "uitest.h"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QDir>
#include <QFile>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QToolButton>
#include <QTreeView>
#include <QValueAxis>
#include <QtTest>

#include <cmath>
#include <set>

using namespace ckpt;
using namespace ckpt::ui;

namespace {

DocumentPtr load(const QString& path)
{
    auto doc = loadDocument(path.toStdString());
    if (!doc) {
        qWarning("%s", doc.error().describe().c_str());
        return {};
    }
    return *doc;
}

// True when `step` is 1, 2 or 5 times a power of ten.
bool isRound(double step)
{
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step)));
    return std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 || std::abs(mantissa - 5) < 1e-9;
}

device::Sample sample(double tMs, std::uint64_t systemUsed, std::uint64_t own)
{
    device::Sample s;
    s.tMs = tMs;
    s.usedBytes = {systemUsed};
    s.ownBytes = {own};
    return s;
}

// Every proxy row below `parent` whose key path contains `needle`.
void matches(const QAbstractItemModel& m, const QModelIndex& parent, const QString& needle, QList<QModelIndex>& out)
{
    for (int r = 0; r < m.rowCount(parent); ++r) {
        const auto i = m.index(r, 0, parent);
        if (i.data(KeyTreeModel::PathRole).toString().contains(needle, Qt::CaseInsensitive)) {
            out << i;
        }
        matches(m, i, needle, out);
    }
}

}  // namespace

class TestWindowFit : public QObject {
    Q_OBJECT
public:
    static void initMain() { uitest::initMain(); }

private Q_SLOTS:
    void init() { QSettings().clear(); }

    void noFindingsNamesTheLoaderOfTheFormat()
    {
        QVERIFY(noFindingsText(Format::Safetensors).contains(QStringLiteral("safetensors.torch.load_file")));
        QVERIFY(!noFindingsText(Format::Safetensors).contains(QStringLiteral("torch.load should")));
        QVERIFY(noFindingsText(Format::TorchZip).contains(QStringLiteral("torch.load")));

        auto doc = load(uitest::fixture("model.safetensors"));
        QVERIFY(doc);
        DocumentView view(doc);
        QSignalSpy ready(&view, &DocumentView::findingsReady);
        QTRY_COMPARE_WITH_TIMEOUT(ready.count(), 1, 20000);
        if (view.findings()->count() == 0) {
            const auto detail = view.findings()->findChild<QLabel*>(QStringLiteral("findingDetail"))->text();
            QVERIFY2(detail.contains(QStringLiteral("safetensors.torch.load_file")), qPrintable(detail));
        }
    }

    void aClassUsedAsAKeyShowsAsAClass()
    {
        // Lightning 1.3 keys `callbacks` by the callback's class; any importable class does the same.
        QTemporaryDir dir;
        const auto file = dir.filePath(QStringLiteral("class_key.pt"));
        QProcess python;
        python.start(QStringLiteral(CKPTSCOPE_PYTHON),
                     {QStringLiteral("-c"),
                      QStringLiteral("import sys, argparse, torch\n"
                                     "torch.save({'callbacks': {argparse.Namespace: {'best': 1.0}, 'plain': 2},"
                                     " 'w': torch.zeros(2)}, sys.argv[1])\n"),
                      file});
        QVERIFY(python.waitForFinished(120000));
        QVERIFY2(python.exitCode() == 0, python.readAllStandardError().constData());
        auto doc = load(file);
        QVERIFY(doc);
        KeyTreeModel model;
        model.setDocument(doc);
        const auto& ck = *doc->checkpoint;
        const auto callbacks = model.indexOfNode(ck.find("callbacks"));
        QVERIFY(callbacks.isValid());
        QCOMPARE(model.rowCount(callbacks), 2);
        const auto classRow = model.index(0, KeyTreeModel::Name, callbacks);
        QCOMPARE(classRow.data().toString(), QStringLiteral("<class 'argparse.Namespace'>"));
        QVERIFY(classRow.data(Qt::ToolTipRole).toString().contains(QStringLiteral("class argparse.Namespace")));
        QCOMPARE(model.classKey(KeyTreeModel::nodeOf(classRow)), QStringLiteral("argparse.Namespace"));
        // A string key stays as it is.
        const auto plain = model.index(1, KeyTreeModel::Name, callbacks);
        QCOMPARE(plain.data().toString(), QStringLiteral("plain"));
        QVERIFY(model.classKey(KeyTreeModel::nodeOf(plain)).isEmpty());
    }

    void axisTicksAreRound_data()
    {
        QTest::addColumn<double>("max");
        for (const double v : {0.55, 0.6, 1.0, 3.7, 108.0, 999.0, 1023.0, 4096.0, 0.013}) {
            QTest::newRow(qPrintable(QString::number(v))) << v;
        }
    }

    void axisTicksAreRound()
    {
        QFETCH(double, max);
        const auto axis = niceAxis(max);
        QVERIFY2(isRound(axis.step), qPrintable(QString::number(axis.step)));
        QVERIFY(axis.top >= max);
        QVERIFY2(axis.top / axis.step <= 10.0 + 1e-9, "no more than ten ticks");
        QVERIFY(std::abs(axis.top / axis.step - std::round(axis.top / axis.step)) < 1e-9);  // top is a tick
        // The labels tell the ticks apart at the decimals chosen.
        QCOMPARE(QString::number(axis.step, 'f', axis.decimals).toDouble(), axis.step);
    }

    void byteUnitFitsTheLargestValue()
    {
        QCOMPARE(byteUnitFor(500).name, QStringLiteral("bytes"));
        QCOMPARE(byteUnitFor(108 * 1024).name, QStringLiteral("KiB"));
        QCOMPARE(byteUnitFor(600ULL << 20U).name, QStringLiteral("MiB"));
        QCOMPARE(byteUnitFor(3ULL << 30U).name, QStringLiteral("GiB"));
    }

    void cpuChartPlotsTheLoadsRiseNotTheMachinesRam()
    {
        MemoryChart chart;
        chart.reset({"cpu"}, {QStringLiteral("cpu")}, QStringLiteral("cpu"));
        // 0.6 GiB used on the machine throughout; ckptscope's processes rise by 108 KiB.
        const std::uint64_t system = 600ULL << 20U;
        const std::uint64_t own = 50ULL << 20U;
        chart.addSample(sample(0, system, own));
        chart.addSample(sample(50, system + (300ULL << 20U), own + 40 * 1024));
        chart.addSample(sample(100, system, own + 108 * 1024));
        QCOMPARE(chart.seriesCount(), 1);
        QCOMPARE(chart.pointCount(0), 3);
        QCOMPARE(chart.valueAt(0, 0), std::uint64_t{0});
        QCOMPARE(chart.maxValue(), std::uint64_t{108 * 1024});
        QCOMPARE(chart.valueAxis()->titleText(), QStringLiteral("KiB added"));
        QVERIFY2(chart.valueAxis()->max() >= 108 && chart.valueAxis()->max() <= 150,
                 qPrintable(QString::number(chart.valueAxis()->max())));
        QVERIFY(isRound(chart.valueAxis()->tickInterval()));
        // When a value needs a larger unit, the points already drawn are redrawn in it.
        chart.addSample(sample(150, system, own + (3ULL << 20U)));
        QCOMPARE(chart.valueAxis()->titleText(), QStringLiteral("MiB added"));
        QCOMPARE(chart.valueAt(0, 2), std::uint64_t{108 * 1024});
    }

    void ratesUseAUnitThatFits()
    {
        // One unit system with the sizes beside them (KiB, MiB): binary rates.
        QCOMPARE(rateText(108 * 1024, 0.01), QStringLiteral("10.5 MiB/s"));
        QCOMPARE(rateText(2ULL << 30U, 1.0), QStringLiteral("2.00 GiB/s"));
        QCOMPARE(rateText(500, 1.0), QStringLiteral("500 B/s"));
        QVERIFY(!rateText(1, 1e9).contains(QStringLiteral("0.00")) || rateText(1, 1e9).contains(QStringLiteral("B/s")));
        QCOMPARE(rateText(100, 0), QStringLiteral("—"));
        QCOMPARE(durationText(0.00024), QStringLiteral("240 µs"));
        QCOMPARE(durationText(0.0031), QStringLiteral("3.1 ms"));
        QCOMPARE(durationText(2.454), QStringLiteral("2.45 s"));
    }

    void noDriverIsSaidPlainly()
    {
        device::Inventory inv;
        inv.devices.resize(1);  // the CPU only
        inv.gpuNote = "NVML not available (no NVIDIA driver?): libnvidia-ml.so.1: cannot open shared object file: "
                      "No such file or directory";
        const auto note = gpuNoteText(inv);
        QVERIFY2(note.startsWith(QStringLiteral("No NVIDIA driver found")), qPrintable(note));
        QVERIFY(!note.contains(QStringLiteral("libnvidia-ml")));

        // And a CPU load without NVML claims nothing about GPUs.
        device::TestloadReport report;
        report.device = "cpu";
        report.timeline.devices = {"cpu"};
        QVERIFY(otherGpusText(report).contains(QStringLiteral("not watched")));
        report.timeline.devices = {"cpu", "cuda:0"};
        QVERIFY(otherGpusText(report).contains(QStringLiteral("no other GPU was touched")));
    }

    void windowFitsTheScreenAndKeepsItsSize()
    {
        QCOMPARE(MainWindow::initialSize(QSize(2560, 1440)), MainWindow::kPreferredSize);
        const auto small = MainWindow::initialSize(QSize(1366, 728));
        QVERIFY(small.width() <= 1366 && small.height() <= 728);

        MainWindow w;
        w.resize(1024, 700);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({uitest::fixture("train_ckpt.pt")});
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 20000);
        auto* view = w.currentView();
        const auto& ck = *view->document()->checkpoint;
        QVERIFY(!ck.tensors.empty());
        QVERIFY(view->selectPath(qs(ck.tensors.begin()->path)));
        QCoreApplication::processEvents();
        const QSize before = w.size();

        // Statistics, the error banner and every side panel: none may make the window bigger.
        auto* details = view->details();
        QSignalSpy stats(details, &DetailsPanel::statisticsReady);
        QTest::mouseClick(details->findChild<QPushButton*>(QStringLiteral("statsButton")), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(stats.count(), 1, 20000);
        // The histogram keeps its height and its labels stay clear of the value preview.
        QCoreApplication::processEvents();
        auto* histogram = details->findChild<QWidget*>(QStringLiteral("histogram"));
        auto* preview = details->findChild<QWidget*>(QStringLiteral("valuePreview"));
        QVERIFY(histogram->isVisible());
        QVERIFY(histogram->height() >= histogram->minimumHeight());
        if (preview->isVisible()) {
            QVERIFY(!histogram->geometry().intersects(preview->geometry()));
        }
        QSignalSpy failed(&w, &MainWindow::openFailed);
        w.openFiles({uitest::fixture("nonexistent.pt")});
        QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, 20000);
        for (int tab = 0; tab < view->sideTabs()->count(); ++tab) {
            view->sideTabs()->setCurrentIndex(tab);
            QCoreApplication::processEvents();
        }
        QCoreApplication::processEvents();
        QCOMPARE(w.size(), before);

        // Name takes the spare width, the other columns fit what they show, and every border can
        // be dragged (ColumnFitter; tst_columns has the rest).
        auto* header = view->tree()->header();
        for (int c = KeyTreeModel::Name; c < KeyTreeModel::ColumnCount; ++c) {
            QCOMPARE(header->sectionResizeMode(c), QHeaderView::Interactive);
        }
        QVERIFY(header->length() >= view->tree()->viewport()->width());
        QCOMPARE(view->tree()->textElideMode(), Qt::ElideMiddle);
    }

    void aTrainerFolderListsItsCheckpointFiles()
    {
        QTemporaryDir dir;
        QDir(dir.path()).mkpath(QStringLiteral("checkpoint-5000/sub"));
        const QDir folder(dir.filePath(QStringLiteral("checkpoint-5000")));
        QVERIFY(QFile::copy(uitest::fixture("plain_sd.pt"), folder.filePath(QStringLiteral("optimizer.pt"))));
        QVERIFY(QFile::copy(uitest::fixture("model.safetensors"),
                            folder.filePath(QStringLiteral("sub/model.safetensors"))));
        QFile json(folder.filePath(QStringLiteral("trainer_state.json")));
        QVERIFY(json.open(QIODevice::WriteOnly));
        json.write("{}");
        json.close();
        const auto files = MainWindow::checkpointFilesIn(folder.path());
        QCOMPARE(files, QStringList({folder.filePath(QStringLiteral("optimizer.pt")),
                                     folder.filePath(QStringLiteral("sub/model.safetensors"))}));

        MainWindow w;
        w.show();
        QSignalSpy offered(&w, &MainWindow::folderOffered);
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({folder.path()});
        QCOMPARE(offered.count(), 1);
        QVERIFY(w.errorText().contains(QStringLiteral("optimizer.pt")));
        QVERIFY(!w.errorText().contains(QStringLiteral("distributed")));
        // A listing is information, not an error: neutral, with the info icon, not red.
        auto* banner = w.findChild<QWidget*>(QStringLiteral("errorBanner"));
        QCOMPARE(banner->property("kind").toString(), QStringLiteral("info"));
        QVERIFY(banner->palette().color(QPalette::Window).red() < banner->palette().color(QPalette::Window).blue());
        // Following a link opens that file.
        auto* label = w.findChild<QLabel*>(QStringLiteral("errorText"));
        Q_EMIT label->linkActivated(QUrl::fromLocalFile(files.first()).toString());
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 20000);
        QCOMPARE(opened.at(0).at(0).toString(), files.first());

        // A folder with no such file still gets the reader's own words.
        QTemporaryDir empty;
        QSignalSpy failed(&w, &MainWindow::openFailed);
        w.openFiles({empty.path()});
        QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, 20000);
        QCOMPARE(banner->property("kind").toString(), QStringLiteral("error"));  // an error is red again
    }

    // A folder that holds one model beside a run's state (accelerate's save_state here) opens that
    // model as its document, the model-folder finding naming the other files; no listing is offered.
    void anAccelerateFolderOpensItsModel()
    {
        QTemporaryDir dir;
        QVERIFY(QFile::copy(uitest::fixture("model.safetensors"), dir.filePath(QStringLiteral("model.safetensors"))));
        QVERIFY(QFile::copy(uitest::fixture("plain_sd.pt"), dir.filePath(QStringLiteral("optimizer.bin"))));
        QVERIFY(QFile::copy(uitest::fixture("plain_sd.pt"), dir.filePath(QStringLiteral("random_states_0.pkl"))));
        MainWindow w;
        w.show();
        QSignalSpy offered(&w, &MainWindow::folderOffered);
        QSignalSpy opened(&w, &MainWindow::documentOpened);
        w.openFiles({dir.path()});
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 20000);
        QCOMPARE(offered.count(), 0);
        auto* view = w.currentView();
        QVERIFY(view);
        QCOMPARE(QString::fromStdString(view->document()->checkpoint->path),
                 dir.filePath(QStringLiteral("model.safetensors")));
        QTRY_VERIFY_WITH_TIMEOUT(view->diagnosis(), 20000);
        const int at = view->findings()->indexOfCode(QStringLiteral("model-folder"));
        QVERIFY(at >= 0);
        view->findings()->select(at);
        // Each file named, a link where it opens on its own (issue 39).
        QVERIFY2(view->findings()->detailText().contains(QStringLiteral(">optimizer.bin</a> (optimizer)")),
                 qPrintable(view->findings()->detailText()));
    }

    void modelViewIsTheModuleHierarchyOfAPickledModel()
    {
        // torch itself is the oracle: state_dict() keys and shapes, parameters() per named module.
        QTemporaryDir dir;
        const auto file = dir.filePath(QStringLiteral("whole.pt"));
        QProcess python;
        python.start(
            QStringLiteral(CKPTSCOPE_PYTHON),
            {QStringLiteral("-c"),
             QStringLiteral("import sys, json, collections, torch\n"
                            "from torch import nn\n"
                            "m = nn.Sequential(collections.OrderedDict(conv1=nn.Conv2d(1, 6, 5), act=nn.ReLU(),\n"
                            "    head=nn.Sequential(nn.Linear(6, 2, bias=False), nn.BatchNorm1d(2))))\n"
                            "torch.save(m, sys.argv[1])\n"
                            "json.dump({'keys': {k: list(v.shape) for k, v in m.state_dict().items()},\n"
                            "  'params': {n: sum(p.numel() for p in x.parameters()) for n, x in "
                            "m.named_modules()}}, sys.stdout)\n"),
             file});
        QVERIFY(python.waitForFinished(120000));
        QVERIFY2(python.exitCode() == 0, python.readAllStandardError().constData());
        const auto oracle = QJsonDocument::fromJson(python.readAllStandardOutput()).object();

        auto doc = load(file);
        QVERIFY(doc);
        DocumentView view(doc);
        QVERIFY(view.modelViewShown());  // a pickled model opens as the model
        auto* model = view.moduleModel();
        QCOMPARE(model->rowCount(), 1);
        const auto root = model->index(0, 0);
        QCOMPARE(root.data().toString(), QStringLiteral("(model)"));
        QCOMPARE(root.sibling(0, ModuleTreeModel::Type).data().toString(), QStringLiteral("Sequential"));
        QCOMPARE(NodeIndex{root.data(ModuleTreeModel::NodeRole).toUInt()}, kRootNode);  // the root is a row
        // A model this small opens with every module expanded, its parameters in sight.
        QVERIFY(view.moduleTree()->isExpanded(model->index(0, 0, root)));
        QVERIFY(view.moduleTree()->isExpanded(model->index(2, 0, root)));  // head

        QJsonObject keys;
        QJsonObject params;
        std::vector<QModelIndex> stack{root};
        while (!stack.empty()) {
            const auto i = stack.back();
            stack.pop_back();
            const auto node = NodeIndex{i.data(ModuleTreeModel::NodeRole).toUInt()};
            const auto key = i.data(ModuleTreeModel::StateKeyRole).toString();
            if (doc->checkpoint->nodes[node].kind == NodeKind::Module) {
                params.insert(key, static_cast<qint64>(model->parameterCount(i)));
            } else {
                QJsonArray shape;
                for (const auto d : doc->checkpoint->tensors[doc->checkpoint->nodes[node].tensor].shape) {
                    shape.append(static_cast<qint64>(d));
                }
                keys.insert(key, shape);
                QCOMPARE(i.sibling(i.row(), ModuleTreeModel::Shape).data().toString(),
                         shapeText(doc->checkpoint->tensors[doc->checkpoint->nodes[node].tensor].shape));
            }
            for (int r = 0; r < model->rowCount(i); ++r) {
                stack.push_back(model->index(r, 0, i));
            }
        }
        QCOMPARE(keys, oracle.value(QStringLiteral("keys")).toObject());
        QCOMPARE(params, oracle.value(QStringLiteral("params")).toObject());

        // The raw pickle is a toggle away, and the whole-model finding points at the root row.
        auto* toggle = view.findChild<QToolButton*>(QStringLiteral("modelViewToggle"));
        QVERIFY(toggle->isVisible() || !view.isVisible());
        toggle->click();
        QVERIFY(!view.modelViewShown());
        toggle->click();
        QVERIFY(view.modelViewShown());
        QSignalSpy ready(&view, &DocumentView::findingsReady);
        QTRY_COMPARE_WITH_TIMEOUT(ready.count(), 1, 20000);
        const int whole = view.findings()->indexOfCode(QStringLiteral("whole-model"));
        QVERIFY(whole >= 0);
        view.findings()->select(whole);
        QCOMPARE(view.moduleTree()->currentIndex().sibling(view.moduleTree()->currentIndex().row(), 0), root);

        // A plain state dict has no Model view.
        DocumentView plain(load(uitest::fixture("plain_sd.pt")));
        QVERIFY(!plain.modelViewShown());
        QCOMPARE(plain.moduleModel()->rowCount(), 0);
    }

    void findingsOffTheModelShowInTheRawView()
    {
        // A model beside an optimizer object, a numpy array and a Namespace, with a numpy array as
        // one module's plain attribute; and a pickle whose root is a Namespace.
        QTemporaryDir dir;
        const auto mixed = dir.filePath(QStringLiteral("mixed.pt"));
        const auto space = dir.filePath(QStringLiteral("namespace.pt"));
        QProcess python;
        python.start(QStringLiteral(CKPTSCOPE_PYTHON),
                     {QStringLiteral("-c"),
                      QStringLiteral("import sys, argparse, numpy as np, torch\n"
                                     "from torch import nn\n"
                                     "m = nn.Sequential(nn.Linear(4, 2))\n"
                                     "m.scaler = np.arange(3.0)\n"
                                     "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                                     "torch.save({'model': m, 'optimizer': opt, 'mean': np.zeros(2),\n"
                                     "    'args': argparse.Namespace(lr=0.1)}, sys.argv[1])\n"
                                     "torch.save(argparse.Namespace(lr=0.1, w=torch.zeros(2)), sys.argv[2])\n"),
                      mixed, space});
        QVERIFY(python.waitForFinished(120000));
        QVERIFY2(python.exitCode() == 0, python.readAllStandardError().constData());

        auto doc = load(mixed);
        QVERIFY(doc);
        const auto& ck = *doc->checkpoint;
        DocumentView view(doc);
        QVERIFY(view.modelViewShown());
        QSignalSpy ready(&view, &DocumentView::findingsReady);
        QTRY_COMPARE_WITH_TIMEOUT(ready.count(), 1, 20000);
        // The finding selected on opening leaves the file in the Model view, with a row current.
        QVERIFY(view.modelViewShown());
        QVERIFY(view.moduleTree()->currentIndex().isValid());

        auto nodeAt = [](const QModelIndex& i, int role) {
            return NodeIndex{i.siblingAtColumn(0).data(role).toUInt()};
        };
        QSignalSpy asked(view.findings(), &FindingsPanel::highlightPaths);
        const int count = view.findings()->count();
        QVERIFY(count >= 2);
        QStringList sawRaw;
        QStringList sawModel;
        for (int i = 0; i < count; ++i) {
            view.findings()->select(i == 0 ? 1 : 0);  // so that selecting i is a change
            view.showModelView(true);
            view.findings()->select(i);
            const auto paths = asked.last().at(0).value<std::vector<std::string>>();
            QVERIFY(!paths.empty());
            std::set<NodeIndex> concerned;
            bool allInModel = true;
            for (const auto& p : paths) {
                concerned.insert(ck.find(p));
                allInModel = allInModel && view.moduleModel()->indexOfNode(ck.find(p)).isValid();
            }
            const auto firstPath = qs(paths.front());
            if (allInModel) {
                // Every key has a Model view row: it stays, one of them current.
                QVERIFY2(view.modelViewShown(), qPrintable(firstPath));
                QVERIFY(concerned.contains(nodeAt(view.moduleTree()->currentIndex(), ModuleTreeModel::NodeRole)));
                sawModel << firstPath;
            } else {
                // Some key has none: the raw view, with a concerned row current and visible.
                QVERIFY2(!view.modelViewShown(), qPrintable(firstPath));
                const auto current = view.tree()->currentIndex();
                QVERIFY(current.isValid());
                QVERIFY(concerned.contains(KeyTreeModel::nodeOf(view.proxy()->mapToSource(current))));
                sawRaw << firstPath;
            }
        }
        // whole-model points at `model` alone; the optimizer, arrays and Namespace have no module row.
        QVERIFY2(sawModel.contains(QStringLiteral("model")), qPrintable(sawModel.join(QLatin1Char(','))));
        QVERIFY2(!sawRaw.isEmpty(), "a finding on the optimizer, the arrays or the Namespace");

        // The optimizer object itself, selected as a user would reach it (the finding's paths).
        const int weightsOnly = view.findings()->indexOfCode(QStringLiteral("not-weights-only"));
        QVERIFY(weightsOnly >= 0);
        view.showModelView(true);
        view.findings()->select(weightsOnly == 0 ? 1 : 0);
        view.showModelView(true);
        view.findings()->select(weightsOnly);
        QVERIFY(!view.modelViewShown());
        QVERIFY(ck.find("optimizer").valid());
        const auto optimizerRow = view.proxy()->mapFromSource(view.model()->indexOfNode(ck.find("optimizer")));
        QVERIFY(optimizerRow.isValid());
        QCOMPARE(optimizerRow.siblingAtColumn(KeyTreeModel::Kind).data().toString(), QStringLiteral("SGD"));
        QVERIFY(optimizerRow.data(Qt::BackgroundRole).isValid());  // highlighted as concerned

        // A Namespace at the root is a row of its own, which its finding selects.
        auto rootDoc = load(space);
        QVERIFY(rootDoc);
        DocumentView plain(rootDoc);
        QVERIFY(!plain.modelViewShown());
        QCOMPARE(plain.proxy()->rowCount(), 1);
        const auto root = plain.proxy()->index(0, 0);
        QCOMPARE(KeyTreeModel::nodeOf(plain.proxy()->mapToSource(root)), kRootNode);
        QCOMPARE(root.siblingAtColumn(KeyTreeModel::Kind).data().toString(), QStringLiteral("Namespace"));
        QCOMPARE(plain.proxy()->rowCount(root), 2);  // lr and w under it
        QSignalSpy rootReady(&plain, &DocumentView::findingsReady);
        QTRY_COMPARE_WITH_TIMEOUT(rootReady.count(), 1, 20000);
        // Its only finding, selected on opening, is about the root: the root row is current and lit.
        QCOMPARE(plain.findings()->count(), 1);
        QVERIFY(plain.findings()->indexOfCode(QStringLiteral("not-weights-only")) == 0);
        QCOMPARE(KeyTreeModel::nodeOf(plain.proxy()->mapToSource(plain.tree()->currentIndex())), kRootNode);
        QVERIFY(root.data(Qt::BackgroundRole).isValid());
    }

    void longTabTitlesAreShortened()
    {
        const QString name = QStringLiteral("Mohammad-Hallaq__Tiny-AoA__KD_experiments_model_pruned_0.95.ckpt");
        const auto title = MainWindow::tabTitle(name);
        QVERIFY(title.size() <= 32);
        QVERIFY(title.contains(QStringLiteral("…")));
        QVERIFY(title.endsWith(QStringLiteral(".ckpt")));
        QCOMPARE(MainWindow::tabTitle(QStringLiteral("short.pt")), QStringLiteral("short.pt"));
    }

    void detailsPaneSizeIsKept()
    {
        auto doc = load(uitest::fixture("train_ckpt.pt"));
        QVERIFY(doc);
        QList<int> sizes;
        {
            DocumentView view(doc);
            view.resize(1200, 800);
            view.show();
            QVERIFY(QTest::qWaitForWindowExposed(&view));
            auto* right = view.findChild<QSplitter*>(QStringLiteral("rightSplitter"));
            QVERIFY(right);
            right->setSizes({600, 180});
            // What a user's drag emits.
            Q_EMIT right->splitterMoved(600, 1);
            sizes = right->sizes();
        }
        DocumentView again(doc);
        again.resize(1200, 800);
        again.show();
        QVERIFY(QTest::qWaitForWindowExposed(&again));
        QCOMPARE(again.findChild<QSplitter*>(QStringLiteral("rightSplitter"))->sizes(), sizes);
    }

    void filterExpandsCountsAndGivesTheTreeBack()
    {
        auto doc = load(uitest::fixture("train_ckpt.pt"));
        QVERIFY(doc);
        DocumentView view(doc);
        view.resize(1200, 800);
        view.show();
        auto* tree = view.tree();
        tree->collapseAll();
        const auto first = view.proxy()->index(0, 0);
        tree->expand(first);
        QVERIFY(view.selectPath(QStringLiteral("epoch")) ||
                view.selectPath(view.proxy()->index(0, 0).data(KeyTreeModel::PathRole).toString()));
        const auto selectedPath = tree->currentIndex().data(KeyTreeModel::PathRole).toString();

        auto* filter = view.findChild<QLineEdit*>(QStringLiteral("filterEdit"));
        QSignalSpy applied(&view, &DocumentView::filterApplied);
        filter->setText(QStringLiteral("weight"));
        QTRY_VERIFY(applied.count() >= 1);
        QList<QModelIndex> found;
        matches(*view.proxy(), {}, QStringLiteral("weight"), found);
        QVERIFY(!found.isEmpty());
        for (const auto& m : found) {
            for (auto p = m.parent(); p.isValid(); p = p.parent()) {
                QVERIFY2(tree->isExpanded(p), qPrintable(m.data(KeyTreeModel::PathRole).toString()));
            }
        }
        const int total = static_cast<int>(doc->checkpoint->nodes.size()) - 1;
        QCOMPARE(view.proxy()->matchCount(), static_cast<int>(found.size()));
        QCOMPARE(view.filterStatus(), QStringLiteral("%1 of %2 keys").arg(found.size()).arg(total));
        QVERIFY(view.findChild<QLabel*>(QStringLiteral("filterStatus"))->isVisible());

        filter->setText(QStringLiteral("no-such-key-anywhere"));
        QTRY_COMPARE(view.proxy()->filterText(), QStringLiteral("no-such-key-anywhere"));
        QVERIFY(view.filterStatus().startsWith(QStringLiteral("No key matches")));

        // Esc clears; the selection and what was expanded before come back.
        filter->setFocus();
        QTest::keyClick(filter, Qt::Key_Escape);
        QVERIFY(filter->text().isEmpty());
        QVERIFY(view.proxy()->filterText().isEmpty());
        QVERIFY(!view.findChild<QLabel*>(QStringLiteral("filterStatus"))->isVisible());
        QCOMPARE(tree->currentIndex().data(KeyTreeModel::PathRole).toString(), selectedPath);
        QVERIFY(tree->isExpanded(view.proxy()->index(0, 0)) == (view.proxy()->rowCount(view.proxy()->index(0, 0)) > 0));
        for (int r = 1; r < view.proxy()->rowCount(); ++r) {
            const auto row = view.proxy()->index(r, 0);
            const bool holdsSelection =
                selectedPath.startsWith(row.data(KeyTreeModel::PathRole).toString() + QLatin1Char('.'));
            QVERIFY2(!tree->isExpanded(row) || holdsSelection, qPrintable(row.data(KeyTreeModel::PathRole).toString()));
        }
    }

    void contextMenuActsOnTheRow()
    {
        auto doc = load(uitest::fixture("train_ckpt.pt"));
        QVERIFY(doc);
        DocumentView view(doc);
        view.show();
        // A container row and a tensor row.
        QModelIndex container;
        QModelIndex tensor;
        QList<QModelIndex> all;
        matches(*view.proxy(), {}, QString(), all);
        for (const auto& i : all) {
            const auto kind = i.sibling(i.row(), KeyTreeModel::Kind).data().toString();
            if (!container.isValid() && view.proxy()->hasChildren(i)) {
                container = i;
            }
            if (!tensor.isValid() && (kind == QLatin1String("tensor") || kind == QLatin1String("parameter"))) {
                tensor = i;
            }
        }
        QVERIFY(container.isValid() && tensor.isValid());

        std::unique_ptr<QMenu> menu(view.contextMenuFor(tensor));
        const auto path = tensor.data(KeyTreeModel::PathRole).toString();
        menu->findChild<QAction*>(QStringLiteral("copyPathAction"))->trigger();
        QCOMPARE(QApplication::clipboard()->text(), path);
        menu->findChild<QAction*>(QStringLiteral("copyValueAction"))->trigger();
        QVERIFY(QApplication::clipboard()->text().contains(
            tensor.sibling(tensor.row(), KeyTreeModel::Shape).data().toString()));
        QVERIFY(!menu->findChild<QAction*>(QStringLiteral("expandBelowAction"))->isEnabled());
        menu->findChild<QAction*>(QStringLiteral("addDropAction"))->trigger();
        QCOMPARE(view.exportPanel()->findChild<QLineEdit*>(QStringLiteral("dropEdit"))->text(), path);
        QCOMPARE(view.sideTabs()->currentIndex(), 2);

        std::unique_ptr<QMenu> containerMenu(view.contextMenuFor(container));
        containerMenu->findChild<QAction*>(QStringLiteral("expandBelowAction"))->trigger();
        QList<QModelIndex> below;
        matches(*view.proxy(), container, QString(), below);
        for (const auto& i : below) {
            QVERIFY(!view.proxy()->hasChildren(i) || view.tree()->isExpanded(i));
        }
        containerMenu->findChild<QAction*>(QStringLiteral("collapseBelowAction"))->trigger();
        QVERIFY(!view.tree()->isExpanded(container));
        for (const auto& i : below) {
            QVERIFY(!view.tree()->isExpanded(i));
        }
        containerMenu->findChild<QAction*>(QStringLiteral("selectRootAction"))->trigger();
        QCOMPARE(view.exportPanel()->findChild<QLineEdit*>(QStringLiteral("selectEdit"))->text(),
                 container.data(KeyTreeModel::PathRole).toString());
    }

    void convertingTheFormatIsAChange()
    {
        using transform::OutputFormat;
        QVERIFY(planSummary(Format::Safetensors, OutputFormat::Torch, 0).contains(QStringLiteral("torch.save zip")));
        QVERIFY(!planSummary(Format::Safetensors, OutputFormat::Torch, 0).contains(QStringLiteral("nothing")));
        QVERIFY(planSummary(Format::TorchZip, OutputFormat::Safetensors, 3).startsWith(QStringLiteral("3 steps")));
        QVERIFY(planSummary(Format::TorchZip, OutputFormat::Torch, 0).contains(QStringLiteral("changes nothing")));
        QCOMPARE(planSummary(Format::TorchLegacy, OutputFormat::Torch, 1), QStringLiteral("1 step."));
    }

    void planNotesSayWhatTheyAre()
    {
        using transform::PlanStep;
        using transform::StepKind;
        QCOMPARE(stepLabel(PlanStep{StepKind::Rename, "a", "a", "b", ""}), QStringLiteral("rename"));
        QCOMPARE(stepLabel(PlanStep{StepKind::Note, "", "", "",
                                    "3 storage(s) (12 B) no kept value refers to are not written"}),
                 QStringLiteral("not written"));
        QCOMPARE(stepLabel(PlanStep{StepKind::Note, "x", "b''", "_codecs.encode('', 'latin1')", "empty bytes"}),
                 QStringLiteral("rewritten"));
        QCOMPARE(stepLabel(PlanStep{StepKind::Note, "", "", "", "storage keys renumbered 0..3"}),
                 QStringLiteral("info"));
    }

    // The plan's Detail column wraps: every row is as tall as its wrapped note, so a narrow panel
    // shows whole notes instead of cutting them.
    void planDetailWraps()
    {
        auto doc = load(uitest::fixture("ddp_sd_cuda0.pt"));
        QVERIFY(doc);
        ExportPanel panel;
        panel.resize(520, 600);
        panel.show();
        QSignalSpy planned(&panel, &ExportPanel::planReady);
        panel.setDocument(doc);
        QTRY_VERIFY_WITH_TIMEOUT(planned.count() >= 1, 20000);
        planned.clear();
        panel.setPreset(ExportPanel::SingleCard);
        QTRY_VERIFY_WITH_TIMEOUT(planned.count() >= 1, 20000);
        auto* table = panel.findChild<QTableView*>(QStringLiteral("planTable"));
        QVERIFY(table->model()->rowCount() > 0);
        const int width = table->columnWidth(PlanModel::Detail);
        // The notes keep a share of the width however long the paths beside them are.
        QVERIFY2(width >= table->viewport()->width() / 5,
                 qPrintable(QStringLiteral("Detail %1 px of %2").arg(width).arg(table->viewport()->width())));
        const int line = table->fontMetrics().height();
        bool wrapped = false;
        for (int r = 0; r < table->model()->rowCount(); ++r) {
            const QString text = table->model()->index(r, PlanModel::Detail).data().toString();
            // As the cell draws it: long names ("load_state_dict") may break after '.', '/' and '_'.
            QString shown = text;
            for (const QChar c : {QLatin1Char('.'), QLatin1Char('/'), QLatin1Char('_')}) {
                shown.replace(c, QString(c) + QChar(0x200B));
            }
            const int need =
                table->fontMetrics().boundingRect(QRect(0, 0, width - 8, 100000), Qt::TextWordWrap, shown).height();
            QVERIFY2(table->rowHeight(r) >= need, qPrintable(text));
            wrapped = wrapped || table->rowHeight(r) >= 2 * line;
        }
        QVERIFY(wrapped);
    }

    // A zip cut off before its central directory opens from its local headers: the window shows
    // the tree, the truncated-archive finding, and refuses to export what survived.
    void aTruncatedZipShowsWhatSurvived()
    {
        QTemporaryDir dir;
        const QString cut = dir.filePath(QStringLiteral("cut.pt"));
        QVERIFY(QFile::copy(uitest::fixture("ddp_sd_cuda0.pt"), cut));
        QFile f(cut);
        QVERIFY(f.open(QIODevice::ReadWrite));
        QVERIFY(f.resize(f.size() * 3 / 4));  // inside the storage records, past data.pkl
        f.close();
        auto doc = load(cut);
        QVERIFY(doc);
        QVERIFY(doc->checkpoint->truncation.salvaged);
        DocumentView view(doc);
        QSignalSpy ready(&view, &DocumentView::findingsReady);
        QTRY_COMPARE_WITH_TIMEOUT(ready.count(), 1, 20000);
        QVERIFY(view.findings()->indexOfCode(QStringLiteral("truncated-archive")) >= 0);
        ExportPanel panel;
        QSignalSpy planned(&panel, &ExportPanel::planReady);
        panel.setDocument(doc);
        QTRY_VERIFY_WITH_TIMEOUT(planned.count() >= 1, 20000);
        QVERIFY(!panel.findChild<QPushButton*>(QStringLiteral("exportButton"))->isEnabled());
        QVERIFY(panel.findChild<QLabel*>(QStringLiteral("planStatus"))->text().contains(QStringLiteral("--salvage")));
    }

    void exportAsksBeforeReplacingAFile()
    {
        QTemporaryDir dir;
        const auto target = dir.filePath(QStringLiteral("exists.pt"));
        {
            QFile f(target);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("keep me");
        }
        auto doc = load(uitest::fixture("ddp_sd_cuda0.pt"));
        QVERIFY(doc);
        ExportPanel panel;
        panel.setDocument(doc);
        QSignalSpy planned(&panel, &ExportPanel::planReady);
        QTRY_VERIFY_WITH_TIMEOUT(planned.count() >= 1, 20000);
        auto* output = panel.findChild<QLineEdit*>(QStringLiteral("outputEdit"));
        output->setText(target);
        auto* button = panel.findChild<QPushButton*>(QStringLiteral("exportButton"));

        // No: the file stays as it was.
        dialogs::setNextConfirm(false);
        QTest::mouseClick(button, Qt::LeftButton);
        QVERIFY(dialogs::lastConfirmText().contains(QStringLiteral("exists.pt")));
        QFile kept(target);
        QVERIFY(kept.open(QIODevice::ReadOnly));
        QCOMPARE(kept.readAll(), QByteArray("keep me"));
        kept.close();

        // Yes: it is replaced by a checkpoint.
        dialogs::setNextConfirm(true);
        QSignalSpy exported(&panel, &ExportPanel::exportFinished);
        QTest::mouseClick(button, Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(exported.count(), 1, 30000);
        QVERIFY2(exported.at(0).at(0).toBool(), qPrintable(exported.at(0).at(1).toString()));
        QVERIFY(openCheckpoint(target.toStdString()));
    }

    void fixAddsOnlyItsOwnFix()
    {
        auto doc = load(uitest::fixture("ddp_sd_cuda0.pt"));
        QVERIFY(doc);
        ExportPanel panel;
        panel.setDocument(doc);
        panel.setPreset(ExportPanel::SingleCard);
        transform::Options fix;
        fix.stripPrefixes = {"module."};
        panel.addFix(fix);
        QCOMPARE(panel.preset(), ExportPanel::Custom);
        QCOMPARE(panel.findChild<QLineEdit*>(QStringLiteral("stripEdit"))->text(), QStringLiteral("module."));
        for (const auto* box : panel.findChildren<QCheckBox*>()) {
            QVERIFY2(!box->isChecked(), qPrintable(box->objectName()));
        }
        QVERIFY(panel.findChild<QLineEdit*>(QStringLiteral("mapLocationEdit"))->text().isEmpty());
        // A second fix adds to the first.
        transform::Options cpu;
        cpu.weightsOnly = true;
        panel.addFix(cpu);
        QCOMPARE(panel.findChild<QLineEdit*>(QStringLiteral("stripEdit"))->text(), QStringLiteral("module."));
        QVERIFY(panel.findChild<QCheckBox*>(QStringLiteral("weightsOnlyCheck"))->isChecked());
    }
};

QTEST_MAIN(TestWindowFit)
#include "tst_windowfit.moc"
