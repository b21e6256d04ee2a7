#include "batchmodel.h"

#include "text.h"
#include "write/targets.h"

#include <QFileInfo>

namespace ckpt::ui {
namespace {

write::Conversion conversion(const QString& input, const QString& output)
{
    return {input.toStdString(), output.toStdString()};
}

}  // namespace

BatchModel::BatchModel(QObject* parent) : QAbstractTableModel(parent) {}

int BatchModel::enqueue(const QString& input, const QString& output)
{
    const int row = rowCount();
    beginInsertRows({}, row, row);
    m_rows.push_back({input, output});
    endInsertRows();
    const auto c = conversion(input, output);
    if (auto ok = write::checkConversions({c}); !ok) {
        refuse(row, ok.error());
    }
    for (int earlier = 0; earlier < row; ++earlier) {
        const auto& e = m_rows[static_cast<std::size_t>(earlier)];
        if (auto ok = write::checkConversions({conversion(e.input, e.output), c}); !ok) {
            refuse(row, ok.error());
            if (earlier >= m_next) {
                refuse(earlier, ok.error());
            }
        }
    }
    return row;
}

int BatchModel::startNext()
{
    while (m_next < rowCount()) {
        const int row = m_next++;
        auto& r = m_rows[static_cast<std::size_t>(row)];
        if (r.state == State::Refused) {
            continue;
        }
        r.state = State::Converting;
        rowChanged(row);
        return row;
    }
    return -1;
}

void BatchModel::finish(int row, const Expected<write::WriteResult>& result)
{
    auto& r = m_rows.at(static_cast<std::size_t>(row));
    if (result) {
        r.state = State::Done;
        r.output = qs(result->path);
        r.bytes = result->bytes;
    } else {
        r.state = State::Failed;
        r.reason = qs(result.error().describe());
        r.detail = r.reason;
    }
    rowChanged(row);
}

void BatchModel::refuse(int row, const Error& why)
{
    auto& r = m_rows[static_cast<std::size_t>(row)];
    r.state = State::Refused;
    r.reason = qs(why.message);
    r.detail = qs(why.describe());
    rowChanged(row);
}

void BatchModel::rowChanged(int row)
{
    Q_EMIT dataChanged(index(row, 0), index(row, ColumnCount - 1));
}

QString BatchModel::input(int row) const
{
    return m_rows.at(static_cast<std::size_t>(row)).input;
}

QString BatchModel::output(int row) const
{
    return m_rows.at(static_cast<std::size_t>(row)).output;
}

BatchModel::State BatchModel::state(int row) const
{
    return m_rows.at(static_cast<std::size_t>(row)).state;
}

int BatchModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int BatchModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QString BatchModel::statusText(const Row& r)
{
    switch (r.state) {
    case State::Queued:
        return tr("queued");
    case State::Refused:
        return tr("refused: %1").arg(r.reason);
    case State::Converting:
        return tr("converting…");
    case State::Done:
        return tr("done, %1").arg(humanSize(r.bytes));
    case State::Failed:
        return tr("failed: %1").arg(r.reason);
    }
    return {};
}

QVariant BatchModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || (role != Qt::DisplayRole && role != Qt::ToolTipRole)) {
        return {};
    }
    const auto& r = m_rows[static_cast<std::size_t>(index.row())];
    const bool tip = role == Qt::ToolTipRole;
    switch (index.column()) {
    case File:
        // The name fits the column; the whole path is a hover away.
        return tip ? r.input : QFileInfo(r.input).fileName();
    case Status:
        if (tip) {
            return r.detail.isEmpty() ? QVariant() : QVariant(r.detail);
        }
        return statusText(r);
    case Output:
        return tip ? QVariant() : QVariant(r.output);
    default:
        return {};
    }
}

QVariant BatchModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) {
        return {};
    }
    switch (section) {
    case File:
        return tr("File");
    case Status:
        return tr("Status");
    case Output:
        return tr("Output");
    default:
        return {};
    }
}

}  // namespace ckpt::ui
