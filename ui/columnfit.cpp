#include "columnfit.h"

#include <QApplication>
#include <QEvent>
#include <QHeaderView>
#include <QScrollBar>
#include <QSettings>
#include <QStyle>
#include <QTreeView>

#include <algorithm>
#include <cmath>
#include <utility>

namespace ckpt::ui {
namespace {

// Rows read for Name's floor: enough to see the keys' usual shape, cheap on a 40k-key tree.
constexpr int kMaxMeasuredRows = 2000;
// A column other than Name takes at most this many 'M's; one cut shorter takes at least this.
constexpr int kValueCapEm = 16;
constexpr int kValueFloorEm = 5;
// Content this narrow (a size, a dtype, a device, a shape such as "[4096, 11008]") is never elided
// to make room for Name: "[12…64]" and "64" without its unit say nothing.
constexpr int kShortColumnEm = 9;
// Below its floor Name still takes at least this much before the view scrolls sideways.
constexpr int kNameLeastEm = 8;
// Name's floor never asks for more than this share of the view (a pathological key).
constexpr int kMaxNameShareOfView = 2;  // one half

}  // namespace

ColumnFitter::ColumnFitter(QTreeView* tree, int nameColumn, QString settingsKey)
    : QObject(tree), m_tree(tree), m_treeViewport(tree->viewport()), m_headerViewport(tree->header()->viewport()),
      m_name(nameColumn), m_settingsKey(std::move(settingsKey))
{
    auto* header = m_tree->header();
    header->setStretchLastSection(false);
    header->setSectionResizeMode(QHeaderView::Interactive);  // every border can be dragged
    header->setMinimumSectionSize(m_tree->fontMetrics().horizontalAdvance(QLatin1Char('M')) * 3);
    const QByteArray saved = QSettings().value(m_settingsKey).toByteArray();
    if (!saved.isEmpty() && header->restoreState(saved)) {
        header->setSectionResizeMode(QHeaderView::Interactive);
        m_byHand = true;
    }
    m_tree->setItemDelegateForColumn(m_name, new KeyNameDelegate(this));
    connect(header, &QHeaderView::sectionResized, this, &ColumnFitter::onSectionResized);
    connect(header, &QHeaderView::sortIndicatorChanged, this, &ColumnFitter::refit);  // room for the arrow
    m_treeViewport->installEventFilter(this);
    m_headerViewport->installEventFilter(this);
}

namespace {

const QString kEllipsis = QStringLiteral("…");

// "12" in "model.layers.12.mlp": a list index, which tells one layer's keys from the next.
bool isIndex(const QString& segment)
{
    return !segment.isEmpty() && std::all_of(segment.begin(), segment.end(), [](QChar c) { return c.isDigit(); });
}

// Where the part of a key that tells it from its siblings starts: at the first index before the
// last segment ("0" in "model.layers.0.mlp.weight", the layer), else after the first segment of a
// key of three or more (the wrapper every key shares: "module.", "model."), else at the start.
qsizetype coreStart(const QStringList& segments)
{
    for (qsizetype i = 0; i + 1 < segments.size(); ++i) {
        if (isIndex(segments[i])) {
            return i;
        }
    }
    return segments.size() >= 3 ? 1 : 0;
}

}  // namespace

QString shortestKey(const QString& key)
{
    const QStringList segments = key.split(QLatin1Char('.'));
    const qsizetype core = coreStart(segments);
    return core > 0 ? kEllipsis + segments.mid(core).join(QLatin1Char('.')) : key;
}

QString elidedKey(const QString& key, const QFontMetrics& metrics, int width)
{
    if (metrics.horizontalAdvance(key) <= width) {
        return key;
    }
    const QStringList segments = key.split(QLatin1Char('.'));
    if (segments.size() < 2) {
        return metrics.elidedText(key, Qt::ElideMiddle, width);
    }
    // The start every sibling shares goes first, a segment at a time ("…layers.0.self_attn.q_proj.weight",
    // "…0.self_attn.q_proj.weight").
    const qsizetype core = coreStart(segments);
    for (qsizetype drop = 1; drop <= core; ++drop) {
        QString shorter = kEllipsis + segments.mid(drop).join(QLatin1Char('.'));
        if (metrics.horizontalAdvance(shorter) <= width) {
            return shorter;
        }
    }
    // Then the middle after the index, the index and the last segment kept whole
    // ("…0.…layernorm.weight").
    const int last = metrics.horizontalAdvance(kEllipsis + segments.back());
    if (core > 0 && core + 1 < segments.size()) {
        const QString index = kEllipsis + segments[core] + QLatin1Char('.');
        const int room = width - metrics.horizontalAdvance(index);
        // The last segment whole; a last segment too long for that ("num_batches_tracked") keeps its
        // end, still after the index ("…bn1.…es_tracked").
        if (room >= std::min(last, metrics.horizontalAdvance(kEllipsis + QStringLiteral("xxxxxx")))) {
            return index + metrics.elidedText(segments.mid(core + 1).join(QLatin1Char('.')), Qt::ElideLeft, room);
        }
    }
    if (width >= last) {
        return metrics.elidedText(key, Qt::ElideLeft, width);
    }
    return metrics.elidedText(key, Qt::ElideMiddle, width);
}

QString KeyNameDelegate::shownText(const QStyleOptionViewItem& option, const QModelIndex& index) const
{
    QStyleOptionViewItem opt = option;
    initStyleOption(&opt, index);
    const QWidget* widget = opt.widget;
    const QStyle* style = widget != nullptr ? widget->style() : QApplication::style();
    // The text's own rectangle, less the margins the style leaves inside it (QCommonStyle draws an
    // item's text PM_FocusFrameHMargin + 1 in from each side); a pixel more so that rounding never
    // makes the style cut the end again.
    const QRect text = style->subElementRect(QStyle::SE_ItemViewItemText, &opt, widget);
    const int margin = style->pixelMetric(QStyle::PM_FocusFrameHMargin, nullptr, widget) + 1;
    return elidedKey(opt.text, opt.fontMetrics, text.width() - 2 * margin - 1);
}

void KeyNameDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const
{
    QStyleOptionViewItem opt = option;
    initStyleOption(&opt, index);
    opt.text = shownText(option, index);
    const QWidget* widget = opt.widget;
    const QStyle* style = widget != nullptr ? widget->style() : QApplication::style();
    style->drawControl(QStyle::CE_ItemViewItem, &opt, painter, widget);
}

QString ColumnFitter::lastTwoSegments(const QString& key)
{
    const qsizetype last = key.lastIndexOf(QLatin1Char('.'));
    if (last <= 0) {
        return key;
    }
    const qsizetype before = key.lastIndexOf(QLatin1Char('.'), last - 1);
    return before < 0 ? key : key.mid(before + 1);
}

int ColumnFitter::nameMinimum() const
{
    const auto* model = m_tree->model();
    if (model == nullptr) {
        return 0;
    }
    const QFontMetrics fm = m_tree->fontMetrics();
    // Indentation and the expand arrow of the rows' depth, the icon, the cell's margins.
    const int chrome = fm.height() + 16;
    int widest = fm.horizontalAdvance(model->headerData(m_name, Qt::Horizontal).toString());
    int measured = 0;
    // Top-level rows and the children of expanded ones, in order, as the view shows them.
    std::vector<std::pair<QModelIndex, int>> stack{{QModelIndex(), 0}};
    while (!stack.empty() && measured < kMaxMeasuredRows) {
        const auto [parent, depth] = stack.back();
        stack.pop_back();
        for (int r = model->rowCount(parent) - 1; r >= 0 && measured < kMaxMeasuredRows; --r) {
            const QModelIndex i = model->index(r, m_name, parent);
            ++measured;
            const QString text = shortestKey(i.data().toString());
            widest = std::max(widest, fm.horizontalAdvance(text) + chrome +
                                          (depth + (m_tree->rootIsDecorated() ? 1 : 0)) * m_tree->indentation());
            if (m_tree->isExpanded(i)) {
                stack.emplace_back(i, depth + 1);
            }
        }
    }
    return std::min(widest, std::max(m_tree->viewport()->width() / kMaxNameShareOfView, widest / 2));
}

int ColumnFitter::titleWidth(int column) const
{
    // The header's own size hint keeps room for a sort arrow on every column: 20 pixels a column
    // that Name needs at 1024 wide. Only the sorted column shows one.
    const auto* header = m_tree->header();
    const QStyle* style = header->style();
    const int margin = style->pixelMetric(QStyle::PM_HeaderMargin, nullptr, header);
    int width =
        header->fontMetrics().horizontalAdvance(m_tree->model()->headerData(column, Qt::Horizontal).toString()) +
        4 * margin;
    if (header->isSortIndicatorShown() && header->sortIndicatorSection() == column) {
        width += style->pixelMetric(QStyle::PM_HeaderMarkSize, nullptr, header) + margin;
    }
    return width;
}

int ColumnFitter::valueColumnCap() const
{
    return m_tree->fontMetrics().horizontalAdvance(QLatin1Char('M')) * kValueCapEm;
}

void ColumnFitter::refit()
{
    if (m_byHand || m_tree->model() == nullptr) {
        return;
    }
    auto* header = m_tree->header();
    const int em = m_tree->fontMetrics().horizontalAdvance(QLatin1Char('M'));
    const int columns = header->count();
    // Each other column as wide as its rows on screen and its title, up to the cap.
    std::vector<int> widths(static_cast<std::size_t>(columns), 0);
    std::vector<int> natural(static_cast<std::size_t>(columns), 0);
    int others = 0;
    for (int c = 0; c < columns; ++c) {
        if (c == m_name || header->isSectionHidden(c)) {
            continue;
        }
        const int title = titleWidth(c);
        // QTreeView's override is protected; through its base it is the same (virtual) measure.
        const int rows = static_cast<const QAbstractItemView*>(m_tree)->sizeHintForColumn(c);
        natural[static_cast<std::size_t>(c)] = std::max(rows, title);
        widths[static_cast<std::size_t>(c)] = std::min(natural[static_cast<std::size_t>(c)], valueColumnCap());
        others += widths[static_cast<std::size_t>(c)];
    }
    const int available = m_tree->viewport()->width();
    const int nameFloor = nameMinimum();
    // Too narrow for Name's floor: the other columns give way first, each in proportion to what it
    // has above its own floor, so a long value gives the most and a short shape ("[16, 3, 3, 3]")
    // is not cut to "[1…3]" while a type column keeps its whole width.
    const int excess = nameFloor + others - available;
    if (excess > 0) {
        // A column whose whole content is short (a size, a device, a dtype) keeps it: cutting
        // "21.9 KiB" to "21…iB" saves little and loses the value.
        auto floorOf = [&](int c) {
            return std::max(kValueFloorEm * em, std::min(natural[static_cast<std::size_t>(c)], kShortColumnEm * em));
        };
        int slack = 0;
        for (int c = 0; c < columns; ++c) {
            if (c != m_name && widths[static_cast<std::size_t>(c)] > 0) {
                slack += std::max(0, widths[static_cast<std::size_t>(c)] - floorOf(c));
            }
        }
        const double share = slack > 0 ? std::min(1.0, static_cast<double>(excess) / slack) : 0.0;
        for (int c = 0; c < columns; ++c) {
            auto& w = widths[static_cast<std::size_t>(c)];
            if (c == m_name || w == 0) {
                continue;
            }
            const int room = std::max(0, w - floorOf(c));
            const int give = std::min(room, static_cast<int>(std::ceil(share * room)));
            w -= give;
            others -= give;
        }
    }
    // Room to spare once Name has its whole keys: a value cut to the cap is shown whole after all.
    const int nameWhole = std::max(nameFloor, static_cast<const QAbstractItemView*>(m_tree)->sizeHintForColumn(m_name));
    int spare = available - others - nameWhole;
    for (int c = 0; c < columns && spare > 0; ++c) {
        auto& w = widths[static_cast<std::size_t>(c)];
        const int grow = std::min(spare, natural[static_cast<std::size_t>(c)] - w);
        if (c != m_name && grow > 0) {
            w += grow;
            others += grow;
            spare -= grow;
        }
    }
    // Too narrow for Name's floor after all (a pane dragged thin): Name gives way down to its least,
    // so the columns after it stay in view; only then does the view scroll sideways.
    widths[static_cast<std::size_t>(m_name)] = std::max(std::min(nameFloor, kNameLeastEm * em), available - others);
    m_fitting = true;
    for (int c = 0; c < columns; ++c) {
        if (!header->isSectionHidden(c)) {
            header->resizeSection(c, widths[static_cast<std::size_t>(c)]);
        }
    }
    m_fitting = false;
}

void ColumnFitter::onSectionResized()
{
    if (m_fitting || !m_mouseOnHeader) {
        return;  // a fit of ours, or Qt laying the header out: not the user's choice
    }
    // The user dragged a border: these widths are theirs from now on, here and in later windows.
    m_byHand = true;
    QSettings().setValue(m_settingsKey, m_tree->header()->saveState());
}

bool ColumnFitter::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == m_treeViewport && (event->type() == QEvent::Resize || event->type() == QEvent::Show)) {
        refit();
    } else if (watched == m_headerViewport) {
        // Only a resize while a button is down on the header is the user's (a drag, a double-click).
        if (event->type() == QEvent::MouseButtonPress || event->type() == QEvent::MouseButtonDblClick) {
            m_mouseOnHeader = true;
        } else if (event->type() == QEvent::MouseButtonRelease) {
            m_mouseOnHeader = false;
        }
    }
    return QObject::eventFilter(watched, event);
}

}  // namespace ckpt::ui
