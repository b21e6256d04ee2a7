// The findings of one document: severity icon, title and detail; selecting one asks the window to
// highlight its key paths, and "Fix" hands its fix (convert options) to the export panel.
// The document comes first and its findings later (diagnose runs after the tree is shown).
#pragma once

#include "document.h"

#include <QWidget>

#include <string>
#include <vector>

class QLabel;
class QPushButton;
class QSplitter;
class QTreeWidget;

namespace ckpt::ui {

// What an empty findings list means for this format: the call that reads the file as it is
// (torch.load cannot read safetensors).
[[nodiscard]] QString noFindingsText(Format format);
// The same for a document: a set or a model folder is read by its writer's loader, never by
// torch.load as it is (sharded::whatLoadsSet), and says so.
[[nodiscard]] QString noFindingsText(const Document& doc);

class FindingsPanel : public QWidget {
    Q_OBJECT
public:
    explicit FindingsPanel(QWidget* parent = nullptr);
    // Shows "diagnosing" until setFindings() brings this document's findings.
    void setDocument(DocumentPtr doc);
    // selectFirst: select (and so highlight) the most severe finding; false when the user has
    // already picked a key, which a late diagnosis must not take away.
    void setFindings(FindingsPtr findings, bool selectFirst = true);
    [[nodiscard]] bool hasFindings() const { return m_findings != nullptr; }
    [[nodiscard]] int count() const;
    // Index of the first finding with this code, or -1.
    [[nodiscard]] int indexOfCode(const QString& code) const;
    void select(int finding);
    // A fix as the selected finding's text says it: convert's flags, or what a bare rewrite does;
    // never the options' JSON.
    [[nodiscard]] static QString fixText(const transform::Options& fix);
    // The Keys column: the finding's paths less the containers among them (the state dict a prefix
    // finding names beside its keys).
    [[nodiscard]] static std::size_t keyCount(const std::vector<std::string>& paths);
    // The selected finding's text as shown (title, detail and fix), for tests.
    [[nodiscard]] QString detailText() const;
    // `detail` (a finding's text, escaped) with each file of the model folder that opens on its
    // own, the model shown aside, as a link to it: "optimizer.pt (optimizer)" in a model-folder finding.
    [[nodiscard]] static QString linkFolderMembers(const QString& detail, const ModelFolder& folder);

Q_SIGNALS:
    void highlightPaths(const std::vector<std::string>& paths);
    void fixRequested(int finding);  // index into Findings::list
    // A file the selected finding names as a link (a model folder's optimizer, say).
    void openFileRequested(const QString& path);

private:
    void onSelectionChanged();
    void clearList();
    void fitListToRows();

    DocumentPtr m_doc;
    FindingsPtr m_findings;
    QSplitter* m_split = nullptr;
    QTreeWidget* m_list;
    QLabel* m_detail;
    QPushButton* m_fix;
    QPushButton* m_fixAll;
};

}  // namespace ckpt::ui
