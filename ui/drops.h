// What a drag from a file manager carries, read the same way by every widget that takes drops (the
// window opens the files, the export panel's batch converts them).
#pragma once

#include <QStringList>

class QMimeData;

namespace ckpt::ui {

// The local files among the dragged URLs, in their order; empty when there are none, so a drop of
// text or of remote URLs is not accepted.
QStringList localFiles(const QMimeData* mime);

}  // namespace ckpt::ui
