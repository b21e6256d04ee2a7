#include "util/device_name.h"

#include <algorithm>
#include <charconv>

namespace ckpt {
namespace {

bool isDigit(char c)
{
    return c >= '0' && c <= '9';
}

}  // namespace

std::string DeviceName::text() const
{
    return index ? type + ":" + std::to_string(*index) : type;
}

std::optional<DeviceName> parseDeviceName(std::string_view text)
{
    const auto colon = text.find(':');
    DeviceName d;
    d.type = std::string(text.substr(0, colon));
    if (d.type.empty()) {
        return std::nullopt;
    }
    if (colon == std::string_view::npos) {
        return d;
    }
    const std::string_view digits = text.substr(colon + 1);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), isDigit)) {
        return std::nullopt;
    }
    std::int64_t index = 0;
    if (std::from_chars(digits.data(), digits.data() + digits.size(), index).ec != std::errc()) {
        return std::nullopt;  // beyond int64
    }
    d.index = index;
    return d;
}

bool isBackendName(std::string_view type)
{
    const auto allowed = [](char c) { return (c >= 'a' && c <= 'z') || isDigit(c) || c == '_'; };
    return !type.empty() && !isDigit(type.front()) && std::all_of(type.begin(), type.end(), allowed);
}

std::string cudaUnavailableText()
{
    return "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If you are "
           "running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') to map your "
           "storages to the CPU.";
}

std::string cudaDeviceCountText(std::int64_t index, int devices)
{
    return "Attempting to deserialize object on CUDA device " + std::to_string(index) +
           " but torch.cuda.device_count() is " + std::to_string(devices) +
           ". Please use torch.load with map_location to map your storages to an existing device.";
}

}  // namespace ckpt
