#include "filelistpanel.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace ckpt::ui {

FileListPanel::FileListPanel(const QString& button, const char* listName, const char* buttonName, QWidget* parent)
    : QWidget(parent), m_header(new QLabel(this)), m_list(new QTreeWidget(this)), m_open(new QPushButton(button, this))
{
    m_header->setWordWrap(true);
    m_list->setObjectName(QLatin1String(listName));
    m_list->setRootIsDecorated(false);
    m_list->setAlternatingRowColors(true);
    m_list->setUniformRowHeights(true);
    m_list->setTextElideMode(Qt::ElideMiddle);
    m_open->setObjectName(QLatin1String(buttonName));
    m_open->setEnabled(false);
    auto* buttons = new QHBoxLayout;
    buttons->addStretch(1);
    buttons->addWidget(m_open);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    layout->addWidget(m_header);
    layout->addWidget(m_list, 1);
    layout->addLayout(buttons);
    connect(m_list, &QTreeWidget::currentItemChanged, this, &FileListPanel::selectionChanged);
    connect(m_list, &QTreeWidget::itemDoubleClicked, this, &FileListPanel::openSelected);
    connect(m_open, &QPushButton::clicked, this, &FileListPanel::openSelected);
}

int FileListPanel::count() const
{
    return m_list->topLevelItemCount();
}

void FileListPanel::selectFirst()
{
    if (m_list->topLevelItemCount() > 0) {
        m_list->setCurrentItem(m_list->topLevelItem(0));
    }
    selectionChanged();  // also when the first row was current already
}

void FileListPanel::selectionChanged()
{
    const auto* item = m_list->currentItem();
    QString tip;
    m_open->setEnabled(item != nullptr && opens(item, tip));
    m_open->setToolTip(tip);
}

void FileListPanel::openSelected()
{
    if (m_open->isEnabled() && m_list->currentItem() != nullptr) {
        Q_EMIT openFileRequested(m_list->currentItem()->data(0, kPathRole).toString());
    }
}

}  // namespace ckpt::ui
