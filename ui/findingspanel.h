// The findings of one document: severity icon, title and detail; selecting one asks the window to
// highlight its key paths, and "Fix" hands its fix (convert options) to the export panel.
#pragma once

#include "document.h"

#include <QWidget>

#include <string>
#include <vector>

class QLabel;
class QPushButton;
class QTreeWidget;

namespace ckpt::ui {

class FindingsPanel : public QWidget {
    Q_OBJECT
public:
    explicit FindingsPanel(QWidget* parent = nullptr);
    void setDocument(DocumentPtr doc);
    [[nodiscard]] int count() const;
    // Index of the first finding with this code, or -1.
    [[nodiscard]] int indexOfCode(const QString& code) const;
    void select(int finding);

Q_SIGNALS:
    void highlightPaths(const std::vector<std::string>& paths);
    void fixRequested(int finding);  // index into Document::findings

private:
    void onSelectionChanged();

    DocumentPtr m_doc;
    QTreeWidget* m_list;
    QLabel* m_detail;
    QPushButton* m_fix;
    QPushButton* m_fixAll;
};

}  // namespace ckpt::ui
