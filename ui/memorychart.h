// A live line chart of memory use per device (one series per device, GiB over seconds), the
// chosen device drawn thick. Fed sample by sample during a test-load, then replaced by the
// load's full timeline.
#pragma once

#include <QWidget>

#include <cstdint>
#include <string>
#include <vector>

class QChart;
class QChartView;
class QLineSeries;
class QValueAxis;

namespace ckpt::ui {

class MemoryChart : public QWidget {
    Q_OBJECT
public:
    explicit MemoryChart(QWidget* parent = nullptr);

    // Starts over with these devices (ids such as "cpu", "cuda:0"; labels shown in the legend).
    void reset(const std::vector<std::string>& ids, const QStringList& labels, const QString& chosen);
    void addSample(double tMs, const std::vector<std::uint64_t>& usedBytes);
    [[nodiscard]] int seriesCount() const;
    [[nodiscard]] int pointCount(int series) const;
    [[nodiscard]] QChart* chart() const { return m_chart; }

private:
    QChart* m_chart;
    QChartView* m_view;
    QValueAxis* m_x;
    QValueAxis* m_y;
    std::vector<QLineSeries*> m_series;
    std::vector<int> m_columnSeries;  // sample column -> series, -1 when not drawn
    double m_maxY = 0;
    double m_maxX = 0;
};

}  // namespace ckpt::ui
