// One opened file or set in its tab: the filterable key tree on the left; on the right the details of
// the selection above the Findings, Test load and Export panels, and a set's Files panel.
#pragma once

#include "document.h"

#include <QWidget>

#include <memory>

class QLabel;
class QLineEdit;
class QMenu;
class QSplitter;
class QStackedWidget;
class QToolButton;
class QTabWidget;
class QTimer;
class QTreeView;

namespace ckpt::ui {

class ColumnFitter;
class DetailsPanel;
class ExportPanel;
class FindingsPanel;
class FolderFilesPanel;
class JobTracker;
class KeyTreeModel;
class KeyTreeProxy;
class ModuleTreeModel;
class SetFilesPanel;
class SetMembershipBar;
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
    [[nodiscard]] QTreeView* moduleTree() const { return m_moduleTree; }
    [[nodiscard]] ColumnFitter* treeColumns() const { return m_treeColumns; }
    [[nodiscard]] ModuleTreeModel* moduleModel() const { return m_moduleModel; }
    // The Model view (module hierarchy) rather than the raw pickle; only a file with a pickled
    // nn.Module has one, and it opens in it.
    [[nodiscard]] bool modelViewShown() const;
    void showModelView(bool on);
    [[nodiscard]] DetailsPanel* details() const { return m_details; }
    [[nodiscard]] FindingsPanel* findings() const { return m_findings; }
    [[nodiscard]] TestLoadPanel* testLoad() const { return m_testLoad; }
    [[nodiscard]] ExportPanel* exportPanel() const { return m_export; }
    [[nodiscard]] QTabWidget* sideTabs() const { return m_sideTabs; }
    // Whether its Test load and Export panels are offered: not for a URL's test load (the engines
    // read local files), nor for a set that cannot be read whole.
    [[nodiscard]] bool offersTestLoad() const;
    [[nodiscard]] bool offersExport() const;
    // Null until the diagnosis has finished.
    [[nodiscard]] const FindingsPtr& diagnosis() const { return m_diagnosis; }

    // The file is one of the files of a multi-file checkpoint (`sentence`, rich text, says which): the bar above
    // the tree says so and its button asks for the whole set (openWholeSetRequested).
    void offerWholeSet(const QString& sentence);
    [[nodiscard]] SetMembershipBar* membershipBar() const { return m_partOf; }
    [[nodiscard]] bool offersWholeSet() const;
    // A set's document opened from one of its files (a shard, a rank file): the bar above the tree
    // says so and its button asks for that file alone (openFileAloneRequested).
    void offerFileAlone(const QString& file);
    [[nodiscard]] const QString& openedFile() const { return m_openedFile; }
    // A set's Files panel; null for a file.
    [[nodiscard]] SetFilesPanel* setFiles() const { return m_setFiles; }
    // A model folder's Files panel (a Trainer checkpoint-N/); null otherwise.
    [[nodiscard]] FolderFilesPanel* folderFiles() const { return m_folderFiles; }
    // Whether the tab has a Files panel (a set's or a model folder's).
    [[nodiscard]] bool hasFiles() const { return m_setFiles != nullptr || m_folderFiles != nullptr; }
    // The red strip above the tree of a set that cannot be read whole; null otherwise.
    [[nodiscard]] QLabel* unreadableSetBar() const { return m_unreadable; }

    void focusFilter();
    void showExport();
    void showFindings();
    void showTestLoad();
    void showFiles();  // a set's or a model folder's Files panel; nothing for a file
    // Selects the node at this key path (expanding its ancestors); false when it is filtered out.
    bool selectPath(const QString& path);
    // "5 of 46 keys", or that nothing matches; empty without a filter.
    [[nodiscard]] QString filterStatus() const;
    // The tree's context menu for this (proxy) row, as a right click builds it.
    [[nodiscard]] QMenu* contextMenuFor(const QModelIndex& index);
    // The value the "Copy value" action copies: a scalar's full text, a tensor's dtype and shape.
    [[nodiscard]] QString valueText(const QModelIndex& index) const;
    void expandAllBelow(const QModelIndex& index);
    void collapseAllBelow(const QModelIndex& index);
    // Debounce used for filter keystrokes (ms).
    static constexpr int kFilterDebounceMs = 50;

Q_SIGNALS:
    void filterApplied();
    // The diagnosis finished and the Findings panel shows its result.
    void findingsReady();
    void openWholeSetRequested();
    void openFileAloneRequested(const QString& file);
    // A file of the model folder (its optimizer, say), to open in a tab of its own.
    void openFileRequested(const QString& file);

private:
    void applyFilter();
    void rememberExpansion();
    void restoreExpansion(NodeIndex current);
    void saveSplitters();
    void onCurrentChanged(const QModelIndex& current);
    void highlight(const std::vector<std::string>& paths);
    // A finding's paths in the Model view: their own rows; when some have none, the raw view (the
    // user's pick) or the module holding them (the pick made on opening).
    void highlightInModelView(const std::vector<std::string>& paths, bool rawRowSelected);
    // Makes the first of these paths with a Model view row (or, with orHolder, whose nearest
    // holder has one) current there; false when none has.
    bool selectInModelView(const std::vector<std::string>& paths, bool orHolder);
    void onFix(int finding);
    void startDiagnosis();
    void showDiagnosis(FindingsPtr findings);

    DocumentPtr m_doc;
    SetMembershipBar* m_partOf;
    KeyTreeModel* m_model;
    KeyTreeProxy* m_proxy;
    QLineEdit* m_filter;
    QLabel* m_filterStatus;
    QTimer* m_filterTimer;
    QSplitter* m_mainSplit = nullptr;
    QSplitter* m_rightSplit = nullptr;
    // Before a filter expands every match: the nodes the user had expanded, restored on clearing.
    std::vector<NodeIndex> m_expandedBeforeFilter;
    bool m_filtering = false;
    // The last row the user had current: a filter that hides it must not lose it.
    NodeIndex m_lastCurrent;
    bool m_refiltering = false;    // current-row changes now are the proxy's, not the user's
    bool m_autoHighlight = false;  // the finding being highlighted was selected on opening, not by the user
    QTreeView* m_tree;
    ModuleTreeModel* m_moduleModel;
    QTreeView* m_moduleTree;
    ColumnFitter* m_treeColumns = nullptr;
    ColumnFitter* m_moduleColumns = nullptr;
    QStackedWidget* m_trees;
    QToolButton* m_modelToggle;
    DetailsPanel* m_details;
    QTabWidget* m_sideTabs;
    FindingsPanel* m_findings;
    TestLoadPanel* m_testLoad;
    ExportPanel* m_export;
    SetFilesPanel* m_setFiles = nullptr;
    FolderFilesPanel* m_folderFiles = nullptr;
    QLabel* m_unreadable = nullptr;
    QString m_openedFile;
    FindingsPtr m_diagnosis;
    std::unique_ptr<JobTracker> m_diagnoseJob;  // stops and joins its worker when the tab closes
};

}  // namespace ckpt::ui
