#include "text.h"

#include "util/bytes.h"

#include <QStringList>

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
