#include "keytreemodel.h"

#include "checkpoint/layout.h"
#include "icons.h"
#include "text.h"

#include <QBrush>
#include <QColor>
#include <QFont>
#include <QGuiApplication>
#include <QPalette>

namespace ckpt::ui {

KeyTreeModel::KeyTreeModel(QObject* parent) : QAbstractItemModel(parent) {}

void KeyTreeModel::setDocument(DocumentPtr doc)
{
    beginResetModel();
    m_doc = std::move(doc);
    m_ck = m_doc ? m_doc->checkpoint.get() : nullptr;
    m_highlighted.clear();
    endResetModel();
}

void KeyTreeModel::setHighlighted(std::unordered_set<NodeIndex> nodes)
{
    m_highlighted = std::move(nodes);
    // Views repaint what is visible; announcing the top level is enough to trigger that without
    // walking the (possibly 40k-row) tree.
    if (const int rows = rowCount(); rows > 0) {
        Q_EMIT dataChanged(index(0, 0), index(rows - 1, ColumnCount - 1), {Qt::BackgroundRole});
    }
}

bool KeyTreeModel::rootShown() const
{
    if (!m_ck || m_ck->nodes.empty()) {
        return false;
    }
    // A lone value, or an object (a pickled module, a Namespace, TrainingArguments): the root is
    // then a thing of its own that findings point at, not merely the dict that holds the keys.
    const auto& root = m_ck->nodes[kRootNode];
    return root.childCount == 0 || root.kind == NodeKind::Module || root.kind == NodeKind::Object;
}

QModelIndex KeyTreeModel::indexOfNode(NodeIndex node, int column) const
{
    if (!m_ck || !m_ck->nodes.contains(node) || (node == kRootNode && !rootShown())) {
        return {};
    }
    return createIndex(static_cast<int>(m_ck->rowOf(node)), column, quintptr(node.value()));
}

QModelIndex KeyTreeModel::index(int row, int column, const QModelIndex& parent) const
{
    if (!m_ck || row < 0 || column < 0 || column >= ColumnCount || row >= rowCount(parent)) {
        return {};
    }
    if (!parent.isValid() && rootShown()) {
        return createIndex(row, column, quintptr(0));
    }
    const NodeIndex p = parent.isValid() ? nodeOf(parent) : kRootNode;
    return createIndex(row, column, quintptr(m_ck->nodes[p].child(static_cast<std::uint32_t>(row)).value()));
}

QModelIndex KeyTreeModel::parent(const QModelIndex& child) const
{
    if (!m_ck || !child.isValid()) {
        return {};
    }
    const auto& n = m_ck->nodes[nodeOf(child)];
    if (!n.parent.valid()) {
        return {};
    }
    if (n.parent == kRootNode) {
        // Under the root's row when it has one, else top-level rows.
        return rootShown() ? createIndex(0, 0, quintptr(kRootNode.value())) : QModelIndex();
    }
    return createIndex(static_cast<int>(m_ck->rowOf(n.parent)), 0, quintptr(n.parent.value()));
}

int KeyTreeModel::rowCount(const QModelIndex& parent) const
{
    if (!m_ck || m_ck->nodes.empty()) {
        return 0;
    }
    if (!parent.isValid()) {
        return rootShown() ? 1 : static_cast<int>(m_ck->nodes[kRootNode].childCount);
    }
    if (parent.column() != 0) {
        return 0;
    }
    return static_cast<int>(m_ck->nodes[nodeOf(parent)].childCount);
}

int KeyTreeModel::columnCount(const QModelIndex& /*parent*/) const
{
    return ColumnCount;
}

bool KeyTreeModel::hasChildren(const QModelIndex& parent) const
{
    return rowCount(parent) > 0;
}

Qt::ItemFlags KeyTreeModel::flags(const QModelIndex& index) const
{
    if (!index.isValid()) {
        return Qt::NoItemFlags;
    }
    const auto& n = m_ck->nodes[nodeOf(index)];
    return Qt::ItemIsEnabled | Qt::ItemIsSelectable | (n.childCount == 0 ? Qt::ItemNeverHasChildren : Qt::NoItemFlags);
}

QVariant KeyTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) {
        return {};
    }
    switch (section) {
    case Name:
        return tr("Name");
    case Kind:
        return tr("Kind");
    case DType:
        return tr("dtype");
    case Shape:
        return tr("Shape / value");
    case Device:
        return tr("Device");
    case Size:
        return tr("Size");
    default:
        return {};
    }
}

QString KeyTreeModel::kindText(const Node& n) const
{
    switch (n.kind) {
    case NodeKind::Dict:
    case NodeKind::OrderedDict:
        return n.stateDictLike ? tr("state dict") : qs(nodeKindName(n.kind));
    case NodeKind::Tensor: {
        const auto& t = m_ck->tensors[n.tensor];
        return t.isParameter ? tr("parameter") : tr("tensor");
    }
    case NodeKind::Module:
    case NodeKind::Object:
        if (n.object.valid()) {
            const auto& type = m_ck->objects[n.object].type;
            const auto dot = type.rfind('.');
            return qs(dot == std::string::npos ? type : type.substr(dot + 1));
        }
        return qs(nodeKindName(n.kind));
    case NodeKind::Scalar:
        return qs(pickle::kindName(m_ck->arena[n.value].kind));
    default:
        return qs(nodeKindName(n.kind));
    }
}

QString KeyTreeModel::classKey(NodeIndex node) const
{
    const auto& n = m_ck->nodes[node];
    if (!n.parent.valid()) {
        return {};
    }
    // A dict's children are its (key, value) pairs in order, so row r's key is items[2r].
    const auto& parent = m_ck->nodes[n.parent];
    if (parent.kind != NodeKind::Dict && parent.kind != NodeKind::OrderedDict) {
        return {};
    }
    const auto& dict = m_ck->arena[parent.value];
    const std::size_t at = std::size_t{m_ck->rowOf(node)} * 2;
    if (dict.kind != pickle::Kind::Dict || at >= dict.items.size()) {
        return {};
    }
    const auto key = dict.items[at];
    if (m_ck->arena[key].kind != pickle::Kind::Global) {
        return {};
    }
    return qs(pickle::globalOf(m_ck->arena, key).qualified());
}

QVariant KeyTreeModel::display(NodeIndex node, int column) const
{
    const auto& n = m_ck->nodes[node];
    const TensorEntry* t = n.kind == NodeKind::Tensor && n.tensor.valid() ? &m_ck->tensors[n.tensor] : nullptr;
    switch (column) {
    case Name:
        if (node == kRootNode) {
            return tr("(root)");
        }
        if (const auto cls = classKey(node); !cls.isEmpty()) {
            return QStringLiteral("<class '%1'>").arg(cls);  // as Python prints a class
        }
        return qs(n.name);
    case Kind:
        return kindText(n);
    case DType:
        return t ? qs(dtypeName(t->dtype)) : QVariant();
    case Shape:
        if (t) {
            return qs(tensorShapeText(*m_ck, *t));
        }
        // The value as inspect prints it: scalars, and leaf objects that stand for one value
        // (numpy scalars as 0.7, paths as PosixPath('...')), not their reconstruct arguments.
        if (const auto value = leafValueText(*m_ck, node)) {
            return qs(*value);
        }
        if (n.childCount > 0) {
            return tr("%n item(s)", nullptr, static_cast<int>(n.childCount));
        }
        return {};
    case Device:
        return t ? qs(t->location) : QVariant();
    case Size:
        if (t && !t->hasData()) {
            return tr("no data");  // a meta tensor: its shape and dtype are all the file holds
        }
        return n.bytes > 0 || t ? humanSize(n.bytes) : QVariant();
    default:
        return {};
    }
}

QVariant KeyTreeModel::sortValue(NodeIndex node, int column) const
{
    const auto& n = m_ck->nodes[node];
    const TensorEntry* t = n.kind == NodeKind::Tensor && n.tensor.valid() ? &m_ck->tensors[n.tensor] : nullptr;
    switch (column) {
    case Name:
        return display(node, Name).toString().toLower();
    case Shape:
        return t ? QVariant(qulonglong(t->numel)) : QVariant(qulonglong(n.childCount));
    case Size:
        return qulonglong(n.bytes);
    default:
        return display(node, column).toString();
    }
}

QVariant KeyTreeModel::data(const QModelIndex& index, int role) const
{
    if (!m_ck || !index.isValid()) {
        return {};
    }
    const auto node = nodeOf(index);
    const auto& n = m_ck->nodes[node];
    switch (role) {
    case Qt::DisplayRole:
        return display(node, index.column());
    case SortRole:
        return sortValue(node, index.column());
    case NodeRole:
        return quint32(node.value());
    case PathRole:
        return qs(m_ck->pathOf(node));
    case Qt::ToolTipRole:
        if (index.column() == Name) {
            QString tip = qs(m_ck->pathOf(node));
            if (const auto cls = classKey(node); !cls.isEmpty()) {
                tip += QLatin1Char('\n') + tr("The key is the class %1 itself, not a string: loading the "
                                              "file imports that class.")
                                               .arg(cls);
            }
            if (n.object.valid()) {
                tip += QLatin1Char('\n') + qs(m_ck->objects[n.object].type);
            }
            return tip;
        }
        return {};
    case Qt::DecorationRole:
        if (index.column() != Name) {
            return {};
        }
        switch (n.kind) {
        case NodeKind::Tensor:
            return icons::tensor();
        case NodeKind::Dict:
        case NodeKind::OrderedDict:
            return n.stateDictLike ? icons::stateDict() : icons::dict();
        case NodeKind::List:
        case NodeKind::Tuple:
        case NodeKind::Set:
            return icons::list();
        case NodeKind::Module:
            return icons::module();
        case NodeKind::Object:
            return icons::object();
        default:
            return icons::scalar();
        }
    case Qt::FontRole:
        if (index.column() == Name && (n.stateDictLike || n.kind == NodeKind::Module)) {
            QFont f;
            f.setBold(true);
            return f;
        }
        return {};
    case Qt::TextAlignmentRole:
        if (index.column() == Size) {
            return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
        }
        return {};
    case Qt::BackgroundRole:
        if (m_highlighted.contains(node)) {
            QColor c = QGuiApplication::palette().color(QPalette::Highlight);
            c.setAlpha(70);
            return QBrush(c);
        }
        return {};
    default:
        return {};
    }
}

}  // namespace ckpt::ui
