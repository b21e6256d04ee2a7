// JSON text that is always valid: every string and key made valid UTF-8 (invalid bytes as `\xNN`,
// printable.h) before nlohmann serialises it, since its dump() throws on invalid UTF-8 and a
// checkpoint's keys are whatever bytes the file holds.
#pragma once

#include "util/printable.h"

#include <nlohmann/json.hpp>
#include <string>

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

}  // namespace ckpt
