// The Files panel of a model folder (a Trainer checkpoint-N/, accelerate's save_state, a PEFT
// adapter, OLMo's model.pt/optim.pt/train.pt): every file the folder's layout names, with what it is
// and its size; Open (or a double-click) opens a checkpoint file of it, the optimizer say, in a tab
// of its own. The tab shows the folder's model.
#pragma once

#include "document.h"

#include <QWidget>

class QLabel;
class QPushButton;
class QTreeWidget;

namespace ckpt::ui {

class FolderFilesPanel : public QWidget {
    Q_OBJECT
public:
    enum Column { File, Role, Size };
    explicit FolderFilesPanel(QWidget* parent = nullptr);
    // `doc`'s checkpoint was opened from a model folder (Checkpoint::folder).
    void setDocument(const DocumentPtr& doc);
    [[nodiscard]] QTreeWidget* list() const { return m_list; }
    [[nodiscard]] QPushButton* openButton() const { return m_open; }
    [[nodiscard]] int count() const;
    // Whether `name` (a member of the folder) opens as a checkpoint of its own: a torch or
    // safetensors file, not a JSON config.
    [[nodiscard]] static bool opensAsCheckpoint(const QString& name);

Q_SIGNALS:
    void openFileRequested(const QString& path);

private:
    void selectionChanged();
    void openSelected();

    QLabel* m_header;
    QTreeWidget* m_list;
    QPushButton* m_open;
};

}  // namespace ckpt::ui
