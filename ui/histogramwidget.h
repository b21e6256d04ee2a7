// A small bar chart of a tensor's value histogram (counts per equal-width bin over [min, max]).
#pragma once

#include <QWidget>

#include <cstdint>
#include <vector>

namespace ckpt::ui {

class HistogramWidget : public QWidget {
    Q_OBJECT
public:
    explicit HistogramWidget(QWidget* parent = nullptr);
    void setHistogram(std::vector<std::uint64_t> counts, double lo, double hi);
    void clear();
    [[nodiscard]] const std::vector<std::uint64_t>& counts() const { return m_counts; }
    [[nodiscard]] QSize sizeHint() const override { return {260, 90}; }

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    std::vector<std::uint64_t> m_counts;
    double m_lo = 0;
    double m_hi = 0;
};

}  // namespace ckpt::ui
