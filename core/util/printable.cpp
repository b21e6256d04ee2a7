#include "util/printable.h"

#include <cstdint>

namespace ckpt {
namespace {

constexpr char kHex[] = "0123456789abcdef";

// Length of the valid UTF-8 sequence at s[i] (RFC 3629: no overlongs, no surrogates, at most
// U+10FFFF), or 0 when the byte there does not start one.
std::size_t sequenceLength(std::string_view s, std::size_t i)
{
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned c = b(i);
    if (c < 0x80) {
        return 1;
    }
    std::size_t n = 0;
    unsigned lo = 0x80;
    unsigned hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 0;
    }
    if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) {
        return 0;
    }
    for (std::size_t k = 2; k < n; ++k) {
        if ((b(i + k) & 0xC0U) != 0x80U) {
            return 0;
        }
    }
    return n;
}

void appendByteEscape(std::string& out, unsigned char c)
{
    out += "\\x";
    out += kHex[c >> 4U];
    out += kHex[c & 15U];
}

template <bool Controls> std::string escaped(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        const std::size_t n = sequenceLength(s, i);
        const auto c = static_cast<unsigned char>(s[i]);
        if (n == 0) {
            appendByteEscape(out, c);
            ++i;
            continue;
        }
        if constexpr (Controls) {
            if (n == 1 && (c < 0x20 || c == 0x7F)) {
                switch (c) {
                case '\n':
                    out += "\\n";
                    break;
                case '\r':
                    out += "\\r";
                    break;
                case '\t':
                    out += "\\t";
                    break;
                default:
                    appendByteEscape(out, c);
                }
                ++i;
                continue;
            }
            // C1 controls (U+0080..U+009F, encoded C2 80..C2 9F): U+009B is CSI on many terminals.
            if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {
                const auto cp = static_cast<unsigned char>(s[i + 1]);
                out += "\\u00";
                out += kHex[cp >> 4U];
                out += kHex[cp & 15U];
                i += 2;
                continue;
            }
        }
        out.append(s.substr(i, n));
        i += n;
    }
    return out;
}

template <bool Controls> bool clean(std::string_view s)
{
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7F) {
            ++i;
            continue;
        }
        const std::size_t n = sequenceLength(s, i);
        if (n == 0) {
            return false;
        }
        if constexpr (Controls) {
            if (n == 1 || (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0)) {
                return false;
            }
        }
        i += n;
    }
    return true;
}

}  // namespace

bool isValidUtf8(std::string_view s)
{
    return clean<false>(s);
}

std::string validUtf8(std::string_view s)
{
    return clean<false>(s) ? std::string(s) : escaped<false>(s);
}

std::string displayText(std::string_view s)
{
    return clean<true>(s) ? std::string(s) : escaped<true>(s);
}

std::string toHex(std::string_view bytes)
{
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const char c : bytes) {
        const auto u = static_cast<unsigned char>(c);
        out += kHex[u >> 4U];
        out += kHex[u & 15U];
    }
    return out;
}

std::optional<std::string> fromHex(std::string_view hex)
{
    if (hex.size() % 2 != 0) {
        return std::nullopt;
    }
    auto digit = [](char c) -> int {
        if (c >= '0' && c <= '9') {
            return c - '0';
        }
        if (c >= 'a' && c <= 'f') {
            return c - 'a' + 10;
        }
        if (c >= 'A' && c <= 'F') {
            return c - 'A' + 10;
        }
        return -1;
    };
    std::string out;
    out.reserve(hex.size() / 2);
    for (std::size_t i = 0; i < hex.size(); i += 2) {
        const int hi = digit(hex[i]);
        const int lo = digit(hex[i + 1]);
        if (hi < 0 || lo < 0) {
            return std::nullopt;
        }
        out += static_cast<char>(hi * 16 + lo);
    }
    return out;
}

void appendJsonString(std::string& out, std::string_view text)
{
    std::string fixed;
    if (!isValidUtf8(text)) {
        fixed = validUtf8(text);
    }
    const std::string_view s = fixed.empty() ? text : fixed;
    out.push_back('"');
    std::size_t plain = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char ch = s[i];
        const auto u = static_cast<unsigned char>(ch);
        const bool c1 = u == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
                        static_cast<unsigned char>(s[i + 1]) < 0xA0;
        if (u >= 0x20 && u != 0x7F && ch != '"' && ch != '\\' && !c1) {
            continue;
        }
        out.append(s.data() + plain, i - plain);
        plain = i + 1;
        switch (ch) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\t':
            out += "\\t";
            break;
        case '\r':
            out += "\\r";
            break;
        default: {
            const auto cp = c1 ? static_cast<unsigned char>(s[i + 1]) : u;
            out += "\\u00";
            out += kHex[cp >> 4U];
            out += kHex[cp & 15U];
            plain = i + (c1 ? 2 : 1);
            i += c1 ? 1 : 0;
        }
        }
    }
    out.append(s.data() + plain, s.size() - plain);
    out.push_back('"');
}

std::string jsonControlsEscaped(std::string json)
{
    auto isControl = [&](std::size_t i) {
        const auto c = static_cast<unsigned char>(json[i]);
        const auto next = i + 1 < json.size() ? static_cast<unsigned char>(json[i + 1]) : 0U;
        return c == 0x7F || (c == 0xC2 && next >= 0x80 && next < 0xA0);
    };
    std::size_t i = 0;
    while (i < json.size() && !isControl(i)) {
        ++i;
    }
    if (i == json.size()) {
        return json;
    }
    std::string out = json.substr(0, i);
    out.reserve(json.size() + 16);
    while (i < json.size()) {
        if (!isControl(i)) {
            out += json[i++];
            continue;
        }
        const bool del = json[i] == '\x7F';
        const auto cp = del ? 0x7FU : static_cast<unsigned char>(json[i + 1]);
        out += "\\u00";
        out += kHex[cp >> 4U];
        out += kHex[cp & 15U];
        i += del ? 1 : 2;
    }
    return out;
}

}  // namespace ckpt
