#include "columnfit.h"

#include <QEvent>
#include <QHeaderView>
#include <QScrollBar>
#include <QSettings>
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
constexpr int kShortColumnEm = 6;  // content this narrow is never elided to make room for Name
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
    m_tree->setItemDelegateForColumn(m_name, new KeyTailDelegate(this));
    connect(header, &QHeaderView::sectionResized, this, &ColumnFitter::onSectionResized);
    m_treeViewport->installEventFilter(this);
    m_headerViewport->installEventFilter(this);
}

void KeyTailDelegate::initStyleOption(QStyleOptionViewItem* option, const QModelIndex& index) const
{
    QStyledItemDelegate::initStyleOption(option, index);
    option->textElideMode = Qt::ElideLeft;
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
            const QString text = QStringLiteral("…") + lastTwoSegments(i.data().toString());
            widest = std::max(widest, fm.horizontalAdvance(text) + chrome +
                                          (depth + (m_tree->rootIsDecorated() ? 1 : 0)) * m_tree->indentation());
            if (m_tree->isExpanded(i)) {
                stack.emplace_back(i, depth + 1);
            }
        }
    }
    return std::min(widest, std::max(m_tree->viewport()->width() / kMaxNameShareOfView, widest / 2));
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
        const int title = header->sectionSizeHint(c);
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
    widths[static_cast<std::size_t>(m_name)] = std::max(nameFloor, available - others);
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
