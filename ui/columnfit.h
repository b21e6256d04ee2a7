// Column widths of a key tree (the raw tree, Model view, a set's tree) that never collapse the
// Name column to stubs ("modu…ight"): Name keeps at least the last two segments of its keys, the
// other columns are as wide as what they show up to a cap (a long value is elided first), Name
// takes what is left, and every border can be dragged, the widths then kept in QSettings.
#pragma once

#include <QObject>
#include <QString>
#include <QStyledItemDelegate>

class QTreeView;

namespace ckpt::ui {

// Name elides on the left ("…bn1.running_mean"): the width the fitter keeps is for the last two
// segments, which are what tell sibling keys apart; the start is shared and the tooltip has it.
class KeyTailDelegate : public QStyledItemDelegate {
public:
    using QStyledItemDelegate::QStyledItemDelegate;
    void initStyleOption(QStyleOptionViewItem* option, const QModelIndex& index) const override;
};

class ColumnFitter : public QObject {
    Q_OBJECT
public:
    // `settingsKey`: where hand-set widths are kept ("documentView/keyTreeHeader"); the fitter is
    // a child of `tree` and refits when its viewport is resized, until the user sets widths.
    ColumnFitter(QTreeView* tree, int nameColumn, QString settingsKey);

    // The widths from the rows on screen (call after the model is filled or expanded).
    void refit();
    // Name's floor: the last two segments of the widest key among the first rows.
    [[nodiscard]] int nameMinimum() const;
    // What a column other than Name may take before its values are elided.
    [[nodiscard]] int valueColumnCap() const;
    [[nodiscard]] bool widthsSetByHand() const { return m_byHand; }

    // "encoder.layers.11.attn.q_proj.weight" -> "q_proj.weight".
    [[nodiscard]] static QString lastTwoSegments(const QString& key);

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void onSectionResized();

    QTreeView* m_tree;
    // The two widgets watched, kept from construction: the filter compares against these rather
    // than asking m_tree, because Qt still delivers events to it while the tree is being destroyed
    // (its children go in ~QWidget, after ~QTreeView has run).
    QObject* m_treeViewport;
    QObject* m_headerViewport;
    int m_name;
    QString m_settingsKey;
    bool m_fitting = false;
    bool m_mouseOnHeader = false;
    bool m_byHand = false;
};

}  // namespace ckpt::ui
