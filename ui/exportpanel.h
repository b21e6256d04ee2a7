// Export: presets (Single-card, Multi-card) or custom convert options, a preview table of the
// exact plan before anything is written, a cancellable write whose result names the file, and a
// batch area where dropped files are converted one after another with the same options.
#pragma once

#include "document.h"
#include "jobtracker.h"
#include "transform/options.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QTableView;
class QTimer;

namespace ckpt::ui {

class BatchModel;
class PlanModel;

// The line under the plan: how many steps, and that a change of format is a change even when no
// key is touched (safetensors to .pt).
[[nodiscard]] QString planSummary(Format input, transform::OutputFormat output, std::size_t steps);

// Whether a file can be made in `folder` (tried: a read-only mount's folder reads as writable to
// access(2) and to root).
[[nodiscard]] bool canWriteIn(const QString& folder);
// Where a copy goes when its input's folder takes none: the downloads folder, the documents folder,
// else home.
[[nodiscard]] QString writableFallbackFolder();

class ExportPanel : public QWidget {
    Q_OBJECT
public:
    enum Preset { SingleCard, MultiCard, Custom };

    explicit ExportPanel(QWidget* parent = nullptr);
    void setDocument(DocumentPtr doc);
    void setPreset(Preset preset);
    [[nodiscard]] Preset preset() const;
    // A finding's fix joins the options (the preset becomes Custom).
    // Adds one finding's fix to what the user has chosen; from a preset not yet customised, the plan
    // becomes that fix alone (a preset's other edits are not what "Fix" asked for).
    void addFix(const transform::Options& fix);
    // From the tree's context menu: one more key path to drop; the key path that becomes the root.
    void addDropPath(const QString& path);
    void setSelectRoot(const QString& path);
    // File > Export (Ctrl+Shift+E): what the Export button does, when it is enabled.
    void requestExport();
    [[nodiscard]] const transform::Options& options() const { return m_options; }
    void queueBatch(const QStringList& files);
    [[nodiscard]] int planRowCount() const;
    // Default output for an input file under the current format: "<dir>/<stem>.fixed.<ext>", in
    // writableFallbackFolder() when <dir> takes no file.
    [[nodiscard]] QString defaultOutputFor(const QString& input) const;

Q_SIGNALS:
    void planReady();
    void exportFinished(bool ok, const QString& pathOrError);
    // What the panel says of an export under way, by the command line's progress rule (busytext.h).
    void exportProgress(const QString& text);
    void batchFinished();

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    // Plan rows as tall as their wrapped Detail text.
    void fitPlanRows();
    // Key, Before and After take set shares of the plan's width and Detail the rest, so long paths
    // in one column cannot squeeze the notes to nothing; each wraps.
    void fitPlanColumns();
    void buildUi();
    void optionsToFields();
    // Dequantize FP8 and Drop _extra_state shown only for a document that holds what they act on.
    void showChoicesOfDocument();
    void fieldsToOptions();
    void schedulePlan();
    void computePlan();
    void startExport();
    void startNextBatch();
    void setExporting(bool busy);
    // Scrolls the panel's scroll area to the result line (what was written, or why not).
    void revealResult();

    DocumentPtr m_doc;
    transform::Options m_options;
    bool m_syncing = false;  // fields are being filled from m_options
    QComboBox* m_preset = nullptr;
    QLineEdit* m_strip = nullptr;
    QLineEdit* m_addPrefix = nullptr;
    QLineEdit* m_mapLocation = nullptr;
    QLineEdit* m_select = nullptr;
    QLineEdit* m_drop = nullptr;
    QCheckBox* m_weightsOnly = nullptr;
    QCheckBox* m_compact = nullptr;
    QCheckBox* m_unwrap = nullptr;
    QCheckBox* m_multiCard = nullptr;
    QCheckBox* m_dropExtraState = nullptr;
    QComboBox* m_format = nullptr;
    QComboBox* m_dequantize = nullptr;  // FP8 block-quantized weights: kept, or written as bf16/fp16/fp32
    QLabel* m_dequantizeLabel = nullptr;
    QTableView* m_planTable = nullptr;
    // What the resize filter watches, kept so the filter never calls into a table being destroyed.
    QObject* m_planViewport = nullptr;
    PlanModel* m_planModel = nullptr;
    QLabel* m_planStatus = nullptr;
    QLineEdit* m_output = nullptr;
    QPushButton* m_browse = nullptr;
    QPushButton* m_export = nullptr;
    QPushButton* m_cancel = nullptr;
    QProgressBar* m_progress = nullptr;
    QLabel* m_result = nullptr;
    QTableView* m_batchTable = nullptr;
    BatchModel* m_batchModel = nullptr;
    QTimer* m_planTimer = nullptr;
    bool m_outputEdited = false;
    JobTracker m_planJobs{this};
    JobTracker m_batchJobs{this};
    JobTracker m_exportJobs{this};
};

}  // namespace ckpt::ui
