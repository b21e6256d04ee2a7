#include "memorychart.h"

#include <QChart>
#include <QChartView>
#include <QLegend>
#include <QLineSeries>
#include <QPen>
#include <QVBoxLayout>
#include <QValueAxis>

#include <algorithm>
#include <cmath>

namespace ckpt::ui {

NiceAxis niceAxis(double maxValue, int targetTicks)
{
    NiceAxis axis;
    if (!(maxValue > 0) || targetTicks < 1) {
        return axis;
    }
    const double rough = maxValue / targetTicks;
    const double magnitude = std::pow(10.0, std::floor(std::log10(rough)));
    double step = magnitude * 10;
    for (const double m : {1.0, 2.0, 5.0}) {
        if (magnitude * m >= rough) {
            step = magnitude * m;
            break;
        }
    }
    axis.step = step;
    axis.top = std::ceil(maxValue / step - 1e-9) * step;
    axis.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    return axis;
}

ByteUnit byteUnitFor(std::uint64_t maxBytes)
{
    constexpr double kKiB = 1024.0;
    if (maxBytes >= kKiB * kKiB * kKiB) {
        return {QStringLiteral("GiB"), kKiB * kKiB * kKiB};
    }
    if (maxBytes >= kKiB * kKiB) {
        return {QStringLiteral("MiB"), kKiB * kKiB};
    }
    if (maxBytes >= kKiB) {
        return {QStringLiteral("KiB"), kKiB};
    }
    return {QStringLiteral("bytes"), 1};
}

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
    m_x->setTickType(QValueAxis::TicksDynamic);
    m_x->setTickAnchor(0);
    m_y->setTickType(QValueAxis::TicksDynamic);
    m_y->setTickAnchor(0);
    m_chart->addAxis(m_x, Qt::AlignBottom);
    m_chart->addAxis(m_y, Qt::AlignLeft);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_view);
    setMinimumHeight(240);  // room for five labelled ticks; the panel scrolls below that
    reset({}, {}, {});
}

void MemoryChart::reset(const std::vector<std::string>& ids, const QStringList& labels, const QString& chosen)
{
    m_chart->removeAllSeries();
    m_lines.clear();
    m_maxBytes = 0;
    m_unitBytes = 0;
    m_maxX = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const bool cpu = ids[i] == "cpu";
        // The CPU line is drawn only when the load goes to the CPU: it is not what a GPU load is about.
        if (cpu && chosen != QLatin1String("cpu")) {
            continue;
        }
        Line line;
        line.series = new QLineSeries;
        line.column = i;
        line.cpu = cpu;
        const QString label = i < static_cast<std::size_t>(labels.size()) ? labels[static_cast<qsizetype>(i)]
                                                                          : QString::fromStdString(ids[i]);
        line.series->setName(cpu ? tr("%1 (ckptscope's processes)").arg(label) : label);
        m_chart->addSeries(line.series);
        line.series->attachAxis(m_x);
        line.series->attachAxis(m_y);
        QPen pen = line.series->pen();
        const bool isChosen = QString::fromStdString(ids[i]) == chosen;
        pen.setWidthF(isChosen ? 3.0 : 1.2);
        if (!isChosen) {
            pen.setStyle(Qt::DashLine);
        }
        line.series->setPen(pen);
        m_lines.push_back(std::move(line));
    }
    rescale();
}

void MemoryChart::setCpuFloor(std::uint64_t bytes)
{
    for (auto& line : m_lines) {
        if (line.cpu) {
            line.baseline = bytes;
            line.haveBaseline = true;
        }
    }
}

void MemoryChart::addSample(const device::Sample& sample)
{
    const double t = sample.tMs / 1000.0;
    for (auto& line : m_lines) {
        // The CPU's own figure is what ckptscope's processes hold; a GPU's is the whole device.
        const auto& source = line.cpu ? sample.ownBytes : sample.usedBytes;
        if (line.column >= source.size()) {
            continue;
        }
        const std::uint64_t now = source[line.column];
        if (!line.haveBaseline) {
            line.baseline = now;
            line.haveBaseline = true;
        }
        const std::uint64_t rise = now > line.baseline ? now - line.baseline : 0;
        line.bytes.push_back(rise);
        m_maxBytes = std::max(m_maxBytes, rise);
        line.series->append(t, m_unitBytes > 0 ? static_cast<double>(rise) / m_unitBytes : 0.0);
    }
    m_maxX = std::max(m_maxX, t);
    rescale();
}

void MemoryChart::rescale()
{
    const auto unit = byteUnitFor(m_maxBytes);
    if (unit.bytes != m_unitBytes) {
        m_unitBytes = unit.bytes;
        m_y->setTitleText(tr("%1 added").arg(unit.name));
        for (auto& line : m_lines) {
            QList<QPointF> points = line.series->points();
            for (qsizetype p = 0; p < points.size(); ++p) {
                points[p].setY(static_cast<double>(line.bytes[static_cast<std::size_t>(p)]) / m_unitBytes);
            }
            line.series->replace(points);
        }
    }
    const auto y = niceAxis(std::max(1.0, static_cast<double>(m_maxBytes) / m_unitBytes * 1.05));
    m_y->setRange(0, y.top);
    m_y->setTickInterval(y.step);
    m_y->setLabelFormat(QStringLiteral("%.") + QString::number(y.decimals) + QStringLiteral("f"));
    const auto x = niceAxis(std::max(1.0, m_maxX), 6);
    m_x->setRange(0, x.top);
    m_x->setTickInterval(x.step);
    m_x->setLabelFormat(QStringLiteral("%.") + QString::number(x.decimals) + QStringLiteral("f"));
}

int MemoryChart::seriesCount() const
{
    return static_cast<int>(m_lines.size());
}

int MemoryChart::pointCount(int series) const
{
    return series >= 0 && series < seriesCount()
               ? static_cast<int>(m_lines[static_cast<std::size_t>(series)].series->count())
               : 0;
}

std::uint64_t MemoryChart::valueAt(int series, int point) const
{
    if (series < 0 || series >= seriesCount()) {
        return 0;
    }
    const auto& bytes = m_lines[static_cast<std::size_t>(series)].bytes;
    return point >= 0 && static_cast<std::size_t>(point) < bytes.size() ? bytes[static_cast<std::size_t>(point)] : 0;
}

}  // namespace ckpt::ui
