// The Files panel of a document opened from a multi-file checkpoint: each file of the set with its
// size, how many tensors it holds bytes of and whether it was read; Open Alone (or a double-click)
// opens a checkpoint file of the set by itself, as `ckptscope inspect --file-only` reads it.
#pragma once

#include "document.h"

#include <QWidget>

class QLabel;
class QPushButton;
class QTreeWidget;

namespace ckpt::ui {

class SetFilesPanel : public QWidget {
    Q_OBJECT
public:
    explicit SetFilesPanel(QWidget* parent = nullptr);
    // `doc` has a SetPart.
    void setDocument(const DocumentPtr& doc);
    [[nodiscard]] QTreeWidget* list() const { return m_list; }
    [[nodiscard]] QPushButton* openAloneButton() const { return m_openAlone; }
    [[nodiscard]] int count() const;
    enum Column { File, Size, Tensors, State };

Q_SIGNALS:
    void openFileRequested(const QString& path);

private:
    void selectionChanged();
    void openSelected();

    QLabel* m_header;
    QTreeWidget* m_list;
    QPushButton* m_openAlone;
    DocumentPtr m_doc;
};

// Where file `i` of the set's listing is on disk (a listing names some files relative to the set's
// folder, a ZeRO set's to its tag folder).
[[nodiscard]] QString setFilePath(const SetPart& set, std::size_t i);

}  // namespace ckpt::ui
