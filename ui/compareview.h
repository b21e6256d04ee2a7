// "Compare with…": two checkpoints side by side, the window's face of `ckptscope diff`. A tree of
// key paths with A's key, B's key, a status (only in A, only in B, renamed, changed, equal: each
// with its colour and icon) and what changed; a filter that keeps only the differences; and for a
// selected tensor pair both tensors' statistics and the histogram of their difference. Opening B,
// the comparison and the statistics run in a JobTracker, with progress and Cancel.
#pragma once

#include "checkpoint/checkpoint.h"
#include "diff/diff.h"

#include <QWidget>

#include <memory>

class QCheckBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QStandardItemModel;
class QTreeView;

namespace ckpt::ui {

class HistogramWidget;
class JobTracker;

class CompareView : public QWidget {
    Q_OBJECT
public:
    explicit CompareView(CheckpointPtr a, QWidget* parent = nullptr);
    ~CompareView() override;

    // Opens `pathB` and compares it with A in a worker; comparisonDone() or failed() follows.
    void compareWith(const QString& pathB);
    void cancel();

    [[nodiscard]] const diff::Result* result() const { return m_result.get(); }
    [[nodiscard]] bool isRunning() const;
    [[nodiscard]] QTreeView* tree() const { return m_tree; }
    [[nodiscard]] HistogramWidget* histogram() const { return m_histogram; }
    [[nodiscard]] QString statsText() const;
    void setDifferencesOnly(bool on);

    static QColor statusColor(diff::Status s);

Q_SIGNALS:
    void comparisonDone();
    void failed(const QString& message);
    void statsShown();

protected:
    void keyPressEvent(QKeyEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    void showResult(std::shared_ptr<diff::Result> r, std::shared_ptr<const diff::Side> b);
    void showSelection();

    CheckpointPtr m_a;
    std::shared_ptr<const diff::Side> m_b;  // a file, or a Hugging Face sharded set
    std::shared_ptr<diff::Result> m_result;
    QLabel* m_header;
    QProgressBar* m_progress;
    QPushButton* m_cancel;
    QCheckBox* m_diffOnly;
    QStandardItemModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QTreeView* m_tree;
    QLabel* m_statsA;
    QLabel* m_statsB;
    HistogramWidget* m_histogram;
    std::unique_ptr<JobTracker> m_compareJobs;
    std::unique_ptr<JobTracker> m_statsJobs;
};

// The window's File > Compare with… entry: asks for B (dialogs seam) and opens a CompareView of
// A against it in a window of its own.
CompareView* openCompareWindow(QWidget* parent, const CheckpointPtr& a);
// The compare window's first size: 1000×680, shrunk to fit the screen `parent` is on.
[[nodiscard]] QSize compareWindowSize(const QWidget* parent);

}  // namespace ckpt::ui
