// One opened file in its tab: the filterable key tree on the left; on the right the details of the
// selection above the Findings, Test load and Export panels.
#pragma once

#include "document.h"

#include <QWidget>

#include <memory>

class QLineEdit;
class QTabWidget;
class QTimer;
class QTreeView;

namespace ckpt::ui {

class DetailsPanel;
class ExportPanel;
class FindingsPanel;
class JobTracker;
class KeyTreeModel;
class KeyTreeProxy;
class TestLoadPanel;

class DocumentView : public QWidget {
    Q_OBJECT
public:
    // Shows the tree at once and diagnoses the document in the background (findingsReady()).
    explicit DocumentView(DocumentPtr doc, QWidget* parent = nullptr);
    ~DocumentView() override;

    [[nodiscard]] const DocumentPtr& document() const { return m_doc; }
    [[nodiscard]] KeyTreeModel* model() const { return m_model; }
    [[nodiscard]] KeyTreeProxy* proxy() const { return m_proxy; }
    [[nodiscard]] QTreeView* tree() const { return m_tree; }
    [[nodiscard]] DetailsPanel* details() const { return m_details; }
    [[nodiscard]] FindingsPanel* findings() const { return m_findings; }
    [[nodiscard]] TestLoadPanel* testLoad() const { return m_testLoad; }
    [[nodiscard]] ExportPanel* exportPanel() const { return m_export; }
    [[nodiscard]] QTabWidget* sideTabs() const { return m_sideTabs; }
    // Null until the diagnosis has finished.
    [[nodiscard]] const FindingsPtr& diagnosis() const { return m_diagnosis; }

    void focusFilter();
    void showExport();
    void showFindings();
    void showTestLoad();
    // Selects the node at this key path (expanding its ancestors); false when it is filtered out.
    bool selectPath(const QString& path);
    // Debounce used for filter keystrokes (ms).
    static constexpr int kFilterDebounceMs = 50;

Q_SIGNALS:
    void filterApplied();
    // The diagnosis finished and the Findings panel shows its result.
    void findingsReady();

private:
    void applyFilter();
    void onCurrentChanged(const QModelIndex& current);
    void highlight(const std::vector<std::string>& paths);
    void onFix(int finding);
    void startDiagnosis();
    void showDiagnosis(FindingsPtr findings);

    DocumentPtr m_doc;
    KeyTreeModel* m_model;
    KeyTreeProxy* m_proxy;
    QLineEdit* m_filter;
    QTimer* m_filterTimer;
    QTreeView* m_tree;
    DetailsPanel* m_details;
    QTabWidget* m_sideTabs;
    FindingsPanel* m_findings;
    TestLoadPanel* m_testLoad;
    ExportPanel* m_export;
    FindingsPtr m_diagnosis;
    std::unique_ptr<JobTracker> m_diagnoseJob;  // stops and joins its worker when the tab closes
};

}  // namespace ckpt::ui
