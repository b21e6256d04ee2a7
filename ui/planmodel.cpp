#include "planmodel.h"

#include "text.h"

namespace ckpt::ui {

QString stepLabel(const transform::PlanStep& step)
{
    if (step.kind != transform::StepKind::Note) {
        return qs(transform::stepKindName(step.kind));
    }
    if (step.detail.find("not written") != std::string::npos) {
        return PlanModel::tr("not written");
    }
    if (!step.before.empty() && !step.after.empty()) {
        return PlanModel::tr("rewritten");
    }
    if (step.detail.find("left absent") != std::string::npos) {
        return PlanModel::tr("left out");
    }
    return PlanModel::tr("info");
}

PlanModel::PlanModel(QObject* parent) : QAbstractTableModel(parent) {}

void PlanModel::setSteps(Steps steps)
{
    beginResetModel();
    m_steps = std::move(steps);
    endResetModel();
}

int PlanModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() || !m_steps ? 0 : static_cast<int>(m_steps->size());
}

int PlanModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant PlanModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || (role != Qt::DisplayRole && role != Qt::ToolTipRole)) {
        return {};
    }
    // The tool tip repeats the cell: keys and details are often wider than their column.
    const auto& s = (*m_steps)[static_cast<std::size_t>(index.row())];
    switch (index.column()) {
    case Step:
        return stepLabel(s);
    case Key:
        // A remap covers every storage saved on `before`: one key would read as if it were that
        // key's alone ("module.conv1.weight" for all 36).
        if (s.kind == transform::StepKind::Remap && s.count > 1) {
            return role == Qt::ToolTipRole ? tr("All %1 storages saved on %2; the first holds %3")
                                                 .arg(s.count)
                                                 .arg(qs(s.before), qs(s.path))
                                           : tr("all %1 storages on %2").arg(s.count).arg(qs(s.before));
        }
        return qs(s.path);
    case Before:
        return qs(s.before);
    case After:
        // A dropped key has no "after"; a dash says so where an empty cell would look unfinished.
        return s.after.empty() && s.kind == transform::StepKind::Drop ? QStringLiteral("—") : qs(s.after);
    case Detail:
        return qs(s.detail);
    default:
        return {};
    }
}

QVariant PlanModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) {
        return {};
    }
    switch (section) {
    case Step:
        return tr("Step");
    case Key:
        return tr("Key");
    case Before:
        return tr("Before");
    case After:
        return tr("After");
    case Detail:
        return tr("Detail");
    default:
        return {};
    }
}

}  // namespace ckpt::ui
