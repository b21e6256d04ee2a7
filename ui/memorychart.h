// A live line chart of the memory a load adds per device (one series per device, over seconds),
// the chosen device drawn thick. Fed sample by sample during a test-load, then replaced by the
// load's full timeline.
//
// What it plots is what the summary talks about: on a GPU, the device's use above where it stood
// when the load started (the rise the "other GPU moved" check measures); on the CPU, the resident
// memory of ckptscope's own processes above theirs at the start, never the whole machine's RAM,
// which other programs move. The axis unit follows the largest value (B, KiB, MiB, GiB) and its
// ticks are round numbers in that unit.
#pragma once

#include "device/sampler.h"

#include <QString>
#include <QWidget>

#include <cstdint>
#include <string>
#include <vector>

class QChart;
class QChartView;
class QLineSeries;
class QValueAxis;

namespace ckpt::ui {

// A value axis of round ticks covering [0, maxValue]: `step` is 1, 2 or 5 times a power of ten.
struct NiceAxis {
    double top = 1;
    double step = 0.2;
    int decimals = 1;  // enough to tell the ticks apart
};
[[nodiscard]] NiceAxis niceAxis(double maxValue, int targetTicks = 5);

// The binary unit a byte count reads best in: {name, bytes per unit}.
struct ByteUnit {
    QString name;
    double bytes = 1;
};
[[nodiscard]] ByteUnit byteUnitFor(std::uint64_t maxBytes);

class MemoryChart : public QWidget {
    Q_OBJECT
public:
    explicit MemoryChart(QWidget* parent = nullptr);

    // Starts over with these devices (ids such as "cpu", "cuda:0"; labels shown in the legend).
    void reset(const std::vector<std::string>& ids, const QStringList& labels, const QString& chosen);
    void addSample(const device::Sample& sample);
    // The CPU line rises from this level rather than from its first sample (set after reset(),
    // before the samples): what the tensors added above the helper's own memory.
    void setCpuFloor(std::uint64_t bytes);
    [[nodiscard]] int seriesCount() const;
    [[nodiscard]] int pointCount(int series) const;
    // The bytes a series shows at a point (its rise above the series' first sample).
    [[nodiscard]] std::uint64_t valueAt(int series, int point) const;
    [[nodiscard]] std::uint64_t maxValue() const { return m_maxBytes; }
    [[nodiscard]] QChart* chart() const { return m_chart; }
    [[nodiscard]] QValueAxis* valueAxis() const { return m_y; }

private:
    struct Line {
        QLineSeries* series = nullptr;
        std::size_t column = 0;
        bool cpu = false;
        bool haveBaseline = false;
        std::uint64_t baseline = 0;
        std::vector<std::uint64_t> bytes;  // per point, in bytes: redrawn when the unit changes
    };
    void rescale();

    QChart* m_chart;
    QChartView* m_view;
    QValueAxis* m_x;
    QValueAxis* m_y;
    std::vector<Line> m_lines;
    std::uint64_t m_maxBytes = 0;
    double m_unitBytes = 0;  // unit the points are in now
    double m_maxX = 0;
};

}  // namespace ckpt::ui
