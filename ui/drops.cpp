#include "drops.h"

#include "remote/location.h"

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

bool isRemoteInput(const QString& input)
{
    return remote::isRemote(input.toStdString());  // the command line's test, so both take the same inputs
}

QStringList droppedInputs(const QMimeData* mime)
{
    QStringList inputs;
    if (mime == nullptr) {
        return inputs;
    }
    if (mime->hasUrls()) {
        for (const auto& url : mime->urls()) {
            if (url.isLocalFile()) {
                inputs << url.toLocalFile();
            } else if (isRemoteInput(url.toString())) {
                inputs << url.toString(QUrl::FullyEncoded);
            }
        }
        return inputs;
    }
    if (mime->hasText()) {
        for (const auto& line : mime->text().split(QLatin1Char('\n'), Qt::SkipEmptyParts)) {
            if (isRemoteInput(line.trimmed())) {
                inputs << line.trimmed();
            }
        }
    }
    return inputs;
}

}  // namespace ckpt::ui
