#include "keytreeproxy.h"

#include "keytreemodel.h"

namespace ckpt::ui {

KeyTreeProxy::KeyTreeProxy(QObject* parent) : QSortFilterProxyModel(parent)
{
    setRecursiveFilteringEnabled(true);
    setSortRole(KeyTreeModel::SortRole);
    setSortLocaleAware(false);
    setDynamicSortFilter(true);
}

void KeyTreeProxy::setFilterText(const QString& text)
{
    if (text == m_text) {
        return;
    }
    m_text = text;
    m_needle = text.trimmed().toLower().toStdString();
    m_matches = 0;
    const auto* model = static_cast<const KeyTreeModel*>(sourceModel());
    if (!m_needle.empty() && model && model->document()) {
        const auto& paths = model->document()->lowerPaths;
        // Node 0 is the root, no key of its own.
        for (std::size_t i = 1; i < paths.size(); ++i) {
            m_matches += paths[i].find(m_needle) != std::string::npos ? 1 : 0;
        }
    }
    invalidateRowsFilter();
}

bool KeyTreeProxy::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const
{
    if (m_needle.empty()) {
        return true;
    }
    const auto* model = static_cast<const KeyTreeModel*>(sourceModel());
    const auto& doc = model->document();
    if (!doc) {
        return true;
    }
    const auto node = KeyTreeModel::nodeOf(model->index(sourceRow, 0, sourceParent));
    return doc->lowerPaths[node.value()].find(m_needle) != std::string::npos;
}

bool KeyTreeProxy::lessThan(const QModelIndex& left, const QModelIndex& right) const
{
    const auto a = left.data(KeyTreeModel::SortRole);
    const auto b = right.data(KeyTreeModel::SortRole);
    if (a.typeId() == QMetaType::ULongLong && b.typeId() == QMetaType::ULongLong) {
        return a.toULongLong() < b.toULongLong();
    }
    return QString::compare(a.toString(), b.toString(), Qt::CaseSensitive) < 0;
}

}  // namespace ckpt::ui
