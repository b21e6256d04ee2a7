#include "moduletreemodel.h"

#include "icons.h"
#include "text.h"

#include <QBrush>
#include <QGuiApplication>
#include <QLocale>
#include <QPalette>

namespace ckpt::ui {
namespace {

constexpr int kCountRole = Qt::UserRole + 3;

// The child of `node` under this key, or an invalid index.
NodeIndex childNamed(const Checkpoint& ck, NodeIndex node, std::string_view name)
{
    const auto& n = ck.nodes[node];
    for (std::uint32_t r = 0; r < n.childCount; ++r) {
        const auto c = n.child(r);
        if (ck.nodes[c].name == name) {
            return c;
        }
    }
    return {};
}

QString shortType(const Checkpoint& ck, const Node& n)
{
    if (!n.object.valid()) {
        return qs(nodeKindName(n.kind));
    }
    const auto& type = ck.objects[n.object].type;
    const auto dot = type.rfind('.');
    return qs(dot == std::string::npos ? type : type.substr(dot + 1));
}

QStandardItem* cell(const QString& text, NodeIndex node)
{
    auto* item = new QStandardItem(text);
    item->setEditable(false);
    item->setData(quint32(node.value()), ModuleTreeModel::NodeRole);
    return item;
}

}  // namespace

ModuleTreeModel::ModuleTreeModel(QObject* parent) : QStandardItemModel(parent)
{
    setHorizontalHeaderLabels({tr("Module / tensor"), tr("Type"), tr("Shape"), tr("Parameters")});
}

bool ModuleTreeModel::setDocument(const DocumentPtr& doc)
{
    removeRows(0, rowCount());
    m_rows.clear();
    m_highlighted.clear();
    m_doc = doc;
    if (!doc) {
        return false;
    }
    const auto& ck = *doc->checkpoint;
    // Modules not inside another module's _modules: the root object, or values of a wrapper dict.
    for (const auto& object : ck.objects) {
        if (!object.isModule) {
            continue;
        }
        bool nested = false;
        for (auto p = ck.nodes[object.node].parent; p.valid(); p = ck.nodes[p].parent) {
            if (ck.nodes[p].kind == NodeKind::Module) {
                nested = true;
                break;
            }
        }
        if (!nested) {
            const auto name = object.node == kRootNode ? tr("(model)") : qs(object.path);
            addModule(invisibleRootItem(), object.node, name, QString());
        }
    }
    if (rowCount() == 0) {
        return false;
    }
    addOtherTopLevelKeys();
    return true;
}

void ModuleTreeModel::addOtherTopLevelKeys()
{
    // A dict that holds the model (YOLO's best.pt: model, ema, date, train_args, optimizer; a
    // .t7 with epoch and losses) shows its other keys too, one row each, so the Model view never
    // hides that there is more in the file; the raw view has what is under them.
    const auto& ck = *m_doc->checkpoint;
    const auto& root = ck.nodes[kRootNode];
    if (root.kind != NodeKind::Dict && root.kind != NodeKind::OrderedDict) {
        return;
    }
    for (std::uint32_t r = 0; r < root.childCount; ++r) {
        const auto child = root.child(r);
        if (m_rows.contains(child.value())) {
            continue;  // a module, shown above with its parameters
        }
        const auto& n = ck.nodes[child];
        auto* name = cell(qs(n.name), child);
        name->setData(true, OtherKeyRole);
        name->setToolTip(tr("%1: not part of the model; Model view off shows what is inside").arg(qs(n.name)));
        QString value;
        if (n.kind == NodeKind::Tensor && n.tensor.valid()) {
            value = shapeText(ck.tensors[n.tensor].shape);
        } else if (n.kind == NodeKind::Scalar) {
            value = qs(pickle::shortRepr(ck.arena, n.value, 60));
        } else if (n.childCount > 0) {
            value = tr("%n item(s)", nullptr, static_cast<int>(n.childCount));
        }
        invisibleRootItem()->appendRow(
            {name, cell(shortType(ck, n), child), cell(value, child), cell(QString(), child)});
        m_rows.emplace(child.value(), QPersistentModelIndex(name->index()));
    }
}

void ModuleTreeModel::setHighlighted(const std::unordered_set<NodeIndex>& nodes)
{
    // As the raw tree draws them: the rows of a selected finding's keys on a tinted background.
    // Only rows that change are touched: a model may have 40k rows.
    QColor tint = QGuiApplication::palette().color(QPalette::Highlight);
    tint.setAlpha(70);
    const auto paint = [this](NodeIndex node, const QVariant& brush) {
        const auto it = m_rows.find(node.value());
        if (it == m_rows.end() || !it->second.isValid()) {
            return;
        }
        for (int c = 0; c < ColumnCount; ++c) {
            if (auto* item = itemFromIndex(it->second.sibling(it->second.row(), c))) {
                item->setData(brush, Qt::BackgroundRole);
            }
        }
    };
    for (const auto node : m_highlighted) {
        if (!nodes.contains(node)) {
            paint(node, QVariant());
        }
    }
    for (const auto node : nodes) {
        paint(node, QVariant(QBrush(tint)));
    }
    m_highlighted = nodes;
}

std::uint64_t ModuleTreeModel::addModule(QStandardItem* parent, NodeIndex module, const QString& name,
                                         const QString& prefix)
{
    const auto& ck = *m_doc->checkpoint;
    auto* nameItem = cell(name, module);
    nameItem->setIcon(icons::module());
    nameItem->setData(prefix, StateKeyRole);
    auto* typeItem = cell(shortType(ck, ck.nodes[module]), module);
    if (ck.nodes[module].object.valid()) {
        typeItem->setToolTip(qs(ck.objects[ck.nodes[module].object].type));
    }
    auto* countItem = cell(QString(), module);
    countItem->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    parent->appendRow({nameItem, typeItem, cell(QString(), module), countItem});
    m_rows.emplace(module.value(), QPersistentModelIndex(nameItem->index()));

    std::uint64_t params = 0;
    const auto dot = prefix.isEmpty() ? QString() : prefix + QLatin1Char('.');
    // Its own parameters, then buffers, as state_dict() lists them.
    for (const char* holder : {"_parameters", "_buffers"}) {
        const auto dict = childNamed(ck, module, holder);
        if (!dict.valid()) {
            continue;
        }
        const auto& d = ck.nodes[dict];
        for (std::uint32_t r = 0; r < d.childCount; ++r) {
            const auto t = d.child(r);
            const auto& n = ck.nodes[t];
            if (n.kind != NodeKind::Tensor || !n.tensor.valid()) {
                continue;  // a None parameter (bias=False) is not in state_dict()
            }
            const auto& entry = ck.tensors[n.tensor];
            auto* tName = cell(qs(n.name), t);
            tName->setIcon(icons::tensor());
            tName->setData(dot + qs(n.name), StateKeyRole);
            tName->setToolTip(dot + qs(n.name));
            const bool isParam = std::string_view(holder) == "_parameters";
            auto* tType = cell(isParam ? tr("parameter %1").arg(qs(dtypeName(entry.dtype)))
                                       : tr("buffer %1").arg(qs(dtypeName(entry.dtype))),
                               t);
            auto* tCount = cell(isParam ? QLocale().toString(qulonglong(entry.numel)) : QString(), t);
            tCount->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            nameItem->appendRow({tName, tType, cell(shapeText(entry.shape), t), tCount});
            m_rows.emplace(t.value(), QPersistentModelIndex(tName->index()));
            if (isParam) {
                params += entry.numel;
            }
        }
    }
    params += addPackedParams(nameItem, module, dot);
    if (const auto children = childNamed(ck, module, "_modules"); children.valid()) {
        const auto& c = ck.nodes[children];
        for (std::uint32_t r = 0; r < c.childCount; ++r) {
            const auto sub = c.child(r);
            if (ck.nodes[sub].kind == NodeKind::Module) {
                params += addModule(nameItem, sub, qs(ck.nodes[sub].name), dot + qs(ck.nodes[sub].name));
            }
        }
    }
    countItem->setText(QLocale().toString(qulonglong(params)));
    countItem->setData(qulonglong(params), kCountRole);
    return params;
}

std::uint64_t ModuleTreeModel::addPackedParams(QStandardItem* nameItem, NodeIndex module, const QString& dot)
{
    // A quantized module keeps its weight and bias packed, not in _parameters: a dynamic Linear's
    // LinearPackedParams submodule, a quantized Conv itself, hold them in `_packed_params`, a
    // ScriptObject whose state is (weight, bias). state_dict() gives them, so they are counted and
    // shown as the module's parameters. A `_packed_params` that is a module counts at its own turn.
    const auto& ck = *m_doc->checkpoint;
    const auto packed = childNamed(ck, module, "_packed_params");
    if (!packed.valid() || ck.nodes[packed].kind == NodeKind::Module) {
        return 0;
    }
    std::vector<NodeIndex> tensors;
    std::vector<NodeIndex> stack{packed};
    while (!stack.empty()) {
        const auto at = stack.back();
        stack.pop_back();
        const auto& n = ck.nodes[at];
        if (n.kind == NodeKind::Tensor && n.tensor.valid()) {
            tensors.push_back(at);
            continue;
        }
        for (std::uint32_t r = n.childCount; r-- > 0;) {
            stack.push_back(n.child(r));
        }
    }
    std::uint64_t params = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const auto t = tensors[i];
        const auto& entry = ck.tensors[ck.nodes[t].tensor];
        // (weight, bias) as the packed params' __getstate__ gives them
        const QString name = tensors.size() <= 2 ? (i == 0 ? tr("weight") : tr("bias")) : qs(ck.nodes[t].name);
        auto* tName = cell(name, t);
        tName->setIcon(icons::tensor());
        tName->setData(dot + name, StateKeyRole);
        tName->setToolTip(tr("%1: packed in %2").arg(dot + name, qs(ck.pathOf(t))));
        auto* tType = cell(tr("packed parameter %1").arg(qs(dtypeName(entry.dtype))), t);
        auto* tCount = cell(QLocale().toString(qulonglong(entry.numel)), t);
        tCount->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        nameItem->appendRow({tName, tType, cell(shapeText(entry.shape), t), tCount});
        m_rows.emplace(t.value(), QPersistentModelIndex(tName->index()));
        params += entry.numel;
    }
    return params;
}

QModelIndex ModuleTreeModel::indexOfNode(NodeIndex node) const
{
    const auto it = m_rows.find(node.value());
    return it == m_rows.end() ? QModelIndex() : QModelIndex(it->second);
}

std::uint64_t ModuleTreeModel::parameterCount(const QModelIndex& index)
{
    const auto count = index.sibling(index.row(), Parameters);
    const auto v = count.data(kCountRole);
    return v.isValid() ? v.toULongLong() : count.data().toString().remove(QLocale().groupSeparator()).toULongLong();
}

}  // namespace ckpt::ui
