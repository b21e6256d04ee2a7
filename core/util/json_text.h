// JSON text that is always valid: every string and key made valid UTF-8 (invalid bytes as `\xNN`,
// printable.h) before nlohmann serialises it, since its dump() throws on invalid UTF-8 and a
// checkpoint's keys are whatever bytes the file holds.
#pragma once

#include "util/error.h"
#include "util/printable.h"

#include <algorithm>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ckpt {

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

// dump() that cannot throw on text: strings made valid first, replacement as the last resort.
template <class Json> std::string dumpJson(Json j, int indent = -1)
{
    makeValidUtf8(j);
    return j.dump(indent, ' ', false, Json::error_handler_t::replace);
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

// `text` parsed, never throwing: Corrupt when it is not JSON, Limit when it nests deeper than
// kMaxJsonDepth. `what` names the document in the message ("the index").
template <class Json> Expected<Json> parseJsonText(std::string_view text, const std::string& what)
{
    if (jsonNestingDepth(text) > kMaxJsonDepth) {
        return makeError(ErrorCode::Limit, what + " nests deeper than " + std::to_string(kMaxJsonDepth) +
                                               " levels, which no JSON reader of checkpoints (Python's json "
                                               "included) reads");
    }
    auto j = Json::parse(text, nullptr, false);
    if (j.is_discarded()) {
        return makeError(ErrorCode::Corrupt, what + " is not valid JSON");
    }
    return j;
}

}  // namespace ckpt
