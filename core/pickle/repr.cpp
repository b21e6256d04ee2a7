// Python's repr of values, for display: what `print(torch.load(f))` would show, bounded in length
// and depth however large, shared or cyclic the value graph is.
#include "pickle/text.h"
#include "pickle/value.h"
#include "util/shape_text.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

namespace ckpt::pickle {

namespace {

// Decimal text of a little-endian two's complement integer. Long ones are summarised: a
// display never needs a 10 000-digit number, and the conversion is quadratic.
std::string bigIntText(std::string_view le)
{
    if (le.empty()) {
        return "0";
    }
    if (le.size() > 64) {
        return "<" + std::to_string(le.size() * 8) + "-bit int>";
    }
    std::vector<std::uint8_t> mag(le.begin(), le.end());
    const bool negative = (mag.back() & 0x80U) != 0;
    if (negative) {  // magnitude = two's complement negation
        unsigned carry = 1;
        for (auto& b : mag) {
            const unsigned x = static_cast<std::uint8_t>(~b) + carry;
            b = static_cast<std::uint8_t>(x & 0xFFU);
            carry = x >> 8;
        }
    }
    std::string digits;
    bool nonzero = true;
    while (nonzero) {
        unsigned rem = 0;
        nonzero = false;
        for (std::size_t i = mag.size(); i-- > 0;) {
            const unsigned cur = (rem << 8) | mag[i];
            mag[i] = static_cast<std::uint8_t>(cur / 10);
            rem = cur % 10;
            nonzero = nonzero || mag[i] != 0;
        }
        digits.push_back(static_cast<char>('0' + rem));
    }
    if (negative) {
        digits.push_back('-');
    }
    return {digits.rbegin(), digits.rend()};
}

// Python's float repr: shortest round-trip digits, exponent form below 1e-4 and from 1e16.
std::string floatText(double d)
{
    if (d != d) {
        return "nan";
    }
    if (d == std::numeric_limits<double>::infinity()) {
        return "inf";
    }
    if (d == -std::numeric_limits<double>::infinity()) {
        return "-inf";
    }
    std::array<char, 64> buf{};
    auto res = std::to_chars(buf.data(), buf.data() + buf.size(), d, std::chars_format::scientific);
    std::string sci(buf.data(), res.ptr);
    const auto e = sci.find('e');
    std::string mant = sci.substr(0, e);
    const int exp = std::stoi(sci.substr(e + 1));
    std::string sign;
    if (!mant.empty() && mant[0] == '-') {
        sign = "-";
        mant.erase(0, 1);
    }
    std::string digits;
    for (char c : mant) {
        if (c != '.') {
            digits.push_back(c);
        }
    }
    if (exp < -4 || exp >= 16) {
        std::string out = sign + digits.substr(0, 1);
        if (digits.size() > 1) {
            out += "." + digits.substr(1);
        }
        out += exp < 0 ? "e-" : "e+";
        const int ax = exp < 0 ? -exp : exp;
        if (ax < 10) {
            out += "0";
        }
        return out + std::to_string(ax);
    }
    if (exp < 0) {
        return sign + "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    }
    const auto intDigits = static_cast<std::size_t>(exp) + 1;
    if (digits.size() <= intDigits) {
        return sign + digits + std::string(intDigits - digits.size(), '0') + ".0";
    }
    return sign + digits.substr(0, intDigits) + "." + digits.substr(intDigits);
}

// A float of a narrower type at its own precision, as numpy prints it: np.float32(0.7) is `0.7`,
// not the `0.699999988079071` of the double it widens to.
std::string floatText(double d, int bytes)
{
    if (bytes >= 8 || d != d || std::abs(d) > std::numeric_limits<float>::max()) {
        return floatText(d);
    }
    std::array<char, 64> buf{};
    const auto res = std::to_chars(buf.data(), buf.data() + buf.size(), static_cast<float>(d));
    double shortest = d;
    std::from_chars(buf.data(), res.ptr, shortest);
    return floatText(shortest);
}

// A numpy scalar as numpy's str() shows it: the number, not `scalar(dtype, raw bytes)`.
std::string numpyItemText(const NumpyItem& item)
{
    switch (item.type) {
    case NumpyItem::Type::Bool:
        return item.boolean ? "True" : "False";
    case NumpyItem::Type::Int:
        return std::to_string(item.integer);
    case NumpyItem::Type::Float:
        return floatText(item.real, item.floatBytes);
    case NumpyItem::Type::Complex: {
        // Python's complex repr: parts without a trailing ".0", `2j` alone when the real part is +0.
        auto part = [&](double d) {
            std::string t = floatText(d, item.floatBytes);
            return t.ends_with(".0") ? t.substr(0, t.size() - 2) : t;
        };
        std::string im = part(item.imag) + "j";
        if (item.real == 0 && !std::signbit(item.real)) {
            return im;
        }
        return "(" + part(item.real) + (im.starts_with('-') ? "" : "+") + im + ")";
    }
    }
    return {};
}

// pathlib's PurePath.__reduce__ pickles the class and its parts (`('/', 'runs', 'x')`); the path is
// those parts joined as PurePath(*parts) joins them, shown as Python's repr shows it.
std::optional<std::string> pathText(const Arena& a, const ObjectInfo& o)
{
    const bool posix =
        o.callable.module == "pathlib" && (o.callable.name == "PosixPath" || o.callable.name == "PurePosixPath");
    const bool windows =
        o.callable.module == "pathlib" && (o.callable.name == "WindowsPath" || o.callable.name == "PureWindowsPath");
    if ((!posix && !windows) || !o.args.valid() || o.args.v >= a.size() || a[o.args].kind != Kind::Tuple) {
        return std::nullopt;
    }
    const char sep = posix ? '/' : '\\';
    std::string path;
    for (ValueId part : a[o.args].items) {
        if (!part.valid() || part.v >= a.size() || a[part].kind != Kind::Str) {
            return std::nullopt;
        }
        if (!path.empty() && path.back() != sep) {
            path += sep;
        }
        path += a[part].text;
    }
    return path.empty() ? std::string(".") : path;
}

void appendHexByte(std::string& out, unsigned char c)
{
    static constexpr char kHex[] = "0123456789abcdef";
    out += "\\x";
    out.push_back(kHex[c >> 4U]);
    out.push_back(kHex[c & 0xFU]);
}

// Python's repr of str ('...') and bytes (b'...'): the same escapes, except that bytes also
// escape everything above 0x7e, while a str passes UTF-8 through (Python prints the characters).
// A str's bytes that are not UTF-8 (a corrupt file) show as `\xNN`, so the repr always is.
void appendQuoted(std::string& out, std::string_view s, std::size_t limit, bool asBytes)
{
    out += asBytes ? "b'" : "'";
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (out.size() > limit) {
            return;
        }
        const char ch = s[i];
        const auto c = static_cast<unsigned char>(ch);
        if (!asBytes && c >= 0x80) {
            std::size_t next = i;
            std::uint32_t cp = 0;
            if (detail::nextCodePoint(s, next, cp) && (cp < 0xD800 || cp > 0xDFFF)) {
                out.append(s.substr(i, next - i));
                i = next - 1;
            } else {
                appendHexByte(out, c);
            }
            continue;
        }
        switch (c) {
        case '\\':
            out += "\\\\";
            break;
        case '\'':
            out += "\\'";
            break;
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
            if (c < 0x20 || c == 0x7f || (asBytes && c > 0x7f)) {
                appendHexByte(out, c);
            } else {
                out.push_back(ch);
            }
        }
    }
    out.push_back('\'');
}

void appendQuotedStr(std::string& out, std::string_view s, std::size_t limit)
{
    appendQuoted(out, s, limit, false);
}

void appendQuotedBytes(std::string& out, std::string_view s, std::size_t limit)
{
    appendQuoted(out, s, limit, true);
}

// Renders into one string and stops as soon as it is longer than `limit`: the output and the
// work are both bounded, however large, deep, shared or cyclic the value graph is.
class Repr {
public:
    Repr(const Arena& a, std::size_t limit) : a_(a), limit_(limit) {}

    std::string out;

    [[nodiscard]] bool full() const { return out.size() > limit_; }

    void value(ValueId id, int depth)
    {
        if (full()) {
            return;
        }
        if (!id.valid() || id.v >= a_.size()) {
            out += "<invalid>";
            return;
        }
        if (depth > kMaxDepth) {
            out += "...";
            return;
        }
        const Value& v = a_[id];
        switch (v.kind) {
        case Kind::None:
            out += "None";
            break;
        case Kind::Bool:
            out += v.flag ? "True" : "False";
            break;
        case Kind::Int:
            out += std::to_string(v.i);
            break;
        case Kind::BigInt:
            out += bigIntText(v.text);
            break;
        case Kind::Float:
            out += floatText(v.f);
            break;
        case Kind::Str:
            appendQuotedStr(out, v.text, limit_);
            break;
        case Kind::Bytes:
            if (v.flag) {
                out += "bytearray(";
                appendQuotedBytes(out, v.text, limit_);
                out += ")";
            } else {
                appendQuotedBytes(out, v.text, limit_);
            }
            break;
        case Kind::Tuple:
            out += "(";
            items(v.items, depth);
            out += v.items.size() == 1 ? ",)" : ")";
            break;
        case Kind::List:
            out += "[";
            items(v.items, depth);
            out += "]";
            break;
        case Kind::Dict:
            if (v.flag) {
                out += "OrderedDict(";
            }
            out += "{";
            pairs(v.items, depth, ": ", true);
            out += "}";
            if (v.flag) {
                out += ")";
            }
            break;
        case Kind::Set:
            if (v.items.empty()) {
                out += v.flag ? "frozenset()" : "set()";
                break;
            }
            out += v.flag ? "frozenset({" : "{";
            items(v.items, depth);
            out += v.flag ? "})" : "}";
            break;
        case Kind::Global:
            out += globalText(v);
            break;
        case Kind::DType:
            out += "torch.";
            out += dtypeName(static_cast<ckpt::DType>(v.i));
            break;
        case Kind::Device:
            out += "device(type=";
            appendQuotedStr(out, v.text, limit_);
            if (v.i >= 0) {
                out += ", index=" + std::to_string(v.i);
            }
            out += ")";
            break;
        case Kind::Size:
            out += "torch.Size([";
            items(v.items, depth);
            out += "])";
            break;
        case Kind::Storage:
            storage(v);
            break;
        case Kind::PersistentId:
            out += "persistent_id(";
            items(v.items, depth);
            out += ")";
            break;
        case Kind::Tensor:
            tensor(v);
            break;
        case Kind::Object:
            object(id, v, depth);
            break;
        }
    }

private:
    static constexpr int kMaxDepth = 6;

    void items(std::span<const ValueId> ids, int depth)
    {
        for (std::size_t n = 0; n < ids.size() && !full(); ++n) {
            if (n != 0) {
                out += ", ";
            }
            value(ids[n], depth + 1);
        }
    }

    void pairs(std::span<const ValueId> ids, int depth, std::string_view sep, bool reprKeys)
    {
        for (std::size_t n = 0; n + 1 < ids.size() && !full(); n += 2) {
            if (n != 0) {
                out += ", ";
            }
            if (reprKeys) {
                value(ids[n], depth + 1);
            } else {
                out += a_[ids[n]].text;
            }
            out += sep;
            value(ids[n + 1], depth + 1);
        }
    }

    std::string globalText(const Value& v) const
    {
        if (v.i < 0 || static_cast<std::size_t>(v.i) >= a_.globals.size()) {
            return "<global?>";
        }
        return a_.globals[static_cast<std::size_t>(v.i)].qualified();
    }

    void storage(const Value& v)
    {
        if (v.i < 0 || static_cast<std::size_t>(v.i) >= a_.storages.size()) {
            out += "<storage?>";
            return;
        }
        const StorageRef& s = a_.storages[static_cast<std::size_t>(v.i)];
        out += "torch." + (s.className.empty() ? std::string("Storage") : s.className.str()) + "(key=";
        appendQuotedStr(out, s.key, limit_);
        out += ", location=";
        appendQuotedStr(out, s.location, limit_);
        out += ", numel=" + std::to_string(s.numel) + ")";
    }

    void tensor(const Value& v)
    {
        if (v.i < 0 || static_cast<std::size_t>(v.i) >= a_.tensors.size()) {
            out += "<tensor?>";
            return;
        }
        const TensorInfo& t = a_.tensors[static_cast<std::size_t>(v.i)];
        out += t.isParameter ? "Parameter(" : "tensor(";
        out += dtypeName(t.dtype);
        out += ", [";
        for (std::size_t n = 0; n < t.shape.size() && !full(); ++n) {
            out += (n != 0 ? ", " : "") + std::to_string(t.shape[n]);
        }
        out += "]";
        std::string device = t.device;
        if (device.empty() && t.storage.valid() && t.storage.v < a_.size()) {
            const Value& s = a_[t.storage];
            if (s.kind == Kind::Storage && static_cast<std::size_t>(s.i) < a_.storages.size()) {
                device = a_.storages[static_cast<std::size_t>(s.i)].location;
            }
        }
        if (!device.empty()) {
            out += ", " + device;
        }
        out += ")";
    }

    void object(ValueId id, const Value& v, int depth)
    {
        if (v.i < 0 || static_cast<std::size_t>(v.i) >= a_.objects.size()) {
            out += "<object?>";
            return;
        }
        const ObjectInfo& o = a_.objects[static_cast<std::size_t>(v.i)];
        if (valueLike(id, o)) {
            return;
        }
        out += o.callable.qualified();
        out += "(";
        // Objects restored from an attribute dict read best as keyword arguments, like
        // argparse.Namespace's own repr; everything else shows its constructor arguments.
        const bool stateIsAttrs =
            o.state.valid() && o.state.v < a_.size() && a_[o.state].kind == Kind::Dict && allStrKeys(a_[o.state].items);
        if (stateIsAttrs) {
            pairs(a_[o.state].items, depth, "=", false);
        } else if (o.args.valid() && o.args.v < a_.size() && a_[o.args].kind == Kind::Tuple) {
            items(a_[o.args].items, depth);
        }
        out += ")";
    }

    // Objects that stand for one value show that value, as Python prints them: a numpy scalar its
    // number, a numpy array its dtype and shape (`ndarray <u4 [624]`, as the plan names it), a path
    // `PosixPath('/runs/x')`. False (nothing written) for every other object.
    bool valueLike(ValueId id, const ObjectInfo& o)
    {
        NumpyInfo np;
        if (decodeNumpy(a_, id, np)) {
            if (const auto item = numpyScalarItem(np)) {
                out += numpyItemText(*item);
                return true;
            }
            if (!np.isScalar) {
                out += "ndarray " + np.dtype + " " + shapeText(np.shape);
                return true;
            }
            return false;
        }
        if (const auto path = pathText(a_, o)) {
            out += o.callable.name;
            out += "(";
            appendQuotedStr(out, *path, limit_);
            out += ")";
            return true;
        }
        return false;
    }

    bool allStrKeys(std::span<const ValueId> ids) const
    {
        for (std::size_t n = 0; n < ids.size(); n += 2) {
            if (a_[ids[n]].kind != Kind::Str) {
                return false;
            }
        }
        return true;
    }

    const Arena& a_;
    std::size_t limit_;
};

std::string elided(const Value& v)
{
    const std::string count =
        " (" + std::to_string(v.kind == Kind::Dict ? v.items.size() / 2 : v.items.size()) + " items)";
    switch (v.kind) {
    case Kind::List:
        return "[...]" + count;
    case Kind::Tuple:
        return "(...)" + count;
    case Kind::Dict:
        return (v.flag ? "OrderedDict{...}" : "{...}") + count;
    case Kind::Set:
        return (v.flag ? "frozenset{...}" : "{...}") + count;
    case Kind::Size:
        return "torch.Size([...])" + count;
    default:
        return {};
    }
}

}  // namespace

std::string shortRepr(const Arena& a, ValueId id, std::size_t maxLen)
{
    maxLen = std::max<std::size_t>(maxLen, 8);
    Repr r(a, maxLen);
    r.value(id, 0);
    if (!r.full()) {
        return std::move(r.out);
    }
    if (id.valid() && id.v < a.size()) {
        std::string e = elided(a[id]);
        if (!e.empty()) {
            return e;
        }
    }
    r.out.resize(maxLen - 3);
    // Never cut inside a UTF-8 sequence.
    while (!r.out.empty() && (static_cast<unsigned char>(r.out.back()) & 0xC0U) == 0x80U) {
        r.out.pop_back();
    }
    if (!r.out.empty() && static_cast<unsigned char>(r.out.back()) >= 0xC0U) {
        r.out.pop_back();
    }
    return r.out + "...";
}

std::string keyText(const Arena& a, ValueId key)
{
    if (!key.valid() || key.v >= a.size()) {
        return "<invalid>";
    }
    const Value& v = a[key];
    switch (v.kind) {
    case Kind::Str:
        return v.text;
    case Kind::Int:
        return std::to_string(v.i);
    default:
        return shortRepr(a, key, 80);
    }
}

}  // namespace ckpt::pickle
