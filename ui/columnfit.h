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

// A key cut to fit `width`, keeping what tells it from its siblings: first the start they all share
// goes, a segment at a time, up to the layer's index ("model.layers.0.post_attention_layernorm.weight"
// reads "…0.post_attention_layernorm.weight"); then the middle after the index
// ("…0.…layernorm.weight"); the index and the last segment stay whole. The old left cut read
// "…post_attention_layernorm.weight" in every layer. Failing all that, Qt's own middle cut.
[[nodiscard]] QString elidedKey(const QString& key, const QFontMetrics& metrics, int width);
// The key from its index on ("…0.post_attention_layernorm.weight"), or past its first segment when
// it has no index and three or more segments ("…conv1.weight"): the width Name keeps when it can.
[[nodiscard]] QString shortestKey(const QString& key);

// Draws the Name column with elidedKey; every cell's tooltip has the whole path.
class KeyNameDelegate : public QStyledItemDelegate {
public:
    using QStyledItemDelegate::QStyledItemDelegate;
    void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
    // The text paint() draws in `option`'s rectangle for `index`.
    [[nodiscard]] QString shownText(const QStyleOptionViewItem& option, const QModelIndex& index) const;
};

class ColumnFitter : public QObject {
    Q_OBJECT
public:
    // `settingsKey`: where hand-set widths are kept ("documentView/keyTreeHeader"); the fitter is
    // a child of `tree` and refits when its viewport is resized, until the user sets widths.
    ColumnFitter(QTreeView* tree, int nameColumn, QString settingsKey);

    // The widths from the rows on screen (call after the model is filled or expanded).
    void refit();
    // Name's floor: the shortestKey() of the widest key among the first rows, at most half the view.
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
    // What `column`'s title needs: its text, and a sort arrow only when it is the sorted column.
    [[nodiscard]] int titleWidth(int column) const;

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
