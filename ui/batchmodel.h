// The export panel's batch: files dropped on the panel, converted one after another with its
// options. A row is an input, the output it is written to, and where its conversion stands.
//
// Rows run in the order they were queued; every row before the cursor has started (or was passed
// over). A row is refused when it is queued, and then never runs, if its own conversion cannot be
// done or if it and an earlier row that has not started would write onto each other's files (m.pt
// and its m.fixed.pt dropped together): both are refused, so no dropped file is replaced by
// another's conversion whichever order they would have run in. A row that has started keeps its
// state; only the newcomer is refused.
#pragma once

#include "util/error.h"
#include "write/write.h"

#include <QAbstractTableModel>
#include <QString>

#include <cstdint>
#include <vector>

namespace ckpt::ui {

class BatchModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { File, Status, Output, ColumnCount };
    enum class State { Queued, Refused, Converting, Done, Failed };

    explicit BatchModel(QObject* parent = nullptr);

    // Appends `input` -> `output` and checks it against itself and every earlier row; returns its row.
    int enqueue(const QString& input, const QString& output);
    // Marks the next queued row as converting and returns it, passing over refused rows; -1 when
    // every row has started.
    int startNext();
    // The end of a started row's conversion: done (the output becomes the path written) or failed.
    void finish(int row, const Expected<write::WriteResult>& result);

    [[nodiscard]] QString input(int row) const;
    [[nodiscard]] QString output(int row) const;
    [[nodiscard]] State state(int row) const;

    [[nodiscard]] int rowCount(const QModelIndex& parent = {}) const override;
    [[nodiscard]] int columnCount(const QModelIndex& parent = {}) const override;
    [[nodiscard]] QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    [[nodiscard]] QVariant headerData(int section, Qt::Orientation orientation,
                                      int role = Qt::DisplayRole) const override;

private:
    struct Row {
        QString input;
        QString output;
        State state = State::Queued;
        QString reason;  // why it was refused or failed, in one line (the status cell)
        QString detail;  // the same with the file it concerns (the status tool tip)
        std::uint64_t bytes = 0;
    };

    void refuse(int row, const Error& why);
    void rowChanged(int row);
    [[nodiscard]] static QString statusText(const Row& r);

    std::vector<Row> m_rows;
    int m_next = 0;  // the first row that has not started
};

}  // namespace ckpt::ui
