#include "histogramwidget.h"

#include <QPainter>

#include <algorithm>

namespace ckpt::ui {

HistogramWidget::HistogramWidget(QWidget* parent) : QWidget(parent)
{
    setMinimumHeight(70);
}

void HistogramWidget::setHistogram(std::vector<std::uint64_t> counts, double lo, double hi)
{
    m_counts = std::move(counts);
    m_lo = lo;
    m_hi = hi;
    update();
}

void HistogramWidget::clear()
{
    m_counts.clear();
    update();
}

void HistogramWidget::paintEvent(QPaintEvent* /*event*/)
{
    if (m_counts.empty()) {
        return;
    }
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing, false);
    const int labelHeight = fontMetrics().height();
    const QRectF area = QRectF(rect()).adjusted(2, 2, -2, -2 - labelHeight);
    const auto peak = std::max<std::uint64_t>(1, *std::max_element(m_counts.begin(), m_counts.end()));
    const double barWidth = area.width() / static_cast<double>(m_counts.size());
    const QColor bar = palette().color(QPalette::Highlight);
    for (std::size_t i = 0; i < m_counts.size(); ++i) {
        const double h = area.height() * static_cast<double>(m_counts[i]) / static_cast<double>(peak);
        const double visible = m_counts[i] > 0 ? std::max(h, 1.0) : 0.0;
        p.fillRect(QRectF(area.left() + barWidth * static_cast<double>(i), area.bottom() - visible,
                          std::max(1.0, barWidth - 1), visible),
                   bar);
    }
    p.setPen(palette().color(QPalette::Text));
    p.drawLine(area.bottomLeft(), area.bottomRight());
    const QRectF labels(area.left(), area.bottom() + 1, area.width(), labelHeight);
    p.drawText(labels, Qt::AlignLeft | Qt::AlignVCenter, QString::number(m_lo, 'g', 4));
    p.drawText(labels, Qt::AlignRight | Qt::AlignVCenter, QString::number(m_hi, 'g', 4));
}

}  // namespace ckpt::ui
