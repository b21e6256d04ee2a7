#include "archive/tar.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <ranges>

namespace ckpt::archive {
namespace {

constexpr std::uint64_t kBlock = 512;

std::string_view field(Bytes header, std::size_t at, std::size_t width)
{
    std::string_view s = asText(header.subspan(at, width));
    const auto nul = s.find('\0');
    return nul == std::string_view::npos ? s : s.substr(0, nul);
}

// Octal text (spaces and NULs around it), or GNU base-256.
std::optional<std::uint64_t> number(Bytes header, std::size_t at, std::size_t width)
{
    const auto first = std::to_integer<unsigned>(header[at]);
    if ((first & 0x80U) != 0) {
        std::uint64_t v = first & 0x7FU;
        for (std::size_t i = 1; i < width; ++i) {
            if (v > (UINT64_MAX >> 8)) {
                return std::nullopt;
            }
            v = (v << 8) | std::to_integer<unsigned>(header[at + i]);
        }
        return v;
    }
    std::uint64_t v = 0;
    bool digits = false;
    for (std::size_t i = 0; i < width; ++i) {
        const auto c = std::to_integer<char>(header[at + i]);
        if (c >= '0' && c <= '7') {
            if (v > (UINT64_MAX >> 3)) {
                return std::nullopt;
            }
            v = v * 8 + static_cast<std::uint64_t>(c - '0');
            digits = true;
        } else if (c == ' ' || c == '\0') {
            if (digits) {
                break;
            }
        } else {
            return std::nullopt;
        }
    }
    return v;
}

bool checksumMatches(Bytes header)
{
    const auto stored = number(header, 148, 8);
    if (!stored) {
        return false;
    }
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < kBlock; ++i) {
        sum += (i >= 148 && i < 156) ? ' ' : std::to_integer<unsigned>(header[i]);
    }
    return sum == *stored;
}

struct PaxOverrides {
    std::optional<std::string> path;
    std::optional<std::uint64_t> size;
};

// "LEN key=value\n" records; only path and size change what ckptscope reads.
std::optional<PaxOverrides> parsePax(std::string_view text)
{
    PaxOverrides out;
    while (!text.empty()) {
        const auto space = text.find(' ');
        if (space == std::string_view::npos || space == 0) {
            return std::nullopt;
        }
        std::uint64_t len = 0;
        for (char c : text.substr(0, space)) {
            if (c < '0' || c > '9' || len > text.size()) {
                return std::nullopt;
            }
            len = len * 10 + static_cast<std::uint64_t>(c - '0');
        }
        if (len <= space + 1 || len > text.size() || text[len - 1] != '\n') {
            return std::nullopt;
        }
        const std::string_view record = text.substr(space + 1, len - space - 2);
        const auto eq = record.find('=');
        if (eq == std::string_view::npos) {
            return std::nullopt;
        }
        const std::string_view key = record.substr(0, eq);
        const std::string_view value = record.substr(eq + 1);
        if (key == "path") {
            out.path = std::string(value);
        } else if (key == "size") {
            std::uint64_t n = 0;
            for (char c : value) {
                if (c < '0' || c > '9' || n > UINT64_MAX / 10) {
                    return std::nullopt;
                }
                n = n * 10 + static_cast<std::uint64_t>(c - '0');
            }
            out.size = n;
        }
        text.remove_prefix(len);
    }
    return out;
}

}  // namespace

Expected<std::vector<TarMember>> parseTar(Bytes file)
{
    std::vector<TarMember> members;
    PaxOverrides next;
    std::optional<std::string> longName;
    std::uint64_t at = 0;
    while (true) {
        if (file.size() == at) {
            break;  // no end-of-archive blocks: tarfile reads such an archive too
        }
        if (file.size() - at < kBlock) {
            return makeError(ErrorCode::Truncated, "the tar archive ends inside a header: the file is truncated", at);
        }
        const Bytes header = file.subspan(at, kBlock);
        if (std::all_of(header.begin(), header.end(), [](std::byte b) { return b == std::byte{0}; })) {
            break;
        }
        if (!checksumMatches(header)) {
            return makeError(ErrorCode::Corrupt, "tar header checksum mismatch: the archive is damaged", at);
        }
        const auto size = number(header, 124, 12);
        if (!size) {
            return makeError(ErrorCode::Corrupt, "tar header with an unreadable size", at);
        }
        const char type = std::to_integer<char>(header[156]);
        const std::uint64_t dataAt = at + kBlock;
        const std::uint64_t realSize = (type == 'x' || type == 'g' || type == 'L' || !next.size) ? *size : *next.size;
        if (realSize > file.size() - dataAt) {
            return makeError(ErrorCode::Truncated,
                             "tar member '" + std::string(field(header, 0, 100)) +
                                 "' runs past the end of the file: the file is truncated",
                             at);
        }
        const std::string_view data = asText(file.subspan(dataAt, realSize));
        if (type == 'x') {
            auto pax = parsePax(data);
            if (!pax) {
                return makeError(ErrorCode::Corrupt, "malformed pax header", at);
            }
            next = *pax;
        } else if (type == 'L') {
            longName = std::string(data.substr(0, data.find('\0')));
        } else if (type != 'g') {
            TarMember m;
            std::string name(field(header, 0, 100));
            const std::string_view prefix = field(header, 345, 155);
            if (std::memcmp(header.data() + 257, "ustar\0", 6) == 0 && !prefix.empty()) {
                name = std::string(prefix) + "/" + name;
            }
            m.name = next.path ? *next.path : longName ? *longName : name;
            m.offset = dataAt;
            m.size = realSize;
            m.type = type;
            members.push_back(std::move(m));
            next = {};
            longName.reset();
        }
        const std::uint64_t padded = (realSize + kBlock - 1) / kBlock * kBlock;
        at = dataAt + std::min<std::uint64_t>(padded, file.size() - dataAt);
    }
    return members;
}

const TarMember* findMember(const std::vector<TarMember>& members, std::string_view name)
{
    // The last member of a name, as Python's tarfile (and so torch.load) reads it.
    const auto m = std::find_if(members.rbegin(), members.rend(), [&](const TarMember& t) { return t.name == name; });
    if (m != members.rend()) {
        return m->type == '0' || m->type == '\0' ? &*m : nullptr;
    }
    return nullptr;
}

std::vector<std::string> duplicatedNames(const std::vector<TarMember>& members)
{
    std::vector<std::string_view> names;
    names.reserve(members.size());
    for (const auto& m : members) {
        names.push_back(m.name);
    }
    std::sort(names.begin(), names.end());
    std::vector<std::string> out;
    for (std::size_t i = 1; i < names.size(); ++i) {
        if (names[i] == names[i - 1] && (out.empty() || out.back() != names[i])) {
            out.emplace_back(names[i]);
        }
    }
    return out;
}

}  // namespace ckpt::archive
