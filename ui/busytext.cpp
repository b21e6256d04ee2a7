#include "busytext.h"

#include <utility>

namespace ckpt::ui {

BusyText::BusyText(std::string label)
    : label_(std::move(label)), meter_(progress::Clock::now(), progress::firstUpdateDelay())
{
}

std::optional<QString> BusyText::due(std::uint64_t done, std::uint64_t total, const std::string& detail)
{
    if (!meter_.due(done)) {
        return std::nullopt;
    }
    return QString::fromStdString(meter_.text(label_, {done, total, detail}));
}

}  // namespace ckpt::ui
