// The helper side of the test-load protocol (the client side is testload.cpp; the lines are
// documented in testload.h): one JSON request line in, JSON event lines out, each written and
// flushed whole so the client sees progress as it happens. Shared by the LibTorch helper and the
// CUDA engine.
#pragma once

#include "util/error.h"

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ckpt::device::protocol {

// "OutOfMemory", "DeviceUnavailable", ...: error codes as events name them, and back (an unknown
// name is LoadFailed).
[[nodiscard]] std::string_view codeName(ErrorCode code);
[[nodiscard]] ErrorCode codeFromName(std::string_view name);

// One event line on stdout, flushed; thread-safe.
void emit(const nlohmann::json& event);

// An error event; returns the helper's exit code (2 for usage, 1 otherwise).
int emitError(ErrorCode code, const std::string& message);

// The request line from stdin, checked to be a JSON object with "cmd" one of `commands`
// (comma-separated). An error event has been emitted when this fails.
Expected<nlohmann::json> readRequest(std::string_view helperName, std::string_view commands);

// A text field that travels as "<field>" or, when its bytes are not UTF-8 (a file name, a key),
// "<field>_hex", bytes intact: the writing side and the reading side.
void setTextField(nlohmann::json& request, const std::string& field, const std::string& text);
[[nodiscard]] std::string textField(const nlohmann::json& request, const std::string& field);

}  // namespace ckpt::device::protocol
