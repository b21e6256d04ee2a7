#include "setfilespanel.h"

#include "setmembership.h"
#include "sharded/sharded.h"
#include "text.h"

#include <QColor>
#include <QDir>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QTreeWidget>

#include <vector>

namespace ckpt::ui {

QString setFilePath(const SetPart& set, std::size_t i)
{
    QString name = qs(set.listing.files.at(i));
    if (QFileInfo(name).isAbsolute()) {
        return name;
    }
    // A listing names a file relative to the set's folder, or (ZeRO) to the tag folder it points to.
    QStringList bases{qs(set.listing.dir), qs(set.location.dir)};
    if (QFileInfo(qs(set.location.index)).isDir()) {
        bases.prepend(qs(set.location.index));
    }
    for (const auto& base : bases) {
        const QString path = QDir(base).filePath(name);
        if (QFileInfo::exists(path)) {
            return QFileInfo(path).absoluteFilePath();
        }
    }
    return QDir(bases.back()).filePath(name);
}

SetFilesPanel::SetFilesPanel(QWidget* parent)
    : FileListPanel(tr("Open Alone"), "setFilesList", "openFileAloneButton", parent)
{
    setObjectName(QStringLiteral("setFilesPanel"));
    header()->setTextFormat(Qt::RichText);
    list()->setHeaderLabels({tr("File"), tr("Size"), tr("Tensors"), tr("State")});
    list()->setSortingEnabled(true);
    list()->header()->setStretchLastSection(true);
}

void SetFilesPanel::setDocument(const DocumentPtr& doc)
{
    m_doc = doc;
    list()->clear();
    if (!doc || !doc->set) {
        return;
    }
    const auto& set = *doc->set;
    const auto& l = set.listing;
    std::vector<int> tensors(l.files.size(), 0);
    for (const auto& row : l.rows) {
        if (!row.tiedTo.empty()) {
            continue;  // a second name of a tensor counted where its bytes are
        }
        for (const auto f : row.storedInFiles) {
            if (f < tensors.size()) {
                ++tensors[f];
            }
        }
    }
    // A set over HTTP (a Hub repository, an index URL): its files are read there, not on disk.
    const bool remote = doc->remote != nullptr;
    // Its files lie beside its index, each a remote input of its own.
    const QString index = qs(set.location.index);
    const QString remoteBase = index.left(index.lastIndexOf(QLatin1Char('/')) + 1);
    QList<QTreeWidgetItem*> items;
    qint64 total = 0;
    for (std::size_t i = 0; i < l.files.size(); ++i) {
        const QString path = remote ? remoteBase + qs(l.files[i]) : setFilePath(set, i);
        const QFileInfo info(remote ? QString() : path);
        const QString error = i < l.fileErrors.size() ? qs(l.fileErrors[i]) : QString();
        auto* item = new QTreeWidgetItem;
        item->setText(File, qs(l.files[i]));
        item->setToolTip(File, path);
        item->setData(File, kPathRole, path);
        if (info.exists()) {
            item->setText(Size, humanSize(static_cast<std::uint64_t>(info.size())));
            item->setData(Size, Qt::UserRole, info.size());
            total += info.size();
        }
        item->setTextAlignment(Size, Qt::AlignRight | Qt::AlignVCenter);
        item->setData(Tensors, Qt::DisplayRole, tensors[i]);
        item->setTextAlignment(Tensors, Qt::AlignRight | Qt::AlignVCenter);
        const bool missing = !remote && !info.exists();
        item->setText(State, missing            ? tr("missing")
                             : !error.isEmpty() ? error
                             : remote           ? tr("read over HTTP")
                                                : tr("read"));
        item->setToolTip(State, item->text(State));
        if (missing || !error.isEmpty()) {
            item->setForeground(State, QColor(0xb0, 0x1c, 0x1c));
        }
        items << item;
    }
    list()->addTopLevelItems(items);
    list()->sortByColumn(File, Qt::AscendingOrder);
    for (int c = 0; c < State; ++c) {
        list()->resizeColumnToContents(c);
    }
    if (remote) {
        header()->setText(tr("%n file(s) of the %1 at %2, read over HTTP.", nullptr, static_cast<int>(l.files.size()))
                              .arg(qs(sharded::setKindName(set.location.kind)).toHtmlEscaped(),
                                   qs(doc->remote->input).toHtmlEscaped()));
    } else {
        header()->setText(
            tr("%n file(s) of %1, %2 on disk.", nullptr, static_cast<int>(l.files.size()))
                .arg(setPhrase(set.location).toHtmlEscaped(), humanSize(static_cast<std::uint64_t>(total))));
    }
    selectFirst();
}

bool SetFilesPanel::opens(const QTreeWidgetItem* item, QString& tip) const
{
    const QString path = item->data(File, kPathRole).toString();
    // A shard over HTTP opens alone by its own URL (only Hugging Face sets are read over HTTP,
    // and each of their shards is a checkpoint of its own).
    const bool remote = m_doc && m_doc->remote;
    const bool alone = m_doc && m_doc->set && !path.isEmpty() &&
                       (remote ? path != qs(m_doc->set->location.index)
                               : QFileInfo::exists(path) && opensAlone(m_doc->set->location, path));
    if (remote) {
        tip = alone ? tr("Open %1 by itself, over HTTP").arg(path) : QString();
        return alone;
    }
    tip =
        alone
            ? tr("Show %1's own contents, as ckptscope inspect --file-only lists them").arg(QFileInfo(path).fileName())
            : tr("This file is no checkpoint of its own (an index, a pointer or a DCP "
                 "data file): it is read as part of the set");
    return alone;
}

}  // namespace ckpt::ui
