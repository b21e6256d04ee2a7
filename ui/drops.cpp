#include "drops.h"

#include <QMimeData>
#include <QUrl>

namespace ckpt::ui {

QStringList localFiles(const QMimeData* mime)
{
    QStringList files;
    if (mime == nullptr || !mime->hasUrls()) {
        return files;
    }
    for (const auto& url : mime->urls()) {
        if (url.isLocalFile()) {
            files << url.toLocalFile();
        }
    }
    return files;
}

}  // namespace ckpt::ui
