// Helpers shared by the pickle tests: hand-written opcodes, running the Python oracle
// (tests/pickle/pickle_oracle.py), reading files, and the canonical text of a value tree that the
// oracle also writes for pickle.loads(data), so the two can be compared string for string.
#pragma once

#include "pickle/unpickler.h"
#include "pickle/value.h"

#include <QByteArray>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace pickletest {

using namespace ckpt::pickle;

inline std::string le32(std::uint32_t v)
{
    std::string s;
    for (int n = 0; n < 4; ++n) {
        s.push_back(static_cast<char>((v >> (8 * n)) & 0xFFU));
    }
    return s;
}

// BINUNICODE: a str with its 4-byte little-endian length.
inline std::string binunicode(const std::string& s)
{
    return "X" + le32(static_cast<std::uint32_t>(s.size())) + s;
}

// LONG1 with 8 bytes: any int64, two's complement little-endian.
inline std::string long1(std::int64_t v)
{
    std::string s = "\x8a\x08";
    for (int n = 0; n < 8; ++n) {
        s.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * n)) & 0xFFU));
    }
    return s;
}

inline ckpt::Expected<UnpickleResult> run(Arena& a, const std::string& data, const UnpickleOptions& o = {})
{
    return unpickle(ckpt::asBytes(data), a, o);
}

inline QString oraclePath()
{
    return QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/pickle/pickle_oracle.py");
}

// Runs the oracle; returns its exit code and leaves stdout+stderr in `output`.
inline int runOracle(const QStringList& args, QString* output = nullptr, int timeoutMs = 300000)
{
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{oraclePath()} + args);
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        if (output != nullptr) {
            *output = QStringLiteral("timed out");
        }
        return -1;
    }
    if (output != nullptr) {
        *output = QString::fromUtf8(p.readAll());
    }
    return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
}

inline std::string readFile(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    const QByteArray b = f.readAll();
    return {b.constData(), static_cast<std::size_t>(b.size())};
}

inline bool writeFile(const QString& path, const std::string& data)
{
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
        return false;
    }
    return f.write(data.data(), static_cast<qint64>(data.size())) == static_cast<qint64>(data.size());
}

inline std::string hex(std::string_view s)
{
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        out.push_back(kHex[u >> 4U]);
        out.push_back(kHex[u & 0xFU]);
    }
    return out;
}

// Mirror of pickle_oracle.canon(): mutable containers carry '#n=' on first sight, '#n' after.
class Canon {
public:
    explicit Canon(const Arena& a) : a_(a) {}

    std::string of(ValueId id)
    {
        const Value& v = a_[id];
        switch (v.kind) {
        case Kind::None:
            return "N";
        case Kind::Bool:
            return v.flag ? "T" : "F";
        case Kind::Int:
            return "i:" + std::to_string(v.i);
        case Kind::BigInt:
            return "I:" + hex(v.text);
        case Kind::Float: {
            const auto bits = std::bit_cast<std::uint64_t>(v.f);
            std::string be;
            for (int n = 7; n >= 0; --n) {
                be.push_back(static_cast<char>((bits >> (8 * n)) & 0xFFU));
            }
            return "f:" + hex(be);
        }
        case Kind::Str:
            return "s:" + hex(v.text);
        case Kind::Bytes:
            if (v.flag) {
                if (auto r = ref(id)) {
                    return *r;
                }
                return tag(id) + "ba:" + hex(v.text);
            }
            return "b:" + hex(v.text);
        case Kind::Tuple:
            return "(" + join(v.items) + ")";
        case Kind::List: {
            if (auto r = ref(id)) {
                return *r;
            }
            std::string t = tag(id);
            return t + "[" + join(v.items) + "]";
        }
        case Kind::Set: {
            if (auto r = ref(id)) {
                return *r;
            }
            std::string t = tag(id);
            std::vector<std::string> parts;
            for (ValueId item : v.items) {
                parts.push_back(of(item));
            }
            std::sort(parts.begin(), parts.end());
            std::string body;
            for (std::size_t n = 0; n < parts.size(); ++n) {
                body += (n != 0 ? "," : "") + parts[n];
            }
            return t + (v.flag ? "fset{" : "set{") + body + "}";
        }
        case Kind::Dict: {
            if (auto r = ref(id)) {
                return *r;
            }
            std::string out = tag(id);  // numbered before its items, as the oracle does
            out += v.flag ? "od{" : "{";
            out += pairs(v.items) + "}";
            if (v.flag && v.attrs.valid()) {
                out += "@" + of(v.attrs);
            }
            return out;
        }
        case Kind::Object:
            return object(id);
        case Kind::Global:
            return "g:" + globalOf(a_, id).qualified();
        case Kind::DType:
            return "dt:" + std::string(ckpt::dtypeName(static_cast<ckpt::DType>(v.i)));
        default:
            return "X:" + std::string(kindName(v.kind));
        }
    }

private:
    std::optional<std::string> ref(ValueId id)
    {
        if (auto it = seen_.find(id.v); it != seen_.end()) {
            return "#" + std::to_string(it->second);
        }
        return std::nullopt;
    }
    std::string tag(ValueId id)
    {
        const int n = next_++;
        seen_[id.v] = n;
        return "#" + std::to_string(n) + "=";
    }
    std::string join(std::span<const ValueId> ids)
    {
        std::string s;
        for (std::size_t n = 0; n < ids.size(); ++n) {
            s += (n != 0 ? "," : "") + of(ids[n]);
        }
        return s;
    }
    std::string pairs(std::span<const ValueId> ids)
    {
        std::string s;
        for (std::size_t n = 0; n + 1 < ids.size(); n += 2) {
            s += (n != 0 ? "," : "") + of(ids[n]);
            s += ":" + of(ids[n + 1]);
        }
        return s;
    }
    std::string object(ValueId id)
    {
        NumpyInfo np;
        if (decodeNumpy(a_, id, np)) {
            std::string shape;
            for (std::size_t n = 0; n < np.shape.size(); ++n) {
                shape += (n != 0 ? "x" : "") + std::to_string(np.shape[n]);
            }
            return "np:" + np.dtype + ":" + shape + ":" + hex(np.data);
        }
        const ObjectInfo& o = objectOf(a_, id);
        const Value& args = a_[o.args];
        if (o.callable.qualified() == "builtins.complex") {
            return "cx(" + join(args.items) + ")";
        }
        if (auto r = ref(id)) {
            return *r;
        }
        std::string t = tag(id);
        std::string cls = o.callable.qualified();
        if (cls == "copyreg._reconstructor" && !args.items.empty() && a_[args.items[0]].kind == Kind::Global) {
            cls = globalOf(a_, args.items[0]).qualified();
        }
        std::string state;
        if (o.state.valid()) {
            state = of(o.state);
        } else {
            state = "#" + std::to_string(next_++) + "={}";
        }
        return t + "obj:" + cls + "(" + state + ")";
    }

    const Arena& a_;
    std::unordered_map<std::uint32_t, int> seen_;
    int next_ = 0;
};

inline std::string canonOf(const Arena& a, ValueId root)
{
    Canon c(a);
    return c.of(root);
}

inline ckpt::Bytes bytesOf(const std::string& s)
{
    return ckpt::asBytes(s);
}

}  // namespace pickletest
