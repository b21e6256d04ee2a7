// What a drag from a file manager carries, read the same way by every widget that takes drops (the
// window opens the files, the export panel's batch converts them).
#pragma once

#include <QStringList>

class QMimeData;

namespace ckpt::ui {

// The local files among the dragged URLs, in their order; empty when there are none, so a drop of
// text or of remote URLs is not accepted.
QStringList localFiles(const QMimeData* mime);
// What the window opens from a drop: the local files, and the http(s) links a browser drags (as
// URLs, or as plain text holding one URL or hf:// location per line), in their order.
QStringList droppedInputs(const QMimeData* mime);
// Whether an input is a remote one (http://, https://, hf://), opened by ckptscope's HTTP reader.
bool isRemoteInput(const QString& input);

}  // namespace ckpt::ui
