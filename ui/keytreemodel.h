// The key tree: a QAbstractItemModel that views a checkpoint's flat node table without copying it.
//
// Invariant: an index's internalId() is its node's position in Checkpoint::nodes. Children are
// contiguous there (nodes[firstChild + row]), so index(), parent() and rowCount() are O(1) and no
// index-to-node map is ever built. A container root is not shown (its children are the top rows);
// a root that is an object (a pickled module, a Namespace) or has no children (a file that holds
// a single tensor) is the one top row, so findings about it have a row to select.
#pragma once

#include "document.h"

#include <QAbstractItemModel>

#include <unordered_set>

namespace ckpt::ui {

class KeyTreeModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum Column { Name, Kind, DType, Shape, Device, Size, ColumnCount };
    enum Role {
        SortRole = Qt::UserRole + 1,  // raw value: bytes as integers, shapes by numel
        NodeRole,                     // the node index (quint32)
        PathRole,                     // the full key path (QString)
    };

    explicit KeyTreeModel(QObject* parent = nullptr);

    void setDocument(DocumentPtr doc);
    [[nodiscard]] const DocumentPtr& document() const { return m_doc; }

    // Nodes drawn highlighted (a selected finding's paths).
    void setHighlighted(std::unordered_set<NodeIndex> nodes);
    [[nodiscard]] QModelIndex indexOfNode(NodeIndex node, int column = 0) const;
    // The qualified name of the class when this node's dict key is a class object rather than a
    // string (Lightning 1.3 keys `callbacks` by the callback's class); empty otherwise.
    [[nodiscard]] QString classKey(NodeIndex node) const;
    [[nodiscard]] static NodeIndex nodeOf(const QModelIndex& index)
    {
        return NodeIndex{static_cast<std::uint32_t>(index.internalId())};
    }

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    bool hasChildren(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;

private:
    [[nodiscard]] bool rootShown() const;
    [[nodiscard]] QVariant display(NodeIndex node, int column) const;
    [[nodiscard]] QVariant sortValue(NodeIndex node, int column) const;
    [[nodiscard]] QString kindText(const Node& n) const;

    DocumentPtr m_doc;
    const Checkpoint* m_ck = nullptr;
    std::unordered_set<NodeIndex> m_highlighted;
};

}  // namespace ckpt::ui
