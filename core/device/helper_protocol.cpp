#include "device/helper_protocol.h"

#include "util/printable.h"

#include <cerrno>
#include <fcntl.h>
#include <iostream>
#include <mutex>
#include <unistd.h>

namespace ckpt::device::protocol {

using nlohmann::json;

namespace {

constexpr std::pair<std::string_view, ErrorCode> kCodes[] = {
    {"Io", ErrorCode::Io},
    {"NotCheckpoint", ErrorCode::NotCheckpoint},
    {"Truncated", ErrorCode::Truncated},
    {"Corrupt", ErrorCode::Corrupt},
    {"Unsupported", ErrorCode::Unsupported},
    {"Limit", ErrorCode::Limit},
    {"Usage", ErrorCode::Usage},
    {"OutOfMemory", ErrorCode::OutOfMemory},
    {"DeviceUnavailable", ErrorCode::DeviceUnavailable},
    {"Cancelled", ErrorCode::Cancelled},
    {"LoadFailed", ErrorCode::LoadFailed},
};

}  // namespace

std::string_view codeName(ErrorCode code)
{
    for (const auto& [name, c] : kCodes) {
        if (c == code) {
            return name;
        }
    }
    return "LoadFailed";
}

ErrorCode codeFromName(std::string_view name)
{
    for (const auto& [n, c] : kCodes) {
        if (n == name) {
            return c;
        }
    }
    return ErrorCode::LoadFailed;
}

namespace {

// The protocol's own stdout. At the first use the helper's fd 1 is duplicated for the events alone
// and fd 1 itself pointed at stderr: whatever else writes to stdout (LibTorch, the driver, a
// library's printf) lands on stderr, since the client kills a helper whose stdout carries anything
// but events (helper_process.cpp).
int eventFd()
{
    static const int fd = [] {
        const int own = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
        if (own < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
            return STDOUT_FILENO;
        }
        return own;
    }();
    return fd;
}

}  // namespace

void emit(const json& event)
{
    // Whole lines even when a heartbeat thread speaks too (the CUDA engine's start-up).
    static std::mutex mutex;
    const std::string line = event.dump(-1, ' ', false, json::error_handler_t::replace) + '\n';
    const std::lock_guard lock(mutex);
    std::size_t done = 0;
    while (done < line.size()) {
        const ssize_t n = ::write(eventFd(), line.data() + done, line.size() - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return;  // the client is gone: nobody reads what follows
        }
        done += static_cast<std::size_t>(n);
    }
}

int emitError(ErrorCode code, const std::string& message)
{
    emit({{"event", "error"}, {"code", codeName(code)}, {"message", validUtf8(message)}});
    return code == ErrorCode::Usage ? 2 : 1;
}

Expected<json> readRequest(std::string_view helperName, std::string_view commands)
{
    eventFd();  // stdout is the protocol's from here on
    std::string line;
    auto refuse = [&](const std::string& why) {
        emitError(ErrorCode::Usage, std::string(helperName) + ": " + why);
        return makeError(ErrorCode::Usage, why);
    };
    if (!std::getline(std::cin, line)) {
        return refuse("expected one JSON request line on stdin");
    }
    json req = json::parse(line, nullptr, false);
    if (req.is_discarded() || !req.is_object()) {
        return refuse("the request is not a JSON object");
    }
    const std::string cmd = req.value("cmd", std::string());
    std::string_view rest = commands;
    while (!rest.empty()) {
        const auto comma = rest.find(',');
        if (rest.substr(0, comma) == cmd) {
            return req;
        }
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    return refuse("unknown command '" + cmd + "'");
}

void setTextField(json& request, const std::string& field, const std::string& text)
{
    if (isValidUtf8(text)) {
        request[field] = text;
    } else {
        request[field + "_hex"] = toHex(text);
    }
}

std::string textField(const json& request, const std::string& field)
{
    if (auto hex = request.find(field + "_hex"); hex != request.end() && hex->is_string()) {
        return fromHex(hex->get<std::string>()).value_or(std::string());
    }
    return request.value(field, std::string());
}

}  // namespace ckpt::device::protocol
