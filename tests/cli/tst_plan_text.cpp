// `convert`'s plan as text on plans made by hand: each kind of rule that touches many values is
// one line (a count, two examples, the reason once), small rules keep a line per step in the
// plan's order, and every step is listed when asked.
#include "cli/plan_text.h"
#include "transform/plan_summary.h"

#include <QtTest>

#include <sstream>
#include <string>

using ckpt::transform::Plan;
using ckpt::transform::StepKind;

namespace {

std::string printed(const Plan& plan, bool everyStep)
{
    ckpt::Checkpoint in;
    std::ostringstream out;
    ckpt::cli::printPlan(in, "in.pt", plan, "out.pt", "torch zip", everyStep, out);
    return out.str();
}

Plan manyRules()
{
    Plan p;
    p.options.stripPrefixes = {"module."};
    p.options.addPrefix = "model.";
    auto step = [&](StepKind k, std::string path, std::string before, std::string after, std::string detail = {}) {
        p.steps.push_back({k, std::move(path), std::move(before), std::move(after), std::move(detail)});
    };
    step(StepKind::Drop, "optimizer", "dict (2 entries)", "", "18 tensors, 1.0 KiB");
    for (int i = 0; i < 6; ++i) {
        const std::string k = "w" + std::to_string(i);
        step(StepKind::Convert, "np/" + k, "numpy.ndarray float32 (3,)", "tensor float32",
             "same values and shape, as torch.from_numpy gives");
    }
    for (int i = 0; i < 5; ++i) {
        step(StepKind::Rename, "module.l" + std::to_string(i), "module.l" + std::to_string(i),
             "model.l" + std::to_string(i));
    }
    step(StepKind::Rename, "b", "b", "model.b");  // a key without the stripped prefix: another rule
    for (int i = 0; i < 5; ++i) {
        step(StepKind::Compact, "t" + std::to_string(i), "4.0 KiB", "16 B",
             "storage " + std::to_string(i) + ": keeps ...");
    }
    step(StepKind::Drop, "args", "argparse.Namespace", "");
    return p;
}

}  // namespace

class TestPlanText : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void groupsByRule()
    {
        const Plan p = manyRules();
        const auto groups = ckpt::transform::groupSteps(p);
        QCOMPARE(groups.size(), std::size_t{6});
        QCOMPARE(groups[2].rule, std::string("replace 'module.' with 'model.' in"));
        QCOMPARE(groups[2].steps.size(), std::size_t{5});
        QCOMPARE(groups[3].rule, std::string("add 'model.' to"));
        QCOMPARE(groups[4].steps.size(), std::size_t{5});  // compactions: one rule whatever their storage
    }

    void summarisesManyAndKeepsOrder()
    {
        const std::string text = printed(manyRules(), false);
        const std::string expected =
            "convert in.pt (torch-zip) -> out.pt (torch zip)\n"
            "  drop    optimizer: dict (2 entries) dropped (18 tensors, 1.0 KiB)\n"
            "  convert 6 values: np/w0: numpy.ndarray float32 (3,) -> tensor float32; np/w1: numpy.ndarray float32 "
            "(3,) -> tensor float32; ... (same values and shape, as torch.from_numpy gives)\n"
            "  rename  replace 'module.' with 'model.' in 5 keys: module.l0 -> model.l0, module.l1 -> model.l1, ...\n"
            "  rename  b -> model.b\n"
            "  compact 5 storages: t0: 4.0 KiB -> 16 B; t1: 4.0 KiB -> 16 B; ...\n"
            "  drop    args: argparse.Namespace dropped\n"
            "  (19 steps in all: --verbose lists each)\n"
            "0 tensors, 0 storages, 0 B of tensor data, 2 values dropped\n";
        QCOMPARE(QString::fromStdString(text), QString::fromStdString(expected));
    }

    void everyStepWhenAsked()
    {
        const std::string text = printed(manyRules(), true);
        QVERIFY2(text.find("  convert np/w5: numpy.ndarray float32 (3,) -> tensor float32 (same values") !=
                     std::string::npos,
                 text.c_str());
        QVERIFY(text.find("  rename  module.l4 -> model.l4\n") != std::string::npos);
        QVERIFY(text.find("  compact t3: 4.0 KiB -> 16 B (storage 3: keeps ...)\n") != std::string::npos);
        QVERIFY(text.find("steps in all") == std::string::npos);
    }

    void droppedTextNamesTwo()
    {
        Plan p = manyRules();
        QCOMPARE(QString::fromStdString(ckpt::cli::droppedText(p)),
                 QStringLiteral("2 values dropped (optimizer, args)"));
        p.steps.push_back({StepKind::Drop, "", "dict", "", ""});
        QCOMPARE(QString::fromStdString(ckpt::cli::droppedText(p, true)),
                 QStringLiteral("3 values would be dropped (optimizer, args, ...)"));
        QCOMPARE(QString::fromStdString(ckpt::cli::droppedText(Plan{})), QStringLiteral("0 values dropped"));
    }
};

QTEST_GUILESS_MAIN(TestPlanText)
#include "tst_plan_text.moc"
