// The Files panel of a model folder (a Trainer checkpoint-N/, accelerate's save_state, a PEFT
// adapter, OLMo's model.pt/optim.pt/train.pt): every file the folder's layout names, with what it is
// and its size; Open (or a double-click) opens a checkpoint file of it, the optimizer say, in a tab
// of its own. The tab shows the folder's model.
#pragma once

#include "document.h"
#include "filelistpanel.h"

namespace ckpt::ui {

class FolderFilesPanel : public FileListPanel {
    Q_OBJECT
public:
    enum Column { File, Role, Size };
    explicit FolderFilesPanel(QWidget* parent = nullptr);
    // `doc`'s checkpoint was opened from a model folder (Checkpoint::folder).
    void setDocument(const DocumentPtr& doc);
    using FileListPanel::header;
    using FileListPanel::openButton;
    // Whether `name` (a member of the folder) opens as a checkpoint of its own: a torch or
    // safetensors file, not a JSON config.
    [[nodiscard]] static bool opensAsCheckpoint(const QString& name);

protected:
    [[nodiscard]] bool opens(const QTreeWidgetItem* item, QString& tip) const override;
};

}  // namespace ckpt::ui
