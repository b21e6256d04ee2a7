// Text taken from a file, made safe to print. Keys, global names and record names come from the
// checkpoint, so they can hold bytes that are not UTF-8 (which makes JSON invalid and nlohmann
// throw) or terminal control sequences (ESC[J erases the finding printed above them). Invalid bytes
// become `\xNN`, the way Python's backslashreplace shows them.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ckpt {

[[nodiscard]] bool isValidUtf8(std::string_view s);

// Valid UTF-8 is returned unchanged; every byte that is not part of a valid sequence becomes the
// four characters `\xNN`. For JSON, which escapes control characters itself.
[[nodiscard]] std::string validUtf8(std::string_view s);

// For terminals: validUtf8, and every control character (C0, DEL, C1) escaped as `\n`, `\r`, `\t`,
// `\xNN` or `\u0085`, so a name prints as one harmless line.
[[nodiscard]] std::string displayText(std::string_view s);

// For serialised JSON bound for a terminal: JSON escapes only the C0 controls, so DEL and the C1
// controls (U+0080..U+009F; U+009B is CSI) printed raw; each becomes its `\u00XX` escape, which a
// JSON reader reads back as the same character. `json` is dumpJson's valid UTF-8 output, where
// such characters can only sit inside strings.
[[nodiscard]] std::string jsonControlsEscaped(std::string json);

// `text` appended to `out` as a quoted JSON string, the way a JSON document streamed without
// nlohmann is written (inspect --json): validUtf8, then `"`, `\` and every control character (C0,
// DEL, C1) escaped.
void appendJsonString(std::string& out, std::string_view text);

// Lower-case hex of raw bytes, and back (nullopt for an odd length or a non-hex character): how
// text that must keep its exact bytes (a file name that is not UTF-8) crosses a JSON protocol.
[[nodiscard]] std::string toHex(std::string_view bytes);
[[nodiscard]] std::optional<std::string> fromHex(std::string_view hex);

}  // namespace ckpt
