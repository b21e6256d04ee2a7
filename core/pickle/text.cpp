#include "pickle/text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <vector>

namespace ckpt::pickle::detail {

std::string normalizeLong(std::string_view le)
{
    std::string s(le);
    while (s.size() > 1) {
        const auto last = static_cast<unsigned char>(s[s.size() - 1]);
        const auto prev = static_cast<unsigned char>(s[s.size() - 2]);
        if ((last == 0x00 && (prev & 0x80U) == 0) || (last == 0xFF && (prev & 0x80U) != 0)) {
            s.pop_back();
        } else {
            break;
        }
    }
    return s;
}

bool decimalToLong(std::string_view text, std::string& le, std::string& why)
{
    bool negative = false;
    if (!text.empty() && (text.front() == '-' || text.front() == '+')) {
        negative = text.front() == '-';
        text.remove_prefix(1);
    }
    if (text.empty()) {
        why = "empty integer literal";
        return false;
    }
    if (text.size() > 4300) {
        why = "integer literal with " + std::to_string(text.size()) + " digits exceeds the 4300 digits Python converts";
        return false;
    }
    std::vector<std::uint8_t> mag;  // little-endian magnitude
    for (char c : text) {
        if (c < '0' || c > '9') {
            why = "invalid integer literal";
            return false;
        }
        auto carry = static_cast<unsigned>(c - '0');
        for (auto& b : mag) {
            const unsigned x = b * 10U + carry;
            b = static_cast<std::uint8_t>(x & 0xFFU);
            carry = x >> 8;
        }
        while (carry != 0) {
            mag.push_back(static_cast<std::uint8_t>(carry & 0xFFU));
            carry >>= 8;
        }
    }
    mag.push_back(0);  // room for the sign bit
    if (negative) {
        unsigned carry = 1;
        for (auto& b : mag) {
            const unsigned x = static_cast<std::uint8_t>(~b) + carry;
            b = static_cast<std::uint8_t>(x & 0xFFU);
            carry = x >> 8;
        }
    }
    le.assign(mag.begin(), mag.end());
    le = normalizeLong(le);
    return true;
}

void appendUtf8(std::string& out, std::uint32_t cp)
{
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {  // surrogates too, as CPython's 'surrogatepass' writes them
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool nextCodePoint(std::string_view s, std::size_t& i, std::uint32_t& cp)
{
    const auto b0 = static_cast<unsigned char>(s[i]);
    std::size_t len = 0;
    if (b0 < 0x80) {
        cp = b0;
        len = 1;
    } else if ((b0 & 0xE0U) == 0xC0U) {
        cp = b0 & 0x1FU;
        len = 2;
    } else if ((b0 & 0xF0U) == 0xE0U) {
        cp = b0 & 0x0FU;
        len = 3;
    } else if ((b0 & 0xF8U) == 0xF0U) {
        cp = b0 & 0x07U;
        len = 4;
    } else {
        return false;
    }
    if (i + len > s.size()) {
        return false;
    }
    for (std::size_t k = 1; k < len; ++k) {
        const auto b = static_cast<unsigned char>(s[i + k]);
        if ((b & 0xC0U) != 0x80U) {
            return false;
        }
        cp = (cp << 6) | (b & 0x3FU);
    }
    static constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF) {
        return false;  // overlong or out of range
    }
    i += len;
    return true;
}

namespace {

int hexValue(char c)
{
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
}

bool hexRun(std::string_view s, std::size_t at, std::size_t n, std::uint32_t& out)
{
    if (at + n > s.size()) {
        return false;
    }
    out = 0;
    for (std::size_t k = 0; k < n; ++k) {
        const int h = hexValue(s[at + k]);
        if (h < 0) {
            return false;
        }
        out = (out << 4) | static_cast<std::uint32_t>(h);
    }
    return true;
}

}  // namespace

bool isValidUtf8(std::string_view s)
{
    std::size_t i = 0;
    std::uint32_t cp = 0;
    while (i < s.size()) {
        if (static_cast<unsigned char>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        if (!nextCodePoint(s, i, cp) || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
    }
    return true;
}

std::string decodeByteString(std::string_view raw)
{
    if (isValidUtf8(raw)) {
        return std::string(raw);
    }
    std::string out;
    out.reserve(raw.size() * 2);
    for (char c : raw) {
        appendUtf8(out, static_cast<unsigned char>(c));
    }
    return out;
}

bool decodeRawUnicodeEscape(std::string_view in, std::string& utf8)
{
    utf8.clear();
    utf8.reserve(in.size());
    std::size_t i = 0;
    while (i < in.size()) {
        const char c = in[i];
        if (c != '\\') {
            appendUtf8(utf8, static_cast<unsigned char>(c));  // each byte is a latin-1 code point
            ++i;
            continue;
        }
        std::size_t run = 0;
        while (i + run < in.size() && in[i + run] == '\\') {
            ++run;
        }
        const std::size_t after = i + run;
        const bool escape = run % 2 == 1 && after < in.size() && (in[after] == 'u' || in[after] == 'U');
        utf8.append(escape ? run - 1 : run, '\\');
        i = after;
        if (escape) {
            const std::size_t n = in[after] == 'u' ? 4 : 8;
            std::uint32_t cp = 0;
            if (!hexRun(in, after + 1, n, cp) || cp > 0x10FFFF) {
                return false;
            }
            appendUtf8(utf8, cp);
            i = after + 1 + n;
        }
    }
    return true;
}

bool decodeEscapes(std::string_view in, std::string& raw)
{
    raw.clear();
    raw.reserve(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] != '\\') {
            raw.push_back(in[i]);
            continue;
        }
        if (++i >= in.size()) {
            return false;  // Python: "Trailing \ in string"
        }
        const char e = in[i];
        switch (e) {
        case '\n':
            break;
        case '\\':
            raw.push_back('\\');
            break;
        case '\'':
            raw.push_back('\'');
            break;
        case '"':
            raw.push_back('"');
            break;
        case 'a':
            raw.push_back('\a');
            break;
        case 'b':
            raw.push_back('\b');
            break;
        case 'f':
            raw.push_back('\f');
            break;
        case 'n':
            raw.push_back('\n');
            break;
        case 'r':
            raw.push_back('\r');
            break;
        case 't':
            raw.push_back('\t');
            break;
        case 'v':
            raw.push_back('\v');
            break;
        case 'x': {
            std::uint32_t v = 0;
            if (!hexRun(in, i + 1, 2, v)) {
                return false;
            }
            raw.push_back(static_cast<char>(v));
            i += 2;
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                auto v = static_cast<unsigned>(e - '0');
                for (int k = 0; k < 2 && i + 1 < in.size() && in[i + 1] >= '0' && in[i + 1] <= '7'; ++k) {
                    v = v * 8 + static_cast<unsigned>(in[++i] - '0');
                }
                raw.push_back(static_cast<char>(v & 0xFFU));
            } else {
                raw.push_back('\\');
                raw.push_back(e);
            }
        }
    }
    return true;
}

bool parsePythonFloat(std::string_view text, double& out)
{
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) {
        text.remove_suffix(1);
    }
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())) != 0) {
        text.remove_prefix(1);
    }
    bool negative = false;
    if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
        negative = text.front() == '-';
        text.remove_prefix(1);
    }
    if (text.empty() || text.front() == '+' || text.front() == '-') {
        return false;
    }
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (ec == std::errc::result_out_of_range) {
        return false;
    }
    if (ec != std::errc() || p != text.data() + text.size()) {
        return false;
    }
    if (negative) {
        out = -out;
    }
    return true;
}

bool encodeText(std::string_view utf8, std::string_view encoding, std::string& raw)
{
    std::string enc;
    for (char c : encoding) {
        enc.push_back(c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
    if (enc == "utf-8" || enc == "utf8") {
        raw.assign(utf8);
        return true;
    }
    std::uint32_t limit = 0;
    if (enc == "latin1" || enc == "latin-1" || enc == "iso-8859-1" || enc == "iso8859-1" || enc == "l1") {
        limit = 0x100;
    } else if (enc == "ascii" || enc == "us-ascii") {
        limit = 0x80;
    } else {
        return false;
    }
    raw.clear();
    raw.reserve(utf8.size());
    std::size_t i = 0;
    std::uint32_t cp = 0;
    while (i < utf8.size()) {
        if (!nextCodePoint(utf8, i, cp) || cp >= limit) {
            return false;
        }
        raw.push_back(static_cast<char>(cp));
    }
    return true;
}

}  // namespace ckpt::pickle::detail
