#include "folderfilespanel.h"

#include "checkpoint/extensions.h"
#include "checkpoint/model_folder.h"
#include "text.h"

#include <QDir>
#include <QFileInfo>
#include <QFont>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace ckpt::ui {
namespace {

constexpr int kPathRole = Qt::UserRole + 1;
constexpr int kShownRole = Qt::UserRole + 2;  // the model, which this tab shows

}  // namespace

FolderFilesPanel::FolderFilesPanel(QWidget* parent)
    : QWidget(parent), m_header(new QLabel(this)), m_list(new QTreeWidget(this)),
      m_open(new QPushButton(tr("Open"), this))
{
    setObjectName(QStringLiteral("folderFilesPanel"));
    m_header->setWordWrap(true);
    m_list->setObjectName(QStringLiteral("folderFilesList"));
    m_list->setHeaderLabels({tr("File"), tr("What it is"), tr("Size")});
    m_list->setRootIsDecorated(false);
    m_list->setAlternatingRowColors(true);
    m_list->setUniformRowHeights(true);
    m_list->setTextElideMode(Qt::ElideMiddle);
    m_list->header()->setStretchLastSection(false);
    // The file names whole (what the user opens), what each is in the rest.
    m_list->header()->setSectionResizeMode(File, QHeaderView::ResizeToContents);
    m_list->header()->setSectionResizeMode(Role, QHeaderView::Stretch);
    m_list->header()->setSectionResizeMode(Size, QHeaderView::ResizeToContents);
    m_open->setObjectName(QStringLiteral("openFolderFileButton"));
    m_open->setEnabled(false);
    auto* buttons = new QHBoxLayout;
    buttons->addStretch(1);
    buttons->addWidget(m_open);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    layout->addWidget(m_header);
    layout->addWidget(m_list, 1);
    layout->addLayout(buttons);
    connect(m_list, &QTreeWidget::currentItemChanged, this, &FolderFilesPanel::selectionChanged);
    connect(m_list, &QTreeWidget::itemDoubleClicked, this, &FolderFilesPanel::openSelected);
    connect(m_open, &QPushButton::clicked, this, &FolderFilesPanel::openSelected);
}

bool FolderFilesPanel::opensAsCheckpoint(const QString& name)
{
    return hasExtension(ss(name), kCheckpointFileExtensions);
}

int FolderFilesPanel::count() const
{
    return m_list->topLevelItemCount();
}

void FolderFilesPanel::setDocument(const DocumentPtr& doc)
{
    m_list->clear();
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
        auto* item = new QTreeWidgetItem(m_list);
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
    m_header->setText(tr("%1 is %2: each file is saved on its own, %3 in all. Open one to see it in a tab of "
                         "its own.")
                          .arg(dir.dirName(), qs(folder->layout), humanSize(static_cast<std::uint64_t>(total))));
    if (m_list->topLevelItemCount() > 0) {
        m_list->setCurrentItem(m_list->topLevelItem(0));
    }
}

void FolderFilesPanel::selectionChanged()
{
    const auto* item = m_list->currentItem();
    const bool shown = item != nullptr && item->data(File, kShownRole).toBool();
    const bool opens = item != nullptr && !shown && opensAsCheckpoint(item->text(File)) &&
                       QFileInfo::exists(item->data(File, kPathRole).toString());
    m_open->setEnabled(opens);
    m_open->setToolTip(opens   ? tr("Open %1 in a tab of its own").arg(item->text(File))
                       : shown ? tr("This tab shows it")
                               : tr("Not a checkpoint file: a config or a text file"));
}

void FolderFilesPanel::openSelected()
{
    if (m_open->isEnabled() && m_list->currentItem() != nullptr) {
        Q_EMIT openFileRequested(m_list->currentItem()->data(File, kPathRole).toString());
    }
}

}  // namespace ckpt::ui
