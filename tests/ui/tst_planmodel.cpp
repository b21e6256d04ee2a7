// The export preview's plan model: QAbstractItemModelTester over real plans (each preset on the
// fixtures, and the resets the panel makes when a plan fails or is replaced), and the cells of a
// known plan: what the user reads before anything is written.
#include "checkpoint/checkpoint.h"
#include "planmodel.h"
#include "transform/transform.h"
#include "uitest.h"

#include <QAbstractItemModelTester>
#include <QtTest>

using namespace ckpt;
using namespace ckpt::ui;

namespace {

PlanModel::Steps planOf(const char* fixture, const transform::Options& options)
{
    auto ck = openCheckpoint(uitest::fixture(fixture).toStdString());
    if (!ck) {
        qWarning("%s", ck.error().describe().c_str());
        return {};
    }
    auto plan = transform::makePlan(**ck, options);
    if (!plan) {
        qWarning("%s", plan.error().describe().c_str());
        return {};
    }
    return std::make_shared<const std::vector<transform::PlanStep>>(std::move(plan->steps));
}

QString cell(const PlanModel& model, int row, int column, int role = Qt::DisplayRole)
{
    return model.data(model.index(row, column), role).toString();
}

}  // namespace

class TestPlanModel : public QObject {
    Q_OBJECT
public:
    static void initMain() { uitest::initMain(); }

private Q_SLOTS:
    void passesModelTester_data()
    {
        QTest::addColumn<QString>("file");
        for (const char* f : {"train_ckpt.pt", "ddp_sd.pt", "ddp_sd_cuda0.pt", "whole_model.pt", "multi_gpu.pt",
                              "plain_sd.pt", "compile_sd.pt", "views.pt"}) {
            QTest::newRow(f) << QString::fromLatin1(f);
        }
    }

    void passesModelTester()
    {
        QFETCH(QString, file);
        const auto name = file.toLatin1();
        PlanModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        // The tester cannot see a change made without signals; a view re-reads only on a reset.
        QSignalSpy resets(&model, &QAbstractItemModel::modelReset);
        auto compactSafetensors = transform::singleCardPreset();
        compactSafetensors.compact = true;
        compactSafetensors.format = transform::OutputFormat::Safetensors;
        for (const auto& options : {transform::singleCardPreset(), transform::multiCardPreset(), compactSafetensors}) {
            const auto steps = planOf(name.constData(), options);
            QVERIFY(steps);
            const auto before = resets.count();
            model.setSteps(steps);
            QCOMPARE(resets.count(), before + 1);
            QCOMPARE(model.rowCount(), static_cast<int>(steps->size()));
            QCOMPARE(model.columnCount(), int(PlanModel::ColumnCount));
            // Every cell is the step's own text, so the preview says exactly what the write will do.
            for (int row = 0; row < model.rowCount(); ++row) {
                const auto& s = (*steps)[static_cast<std::size_t>(row)];
                // Notes are named for what they say ("not written", "info"), the rest by their kind.
                QCOMPARE(cell(model, row, PlanModel::Step),
                         s.kind == transform::StepKind::Note
                             ? stepLabel(s)
                             : QString::fromStdString(std::string(transform::stepKindName(s.kind))));
                // A remap of several storages is named by them all, not by its first key alone.
                const bool several = s.kind == transform::StepKind::Remap && s.count > 1;
                QCOMPARE(
                    cell(model, row, PlanModel::Key),
                    several ? QStringLiteral("all %1 storages on %2").arg(s.count).arg(QString::fromStdString(s.before))
                            : QString::fromStdString(s.path));
                QCOMPARE(cell(model, row, PlanModel::Before), QString::fromStdString(s.before));
                QCOMPARE(cell(model, row, PlanModel::After), s.kind == transform::StepKind::Drop && s.after.empty()
                                                                 ? QStringLiteral("—")
                                                                 : QString::fromStdString(s.after));
                QCOMPARE(cell(model, row, PlanModel::Detail), QString::fromStdString(s.detail));
                for (int column = 0; column < model.columnCount(); ++column) {
                    if (several && column == PlanModel::Key) {  // the tooltip names the first key too
                        QVERIFY(cell(model, row, column, Qt::ToolTipRole).contains(QString::fromStdString(s.path)));
                        continue;
                    }
                    QCOMPARE(cell(model, row, column, Qt::ToolTipRole), cell(model, row, column));
                }
            }
            // A failed plan clears the preview; the next one fills it again.
            model.setSteps({});
            QCOMPARE(model.rowCount(), 0);
            model.setSteps(steps);
        }
    }

    void showsAKnownPlan()
    {
        // A training checkpoint made single-card: three values converted for weights_only (the
        // numpy array becomes a tensor), then the model's keys lose `module.`, its storages move to
        // the CPU, and a note says the storages were renumbered (the array's is new).
        const auto steps = planOf("train_ckpt.pt", transform::singleCardPreset());
        QVERIFY(steps);
        PlanModel model;
        model.setSteps(steps);
        QCOMPARE(model.rowCount(), 15);
        QCOMPARE(model.columnCount(), 5);
        const QStringList headers{QStringLiteral("Step"), QStringLiteral("Key"), QStringLiteral("Before"),
                                  QStringLiteral("After"), QStringLiteral("Detail")};
        for (int column = 0; column < 5; ++column) {
            QCOMPARE(model.headerData(column, Qt::Horizontal).toString(), headers[column]);
        }
        QVERIFY(!model.headerData(0, Qt::Vertical).isValid());  // the view hides row numbers anyway

        const auto rowText = [&](int row) {
            QStringList cells;
            for (int column = 0; column < model.columnCount(); ++column) {
                cells << cell(model, row, column);
            }
            return cells;
        };
        QCOMPARE(rowText(0),
                 (QStringList{QStringLiteral("convert"), QStringLiteral("args"), QStringLiteral("argparse.Namespace"),
                              QStringLiteral("dict"), QStringLiteral("attribute dict of the object (3 fields)")}));
        QCOMPARE(rowText(1),
                 (QStringList{QStringLiteral("convert"), QStringLiteral("best_acc"), QStringLiteral("numpy scalar <f8"),
                              QStringLiteral("float"), QStringLiteral("the value .item() gives")}));
        QCOMPARE(rowText(2),
                 (QStringList{
                     QStringLiteral("convert"), QStringLiteral("rng"), QStringLiteral("numpy array <i8 [8]"),
                     QStringLiteral("tensor int64"),
                     QStringLiteral("the same values, dtype and shape, as torch.from_numpy gives; weights_only=True "
                                    "refuses numpy")}));
        QCOMPARE(rowText(3),
                 (QStringList{QStringLiteral("rename"), QStringLiteral("model/module.conv.weight"),
                              QStringLiteral("module.conv.weight"), QStringLiteral("conv.weight"), QString()}));
        QCOMPARE(rowText(13), (QStringList{QStringLiteral("remap"), QStringLiteral("all 21 storages on cuda:0"),
                                           QStringLiteral("cuda:0"), QStringLiteral("cpu"),
                                           QStringLiteral("21 storages, 1.6 KiB")}));
        QVERIFY(!model.data(model.index(0, 0), Qt::DecorationRole).isValid());
        QVERIFY(!model.index(0, PlanModel::ColumnCount).isValid());
        QVERIFY(!model.index(15, 0).isValid());
    }

    void emptyUntilAPlanArrives()
    {
        PlanModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(model.rowCount(), 0);
        QCOMPARE(model.columnCount(), 5);  // the header shows before the first plan
        // A plan that changes nothing has no rows (the panel says so beside the table).
        const auto steps = planOf("plain_sd.pt", transform::singleCardPreset());
        QVERIFY(steps);
        QVERIFY(steps->empty());
        model.setSteps(steps);
        QCOMPARE(model.rowCount(), 0);
    }
};

QTEST_MAIN(TestPlanModel)
#include "tst_planmodel.moc"
