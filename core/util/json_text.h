// JSON text that is always valid: every string and key made valid UTF-8 (invalid bytes as `\xNN`,
// printable.h) before nlohmann serialises it, since its dump() throws on invalid UTF-8 and a
// checkpoint's keys are whatever bytes the file holds.
#pragma once

#include "util/error.h"
#include "util/printable.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace ckpt {

// The "schema" every JSON document carries (README, JSON). 2 since a set's `inspect --json` speaks
// a file's dialect (`path`, `location`, `nbytes`, a `set` object and `stored_in`).
inline constexpr int kJsonSchema = 2;

template <class Json> void makeValidUtf8(Json& j)
{
    if (j.is_string()) {
        auto& s = j.template get_ref<typename Json::string_t&>();
        if (!isValidUtf8(s)) {
            s = validUtf8(s);
        }
    } else if (j.is_array()) {
        for (auto& e : j) {
            makeValidUtf8(e);
        }
    } else if (j.is_object()) {
        bool keysValid = true;
        for (auto it = j.begin(); it != j.end(); ++it) {
            keysValid = keysValid && isValidUtf8(it.key());
            makeValidUtf8(it.value());
        }
        if (!keysValid) {
            Json fixed = Json::object();
            for (auto it = j.begin(); it != j.end(); ++it) {
                fixed[validUtf8(it.key())] = std::move(it.value());
            }
            j = std::move(fixed);
        }
    }
}

// dump() that cannot throw on text: strings made valid first, replacement as the last resort; DEL
// and C1 controls escaped too (jsonControlsEscaped), since the JSON may go to a terminal.
template <class Json> std::string dumpJson(Json j, int indent = -1)
{
    makeValidUtf8(j);
    return jsonControlsEscaped(j.dump(indent, ' ', false, Json::error_handler_t::replace));
}

// How deep a JSON document read from a file may nest. nlohmann parses iteratively, but copying a
// value, dump() and every walk over one recurse once per level, so a 100k-deep index overflowed
// the stack; Python's json gives up near 1000 levels too (RecursionError), so no loader reads a
// deeper file. The pickle's nesting is bounded the same way (checkpoint/index.h).
inline constexpr std::size_t kMaxJsonDepth = 1000;

// The deepest nesting of arrays and objects in `text` (brackets inside strings not counted).
[[nodiscard]] inline std::size_t jsonNestingDepth(std::string_view text)
{
    std::size_t depth = 0;
    std::size_t deepest = 0;
    bool inString = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (inString) {
            if (c == '\\') {
                ++i;
            } else if (c == '"') {
                inString = false;
            }
        } else if (c == '"') {
            inString = true;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

// Python's json, which writes and reads every index and config.json, also reads `NaN`, `Infinity`,
// `-Infinity` and numbers beyond a double (`1e400` is inf); nlohmann refuses them all, which made a
// whole set "not valid JSON" over one metadata value the loaders ignore. Each such token outside a
// string becomes a JSON string of its own text, so a reader sees what was written and says so.
// Returns nullopt when the text has none (the usual case: nothing copied).
[[nodiscard]] inline std::optional<std::string> pythonJsonNumbersAsStrings(std::string_view text)
{
    std::optional<std::string> out;
    std::size_t copied = 0;
    auto isNumberChar = [](char c) {
        return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
    };
    for (std::size_t i = 0; i < text.size();) {
        const char c = text[i];
        if (c == '"') {
            for (++i; i < text.size() && text[i] != '"'; ++i) {
                i += text[i] == '\\' ? 1 : 0;
            }
            ++i;
            continue;
        }
        std::size_t end = i;
        bool replace = false;
        if (c == '-' || (c >= '0' && c <= '9')) {
            while (end < text.size() && isNumberChar(text[end])) {
                ++end;
            }
            const std::string token(text.substr(i, end - i));
            char* stop = nullptr;
            const double v = std::strtod(token.c_str(), &stop);
            replace = stop == token.c_str() + token.size() && !std::isfinite(v);
            if (token == "-" && text.substr(i).starts_with("-Infinity")) {
                end = i + 9;
                replace = true;
            }
        } else if (text.substr(i).starts_with("NaN")) {
            end = i + 3;
            replace = true;
        } else if (text.substr(i).starts_with("Infinity")) {
            end = i + 8;
            replace = true;
        }
        if (!replace) {
            i = std::max(end, i + 1);
            continue;
        }
        if (!out) {
            out.emplace();
            out->reserve(text.size() + 16);
        }
        out->append(text.substr(copied, i - copied)).append("\"").append(text.substr(i, end - i)).append("\"");
        copied = end;
        i = end;
    }
    if (out) {
        out->append(text.substr(copied));
    }
    return out;
}

// `text` parsed, never throwing: Corrupt when it is not JSON, Limit when it nests deeper than
// kMaxJsonDepth. `what` names the document in the message ("the index"). Python's number tokens
// that JSON lacks are read as strings (pythonJsonNumbersAsStrings).
template <class Json>
Expected<Json> parseJsonText(std::string_view text, const std::string& what,
                             const typename Json::parser_callback_t& callback = nullptr)
{
    if (jsonNestingDepth(text) > kMaxJsonDepth) {
        return makeError(ErrorCode::Limit, what + " nests deeper than " + std::to_string(kMaxJsonDepth) +
                                               " levels, which no JSON reader of checkpoints (Python's json "
                                               "included) reads");
    }
    const auto python = pythonJsonNumbersAsStrings(text);
    auto j = Json::parse(python ? std::string_view(*python) : text, callback, false);
    if (j.is_discarded()) {
        return makeError(ErrorCode::Corrupt, what + " is not valid JSON");
    }
    return j;
}

}  // namespace ckpt
