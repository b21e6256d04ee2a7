// Text and integer codecs of the pickle format (Python's escape rules, raw-unicode-escape,
// latin-1, two's complement longs). Private to core/pickle.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ckpt::pickle::detail {

// Shortest little-endian two's complement form (what CPython's encode_long writes).
std::string normalizeLong(std::string_view le);

// Decimal text (optional sign) -> little-endian two's complement; false with `why` set when the
// text is not a number or has more digits than Python itself converts (4300).
bool decimalToLong(std::string_view text, std::string& le, std::string& why);

// A Python-2 byte string as torch.load(encoding='latin1') reads it when it is not UTF-8 (kept
// as is when it is).
std::string decodeByteString(std::string_view raw);

bool decodeRawUnicodeEscape(std::string_view in, std::string& utf8);
bool decodeEscapes(std::string_view in, std::string& raw);  // codecs.escape_decode
bool parsePythonFloat(std::string_view text, double& out);

// `_codecs.encode(text, encoding)` for latin-1, ASCII and UTF-8; false for anything else or for
// characters the encoding cannot hold (Python would raise there).
bool encodeText(std::string_view utf8, std::string_view encoding, std::string& raw);

bool isValidUtf8(std::string_view s);
// Next code point of UTF-8 text at s[i], advancing i (surrogates accepted); false on malformed
// input.
bool nextCodePoint(std::string_view s, std::size_t& i, std::uint32_t& cp);
void appendUtf8(std::string& out, std::uint32_t cp);

}  // namespace ckpt::pickle::detail
