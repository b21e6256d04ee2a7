#include "folderfilespanel.h"

#include "checkpoint/extensions.h"
#include "checkpoint/model_folder.h"
#include "text.h"
#include "util/printable.h"

#include <QDir>
#include <QFileInfo>
#include <QFont>
#include <QHeaderView>
#include <QLabel>
#include <QTreeWidget>

namespace ckpt::ui {
namespace {

constexpr int kShownRole = Qt::UserRole + 2;  // the model, which this tab shows

}  // namespace

FolderFilesPanel::FolderFilesPanel(QWidget* parent)
    : FileListPanel(tr("Open"), "folderFilesList", "openFolderFileButton", parent)
{
    setObjectName(QStringLiteral("folderFilesPanel"));
    header()->setTextFormat(Qt::RichText);  // escaped: a folder's names are never markup
    list()->setHeaderLabels({tr("File"), tr("What it is"), tr("Size")});
    // The file names whole (what the user opens), what each is in the rest.
    list()->header()->setStretchLastSection(false);
    list()->header()->setSectionResizeMode(File, QHeaderView::ResizeToContents);
    list()->header()->setSectionResizeMode(Role, QHeaderView::Stretch);
    list()->header()->setSectionResizeMode(Size, QHeaderView::ResizeToContents);
}

bool FolderFilesPanel::opensAsCheckpoint(const QString& name)
{
    return hasExtension(ss(name), kCheckpointFileExtensions);
}

void FolderFilesPanel::setDocument(const DocumentPtr& doc)
{
    list()->clear();
    const auto& folder = doc ? doc->checkpoint->folder : nullptr;
    if (!folder) {
        return;
    }
    const QDir dir(qs(folder->dir));
    const QString model = qs(folder->model());
    qint64 total = 0;
    for (const auto& member : folder->members) {
        const QString name = qs(member.name);
        const QFileInfo info(dir.filePath(name));
        auto* item = new QTreeWidgetItem(list());
        item->setText(File, name);
        item->setToolTip(File, info.absoluteFilePath());
        item->setData(File, kPathRole, info.absoluteFilePath());
        item->setText(Role, name == model ? tr("%1, shown here").arg(qs(member.role)) : qs(member.role));
        item->setData(File, kShownRole, name == model);
        if (name == model) {
            QFont bold = item->font(File);
            bold.setBold(true);
            item->setFont(File, bold);
        }
        if (info.exists()) {
            item->setText(Size, humanSize(static_cast<std::uint64_t>(info.size())));
            total += info.size();
        }
        item->setTextAlignment(Size, Qt::AlignRight | Qt::AlignVCenter);
    }
    QString text = tr("%1 is %2: each file is saved on its own, %3 in all. Open one to see it in a tab of its own.")
                       .arg(dir.dirName(), qs(folder->layout), humanSize(static_cast<std::uint64_t>(total)));
    if (folder->adapterConfig) {
        // What adapter_config.json names is the file's text: made printable, and plain (escaped) in the label.
        text += QLatin1Char(' ') + tr("The adapter's %1.").arg(qs(displayText(adapterSummary(*folder->adapterConfig))));
    }
    header()->setText(text.toHtmlEscaped());
    selectFirst();
}

bool FolderFilesPanel::opens(const QTreeWidgetItem* item, QString& tip) const
{
    const bool shown = item->data(File, kShownRole).toBool();
    const bool opens =
        !shown && opensAsCheckpoint(item->text(File)) && QFileInfo::exists(item->data(File, kPathRole).toString());
    tip = opens   ? tr("Open %1 in a tab of its own").arg(item->text(File))
          : shown ? tr("This tab shows it")
                  : tr("Not a checkpoint file: a config or a text file");
    return opens;
}

}  // namespace ckpt::ui
