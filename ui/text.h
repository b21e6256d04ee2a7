// Conversions between core's std::string values and what the widgets show. Formatting rules that
// the command line shares (sizes, dtype names) come from core; this only adapts them to QString.
#pragma once

#include <QString>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::ui {

inline QString qs(std::string_view s)
{
    return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size()));
}
inline std::string ss(const QString& s)
{
    return s.toStdString();
}

QString humanSize(std::uint64_t bytes);                     // ckpt::humanBytes as a QString
QString shapeText(const std::vector<std::int64_t>& shape);  // "[64, 3, 7, 7]", "[]" for a scalar tensor
// Throughput in the decimal unit that keeps it readable: "1.9 GB/s", "350 MB/s", "12.4 kB/s", never
// "0.00 GB/s" for a small load; "—" when no time was measured.
QString rateText(std::uint64_t bytes, double seconds);
// A duration that a short load does not turn into "0.00 s": "240 µs", "3.1 ms", "2.45 s".
QString durationText(double seconds);
std::uint64_t numelOf(const std::vector<std::int64_t>& shape);
// Splits a user's comma-separated list ("module., _orig_mod.") into trimmed non-empty items.
std::vector<std::string> splitList(const QString& text);
QString joinList(const std::vector<std::string>& items);
// Plain text (a core error's message, say) escaped and shown in the one red every panel uses for
// what went wrong.
QString errorHtml(const QString& message);

}  // namespace ckpt::ui
