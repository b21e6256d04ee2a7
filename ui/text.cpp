#include "text.h"

#include "util/bytes.h"

#include <QStringList>

#include <iterator>

namespace ckpt::ui {

QString humanSize(std::uint64_t bytes)
{
    return qs(ckpt::humanBytes(bytes));
}

QString shapeText(const std::vector<std::int64_t>& shape)
{
    QStringList dims;
    dims.reserve(static_cast<qsizetype>(shape.size()));
    for (auto d : shape) {
        dims << QString::number(d);
    }
    return QLatin1Char('[') + dims.join(QStringLiteral(", ")) + QLatin1Char(']');
}

QString rateText(std::uint64_t bytes, double seconds)
{
    if (!(seconds > 0)) {
        return QStringLiteral("—");
    }
    double rate = static_cast<double>(bytes) / seconds;
    // The units sizes are shown in (humanSize: KiB, MiB), so "65 KiB in 5 ms" reads as 13 MiB/s,
    // not as a figure in another system.
    static const char* const kUnits[] = {"B/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s"};
    std::size_t unit = 0;
    while (rate >= 1024.0 && unit + 1 < std::size(kUnits)) {
        rate /= 1024.0;
        ++unit;
    }
    // Three significant digits: 1.23, 12.3, 123.
    const int decimals = rate >= 100 ? 0 : rate >= 10 ? 1 : 2;
    return QStringLiteral("%1 %2").arg(rate, 0, 'f', decimals).arg(QLatin1String(kUnits[unit]));
}

QString durationText(double seconds)
{
    if (seconds >= 1.0) {
        return QStringLiteral("%1 s").arg(seconds, 0, 'f', 2);
    }
    if (seconds >= 1e-3) {
        const double ms = seconds * 1e3;
        return QStringLiteral("%1 ms").arg(ms, 0, 'f', ms >= 100 ? 0 : 1);
    }
    return QStringLiteral("%1 µs").arg(seconds * 1e6, 0, 'f', 0);
}

std::uint64_t numelOf(const std::vector<std::int64_t>& shape)
{
    std::uint64_t n = 1;
    for (auto d : shape) {
        n *= static_cast<std::uint64_t>(d < 0 ? 0 : d);
    }
    return n;
}

std::vector<std::string> splitList(const QString& text)
{
    std::vector<std::string> out;
    const auto parts = text.split(QLatin1Char(','), Qt::SkipEmptyParts);
    for (const auto& p : parts) {
        const auto t = p.trimmed();
        if (!t.isEmpty()) {
            out.push_back(t.toStdString());
        }
    }
    return out;
}

QString joinList(const std::vector<std::string>& items)
{
    QStringList l;
    for (const auto& s : items) {
        l << qs(s);
    }
    return l.join(QStringLiteral(", "));
}

QString errorHtml(const QString& message)
{
    return QStringLiteral("<span style='color:#c53030'>%1</span>").arg(message.toHtmlEscaped());
}

}  // namespace ckpt::ui
