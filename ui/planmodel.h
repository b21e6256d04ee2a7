// The export plan's steps as a table (Step, Key, Before, After, Detail), before anything is written.
// The model views the vector the planning job produced and shares it, so a plan of 40k renames
// costs no widget items and no copy.
#pragma once

#include "transform/transform.h"

#include <QAbstractTableModel>

#include <memory>
#include <vector>

namespace ckpt::ui {

// The Step column's word for a step. A core "note" says what it is about: something not written,
// a value written in another form, or a fact about the output ("info").
[[nodiscard]] QString stepLabel(const transform::PlanStep& step);

class PlanModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Step, Key, Before, After, Detail, ColumnCount };
    using Steps = std::shared_ptr<const std::vector<transform::PlanStep>>;

    explicit PlanModel(QObject* parent = nullptr);

    // Null (no plan, or planning failed) shows no rows.
    void setSteps(Steps steps);

    [[nodiscard]] int rowCount(const QModelIndex& parent = {}) const override;
    [[nodiscard]] int columnCount(const QModelIndex& parent = {}) const override;
    [[nodiscard]] QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    [[nodiscard]] QVariant headerData(int section, Qt::Orientation orientation,
                                      int role = Qt::DisplayRole) const override;

private:
    Steps m_steps;
};

}  // namespace ckpt::ui
