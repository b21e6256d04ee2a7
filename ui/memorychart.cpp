#include "memorychart.h"

#include <QChart>
#include <QChartView>
#include <QLegend>
#include <QLineSeries>
#include <QPen>
#include <QVBoxLayout>
#include <QValueAxis>

#include <algorithm>

namespace ckpt::ui {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

MemoryChart::MemoryChart(QWidget* parent)
    : QWidget(parent), m_chart(new QChart), m_view(new QChartView(m_chart, this)), m_x(new QValueAxis),
      m_y(new QValueAxis)
{
    setObjectName(QStringLiteral("memoryChart"));
    m_view->setObjectName(QStringLiteral("memoryChartView"));
    m_view->setRenderHint(QPainter::Antialiasing);
    m_chart->setTheme(palette().color(QPalette::Window).lightness() < 128 ? QChart::ChartThemeDark
                                                                          : QChart::ChartThemeLight);
    m_chart->setBackgroundBrush(palette().brush(QPalette::Base));
    m_chart->setMargins(QMargins(4, 4, 4, 4));
    m_chart->legend()->setAlignment(Qt::AlignBottom);
    m_x->setTitleText(tr("seconds"));
    m_x->setLabelFormat(QStringLiteral("%.1f"));
    m_y->setTitleText(tr("GiB used"));
    m_y->setLabelFormat(QStringLiteral("%.2f"));
    m_chart->addAxis(m_x, Qt::AlignBottom);
    m_chart->addAxis(m_y, Qt::AlignLeft);
    m_x->setRange(0, 1);
    m_y->setRange(0, 1);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_view);
    setMinimumHeight(180);
}

void MemoryChart::reset(const std::vector<std::string>& ids, const QStringList& labels, const QString& chosen)
{
    m_chart->removeAllSeries();
    m_series.clear();
    m_columnSeries.assign(ids.size(), -1);
    m_maxY = 0;
    m_maxX = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
        // System RAM would dwarf the GPU lines: it is drawn only when the load goes to the CPU.
        if (ids[i] == "cpu" && chosen != QLatin1String("cpu")) {
            continue;
        }
        m_columnSeries[i] = static_cast<int>(m_series.size());
        auto* s = new QLineSeries;
        s->setName(i < static_cast<std::size_t>(labels.size()) ? labels[static_cast<qsizetype>(i)]
                                                               : QString::fromStdString(ids[i]));
        m_chart->addSeries(s);
        s->attachAxis(m_x);
        s->attachAxis(m_y);
        QPen pen = s->pen();
        const bool isChosen = QString::fromStdString(ids[i]) == chosen;
        pen.setWidthF(isChosen ? 3.0 : 1.2);
        if (!isChosen) {
            pen.setStyle(Qt::DashLine);
        }
        s->setPen(pen);
        m_series.push_back(s);
    }
    m_x->setRange(0, 1);
    m_y->setRange(0, 1);
}

void MemoryChart::addSample(double tMs, const std::vector<std::uint64_t>& usedBytes)
{
    const double t = tMs / 1000.0;
    for (std::size_t i = 0; i < m_columnSeries.size() && i < usedBytes.size(); ++i) {
        if (m_columnSeries[i] < 0) {
            continue;
        }
        const double gib = static_cast<double>(usedBytes[i]) / kGiB;
        m_series[static_cast<std::size_t>(m_columnSeries[i])]->append(t, gib);
        m_maxY = std::max(m_maxY, gib);
    }
    m_maxX = std::max(m_maxX, t);
    m_x->setRange(0, std::max(1.0, m_maxX * 1.05));
    m_y->setRange(0, std::max(0.1, m_maxY * 1.15));
}

int MemoryChart::seriesCount() const
{
    return static_cast<int>(m_series.size());
}

int MemoryChart::pointCount(int series) const
{
    return series >= 0 && series < seriesCount() ? static_cast<int>(m_series[static_cast<std::size_t>(series)]->count())
                                                 : 0;
}

}  // namespace ckpt::ui
