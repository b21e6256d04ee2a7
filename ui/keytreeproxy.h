// Sorting and filtering over the key tree, on raw values: sort through KeyTreeModel::SortRole
// (bytes as integers, shapes by numel), filter against the document's pre-lowered key paths, so
// a keystroke costs one substring search per node and no string conversion.
#pragma once

#include "document.h"

#include <QSortFilterProxyModel>

#include <string>

namespace ckpt::ui {

class KeyTreeProxy : public QSortFilterProxyModel {
    Q_OBJECT
public:
    explicit KeyTreeProxy(QObject* parent = nullptr);

    // Case-insensitive substring over the whole key path; ancestors of a match stay visible.
    void setFilterText(const QString& text);
    [[nodiscard]] QString filterText() const { return m_text; }
    // Keys whose path contains the filter text (ancestors kept only for context not counted); 0
    // without a filter.
    [[nodiscard]] int matchCount() const { return m_matches; }

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;
    bool lessThan(const QModelIndex& left, const QModelIndex& right) const override;

private:
    QString m_text;
    std::string m_needle;  // lower-cased UTF-8
    int m_matches = 0;
};

}  // namespace ckpt::ui
