// The Files panel of a document opened from a multi-file checkpoint: each file of the set with its
// size, how many tensors it holds bytes of and whether it was read; Open Alone (or a double-click)
// opens a checkpoint file of the set by itself, as `ckptscope inspect --file-only` reads it.
#pragma once

#include "document.h"
#include "filelistpanel.h"

namespace ckpt::ui {

class SetFilesPanel : public FileListPanel {
    Q_OBJECT
public:
    explicit SetFilesPanel(QWidget* parent = nullptr);
    // `doc` has a SetPart.
    void setDocument(const DocumentPtr& doc);
    [[nodiscard]] QPushButton* openAloneButton() const { return openButton(); }
    enum Column { File, Size, Tensors, State };

protected:
    [[nodiscard]] bool opens(const QTreeWidgetItem* item, QString& tip) const override;

private:
    DocumentPtr m_doc;
};

// Where file `i` of the set's listing is on disk (a listing names some files relative to the set's
// folder, a ZeRO set's to its tag folder).
[[nodiscard]] QString setFilePath(const SetPart& set, std::size_t i);

}  // namespace ckpt::ui
