// The Model view of a pickled nn.Module: the module hierarchy as print(model) shows it
// ("conv1: Conv2d") with each module's parameter count, and under each module its own parameters
// and buffers as model.state_dict() names them ("conv1.weight  [6, 1, 5, 5]"). The pickle's
// internals (_forward_hooks, _backend, ...) are left to the raw view.
//
// Built once from the node table when the document opens: a module's children are found through
// its `_modules`, `_parameters` and `_buffers` entries. Every row keeps its node (NodeRole), so
// the details panel and the findings work on it as on the raw tree; the root module is a row.
#pragma once

#include "document.h"

#include <QStandardItemModel>

#include <unordered_set>

namespace ckpt::ui {

class ModuleTreeModel : public QStandardItemModel {
    Q_OBJECT
public:
    enum Column { Name, Type, Shape, Parameters, ColumnCount };
    static constexpr int NodeRole = Qt::UserRole + 2;      // as KeyTreeModel::NodeRole
    static constexpr int StateKeyRole = Qt::UserRole + 4;  // "conv1.weight", as state_dict() names it
    static constexpr int OtherKeyRole = Qt::UserRole + 5;  // true on a top-level key beside the model

    explicit ModuleTreeModel(QObject* parent = nullptr);
    // False (and no rows) when the file holds no pickled module.
    bool setDocument(const DocumentPtr& doc);
    [[nodiscard]] QModelIndex indexOfNode(NodeIndex node) const;
    // Parameters (not buffers) in the module at this row and below, as sum(p.numel()) counts them.
    [[nodiscard]] static std::uint64_t parameterCount(const QModelIndex& index);
    // The rows of these nodes drawn highlighted (a selected finding's keys), the others not.
    void setHighlighted(const std::unordered_set<NodeIndex>& nodes);

private:
    // The root dict's keys that are no module, as rows after the model's.
    void addOtherTopLevelKeys();
    std::uint64_t addModule(QStandardItem* parent, NodeIndex module, const QString& name, const QString& prefix);
    // The tensors a quantized module keeps packed in `_packed_params`, as parameter rows; their numel.
    std::uint64_t addPackedParams(QStandardItem* nameItem, NodeIndex module, const QString& dot);
    DocumentPtr m_doc;
    std::unordered_map<std::uint32_t, QPersistentModelIndex> m_rows;
    std::unordered_set<NodeIndex> m_highlighted;
};

}  // namespace ckpt::ui
