// One opened file in its tab: the filterable key tree on the left; on the right the details of the
// selection above the Findings, Test load and Export panels.
#pragma once

#include "document.h"

#include <QWidget>

class QLineEdit;
class QTabWidget;
class QTimer;
class QTreeView;

namespace ckpt::ui {

class DetailsPanel;
class ExportPanel;
class FindingsPanel;
class KeyTreeModel;
class KeyTreeProxy;
class TestLoadPanel;

class DocumentView : public QWidget {
    Q_OBJECT
public:
    explicit DocumentView(DocumentPtr doc, QWidget* parent = nullptr);

    [[nodiscard]] const DocumentPtr& document() const { return m_doc; }
    [[nodiscard]] KeyTreeModel* model() const { return m_model; }
    [[nodiscard]] KeyTreeProxy* proxy() const { return m_proxy; }
    [[nodiscard]] QTreeView* tree() const { return m_tree; }
    [[nodiscard]] DetailsPanel* details() const { return m_details; }
    [[nodiscard]] FindingsPanel* findings() const { return m_findings; }
    [[nodiscard]] TestLoadPanel* testLoad() const { return m_testLoad; }
    [[nodiscard]] ExportPanel* exportPanel() const { return m_export; }
    [[nodiscard]] QTabWidget* sideTabs() const { return m_sideTabs; }

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

private:
    void applyFilter();
    void onCurrentChanged(const QModelIndex& current);
    void highlight(const std::vector<std::string>& paths);
    void onFix(int finding);

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
};

}  // namespace ckpt::ui
