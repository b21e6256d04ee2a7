// The export panel's batch queue: QAbstractItemModelTester while rows are queued, refused, started
// and finished, the cells each state shows, and the rule that no dropped file is replaced by
// another row's conversion (a clash refuses both rows while neither has run; a row that ran stays).
#include "batchmodel.h"
#include "uitest.h"

#include <QAbstractItemModelTester>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

using namespace ckpt;
using namespace ckpt::ui;

namespace {

using State = BatchModel::State;

QString cell(const BatchModel& model, int row, int column, int role = Qt::DisplayRole)
{
    return model.data(model.index(row, column), role).toString();
}

// Three copies of a real checkpoint in a fresh directory: the inputs a user drops.
struct Inputs {
    Inputs()
    {
        for (const char* name : {"a.pt", "b.pt", "c.pt"}) {
            copied = copied && QFile::copy(uitest::fixture("ddp_sd.pt"), path(name));
        }
    }
    [[nodiscard]] QString path(const char* name) const { return dir.filePath(QLatin1String(name)); }

    QTemporaryDir dir;
    bool copied = dir.isValid();
};

write::WriteResult written(const QString& path, std::uint64_t bytes)
{
    write::WriteResult r;
    r.path = path.toStdString();
    r.bytes = bytes;
    return r;
}

}  // namespace

class TestBatchModel : public QObject {
    Q_OBJECT
public:
    static void initMain() { uitest::initMain(); }

private Q_SLOTS:
    void runsRowsInOrder()
    {
        const Inputs in;
        QVERIFY(in.copied);
        BatchModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(model.columnCount(), 3);
        QCOMPARE(model.headerData(BatchModel::File, Qt::Horizontal).toString(), QStringLiteral("File"));
        QCOMPARE(model.headerData(BatchModel::Status, Qt::Horizontal).toString(), QStringLiteral("Status"));
        QCOMPARE(model.headerData(BatchModel::Output, Qt::Horizontal).toString(), QStringLiteral("Output"));
        QCOMPARE(model.startNext(), -1);  // nothing queued yet

        // The tester only checks what the signals announce, so check they are sent.
        QSignalSpy inserted(&model, &QAbstractItemModel::rowsInserted);
        QCOMPARE(model.enqueue(in.path("a.pt"), in.path("a.fixed.pt")), 0);
        QCOMPARE(model.enqueue(in.path("b.pt"), in.path("b.fixed.pt")), 1);
        QCOMPARE(model.rowCount(), 2);
        QCOMPARE(inserted.count(), 2);
        QCOMPARE(inserted.at(1).at(1).toInt(), 1);  // first
        QCOMPARE(inserted.at(1).at(2).toInt(), 1);  // last
        QCOMPARE(cell(model, 0, BatchModel::File), QStringLiteral("a.pt"));
        QCOMPARE(cell(model, 0, BatchModel::File, Qt::ToolTipRole), in.path("a.pt"));
        QCOMPARE(cell(model, 0, BatchModel::Status), QStringLiteral("queued"));
        QVERIFY(!model.data(model.index(0, BatchModel::Status), Qt::ToolTipRole).isValid());
        QCOMPARE(cell(model, 0, BatchModel::Output), in.path("a.fixed.pt"));
        QCOMPARE(model.input(1), in.path("b.pt"));
        QCOMPARE(model.output(1), in.path("b.fixed.pt"));

        QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
        QCOMPARE(model.startNext(), 0);
        QCOMPARE(changed.count(), 1);
        QCOMPARE(model.state(0), State::Converting);
        QCOMPARE(cell(model, 0, BatchModel::Status), QStringLiteral("converting…"));
        QCOMPARE(model.state(1), State::Queued);
        // The output cell becomes the path the writer reports (a symlink's target, say).
        model.finish(0, written(in.path("elsewhere.pt"), 2048));
        QCOMPARE(changed.count(), 2);
        QCOMPARE(model.state(0), State::Done);
        QCOMPARE(cell(model, 0, BatchModel::Status), QStringLiteral("done, 2.0 KiB"));
        QCOMPARE(cell(model, 0, BatchModel::Output), in.path("elsewhere.pt"));

        QCOMPARE(model.startNext(), 1);
        Error e = makeError(ErrorCode::Io, "no space left on device");
        e.path = in.path("b.fixed.pt").toStdString();
        model.finish(1, e);
        QCOMPARE(model.state(1), State::Failed);
        QCOMPARE(cell(model, 1, BatchModel::Status), QStringLiteral("failed: ") + QString::fromStdString(e.describe()));
        QCOMPARE(cell(model, 1, BatchModel::Status, Qt::ToolTipRole), QString::fromStdString(e.describe()));
        QCOMPARE(cell(model, 1, BatchModel::Output), in.path("b.fixed.pt"));
        QCOMPARE(model.startNext(), -1);
    }

    // One row's output is another row's input (m.pt -> m.fixed.pt dropped with m.fixed.pt): either
    // order of running would replace a file the user gave, so neither runs.
    void clashRefusesBothWhileNeitherRan()
    {
        const Inputs in;
        QVERIFY(in.copied);
        BatchModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.enqueue(in.path("a.pt"), in.path("b.pt"));  // b.pt is also an input below
        model.enqueue(in.path("b.pt"), in.path("b.fixed.pt"));
        model.enqueue(in.path("c.pt"), in.path("c.fixed.pt"));
        for (int row : {0, 1}) {
            QCOMPARE(model.state(row), State::Refused);
            QVERIFY2(cell(model, row, BatchModel::Status).startsWith(QStringLiteral("refused: ")),
                     qPrintable(cell(model, row, BatchModel::Status)));
            // The tool tip names the file concerned; the cell keeps to the reason.
            QVERIFY(cell(model, row, BatchModel::Status, Qt::ToolTipRole).contains(in.path("b.pt")));
        }
        QVERIFY(cell(model, 0, BatchModel::Status).contains(QStringLiteral("which it would replace")));
        QCOMPARE(model.state(2), State::Queued);
        QCOMPARE(model.startNext(), 2);  // refused rows are passed over
        QCOMPARE(model.startNext(), -1);
    }

    void twoRowsOntoOneFileAreBothRefused()
    {
        const Inputs in;
        QVERIFY(in.copied);
        BatchModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.enqueue(in.path("a.pt"), in.path("out.pt"));
        model.enqueue(in.path("b.pt"), in.path("out.pt"));
        QCOMPARE(model.state(0), State::Refused);
        QCOMPARE(model.state(1), State::Refused);
        QVERIFY(cell(model, 1, BatchModel::Status).contains(QStringLiteral("would be written here")));
        QCOMPARE(model.startNext(), -1);
    }

    void aRowThatStartedStays()
    {
        const Inputs in;
        QVERIFY(in.copied);
        BatchModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.enqueue(in.path("a.pt"), in.path("a.fixed.pt"));
        QCOMPARE(model.startNext(), 0);
        // Dropped while row 0 converts: only the newcomer is refused.
        model.enqueue(in.path("a.fixed.pt"), in.path("a.fixed.fixed.pt"));
        QCOMPARE(model.state(0), State::Converting);
        QCOMPARE(model.state(1), State::Refused);
        model.finish(0, written(in.path("a.fixed.pt"), 10));
        // And after it is done, too.
        model.enqueue(in.path("b.pt"), in.path("a.fixed.pt"));
        QCOMPARE(model.state(0), State::Done);
        QCOMPARE(model.state(2), State::Refused);
        QCOMPARE(model.startNext(), -1);
    }

    void aConversionOntoItsOwnInputIsRefused()
    {
        const Inputs in;
        QVERIFY(in.copied);
        BatchModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.enqueue(in.path("a.pt"), in.path("a.pt"));
        QCOMPARE(model.state(0), State::Refused);
        QVERIFY(cell(model, 0, BatchModel::Status).contains(QStringLiteral("the input file itself")));
        model.enqueue(in.path("b.pt"), in.dir.path());  // a directory is never a target
        QCOMPARE(model.state(1), State::Refused);
        QCOMPARE(model.startNext(), -1);
    }
};

QTEST_MAIN(TestBatchModel)
#include "tst_batchmodel.moc"
