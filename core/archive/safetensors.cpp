#include "archive/safetensors.h"

#include "util/printable.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace ckpt::archive {
namespace {

using Json = nlohmann::ordered_json;  // keeps the header's order, which users see

constexpr std::uint64_t kMaxHeader = 100'000'000;  // the reference reader's MAX_HEADER_SIZE
constexpr std::uint64_t kMaxSize = std::numeric_limits<std::uint64_t>::max();

Error corrupt(std::string what, std::optional<std::uint64_t> at = {})
{
    return makeError(ErrorCode::Corrupt, "safetensors: " + std::move(what), at);
}

bool checkedMul(std::uint64_t a, std::uint64_t b, std::uint64_t& out)
{
    if (a != 0 && b > kMaxSize / a) {
        return false;
    }
    out = a * b;
    return true;
}

std::optional<std::uint64_t> asUnsigned(const Json& v)
{
    if (v.is_number_unsigned()) {
        return v.get<std::uint64_t>();
    }
    if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
        return static_cast<std::uint64_t>(v.get<std::int64_t>());
    }
    return std::nullopt;
}

Expected<SafetensorsEntry> readEntry(const std::string& name, const Json& v)
{
    auto bad = [&](const std::string& what) { return corrupt("tensor \"" + name + "\": " + what); };
    if (!v.is_object()) {
        return bad("entry is not an object");
    }
    const auto dtype = v.find("dtype");
    const auto shape = v.find("shape");
    const auto offsets = v.find("data_offsets");
    if (dtype == v.end() || !dtype->is_string()) {
        return bad("missing or non-string \"dtype\"");
    }
    if (shape == v.end() || !shape->is_array()) {
        return bad("missing or non-array \"shape\"");
    }
    if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2) {
        return bad("\"data_offsets\" must be [begin, end]");
    }
    SafetensorsEntry e;
    e.name = name;
    e.dtypeCode = dtype->get<std::string>();
    e.dtype = dtypeFromSafetensors(e.dtypeCode).value_or(DType::Unknown);
    for (const Json& d : *shape) {
        const auto n = asUnsigned(d);
        if (!n || *n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
            return bad("shape entries must be non-negative integers");
        }
        e.shape.push_back(static_cast<std::int64_t>(*n));
    }
    const auto begin = asUnsigned((*offsets)[0]);
    const auto end = asUnsigned((*offsets)[1]);
    if (!begin || !end) {
        return bad("\"data_offsets\" must be non-negative integers");
    }
    e.begin = *begin;
    e.end = *end;
    return e;
}

Expected<void> readMetadata(const Json& v, SafetensorsFile& out)
{
    if (v.is_null()) {
        return {};
    }
    if (!v.is_object()) {
        return corrupt("\"__metadata__\" must be an object of strings");
    }
    for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) {
            return corrupt(R"("__metadata__" value of ")" + k + "\" is not a string");
        }
        out.metadata.emplace_back(k, s.get<std::string>());
    }
    return {};
}

// The reference reader's `validate`: sorted by offsets, contiguous from 0, sizes exact.
Expected<std::uint64_t> validateLayout(const std::vector<SafetensorsEntry>& tensors)
{
    std::vector<const SafetensorsEntry*> sorted;
    sorted.reserve(tensors.size());
    for (const auto& t : tensors) {
        sorted.push_back(&t);
    }
    std::sort(sorted.begin(), sorted.end(),
              [](const auto* a, const auto* b) { return std::pair(a->begin, a->end) < std::pair(b->begin, b->end); });
    std::uint64_t next = 0;
    for (const SafetensorsEntry* t : sorted) {
        if (t->begin != next || t->end < t->begin) {
            return corrupt("tensor \"" + t->name + "\" has offsets [" + std::to_string(t->begin) + ", " +
                           std::to_string(t->end) + "] but the previous tensor ends at " + std::to_string(next) +
                           " (a hole or an overlap)");
        }
        next = t->end;
        const auto bits = safetensorsBits(t->dtypeCode);
        if (!bits) {
            return makeError(ErrorCode::Unsupported, "safetensors: tensor \"" + t->name + "\" has unknown dtype \"" +
                                                         t->dtypeCode + "\", so its size cannot be checked");
        }
        std::uint64_t numel = 1;
        for (std::int64_t d : t->shape) {
            if (!checkedMul(numel, static_cast<std::uint64_t>(d), numel)) {
                return corrupt("tensor \"" + t->name + "\": shape overflows");
            }
        }
        std::uint64_t nbits = 0;
        if (!checkedMul(numel, *bits, nbits)) {
            return corrupt("tensor \"" + t->name + "\": size overflows");
        }
        if (nbits % 8 != 0) {
            return corrupt("tensor \"" + t->name + "\": " + std::to_string(numel) + " elements of " + t->dtypeCode +
                           " do not fill whole bytes");
        }
        if (t->end - t->begin != nbits / 8) {
            return corrupt("tensor \"" + t->name + "\" has " + std::to_string(t->end - t->begin) +
                           " bytes but its shape and dtype need " + std::to_string(nbits / 8));
        }
    }
    return next;
}

// Reads the header as a stream of top-level entries. nlohmann's own DOM parsers are quadratic in
// the members of one object: ordered_json inserts each member with ordered_map::operator[], a
// linear search, and the callback parser also rescans the parent object whenever a nested object
// ends (a header of 200k tensors took minutes). So only one entry's value is built at a time, and
// is turned into a tensor (or the metadata) as soon as it is complete; objects inside it append
// their members and find repeated keys with a hash index once they are no longer small (a
// hostile `__metadata__` can be big too). The result is what the whole-document parse gave: a
// repeated key inside a value keeps its first position and takes the last value; the first bad
// entry in header order is the one reported, after JSON syntax and repeated top-level keys.
class HeaderReader {
public:
    explicit HeaderReader(SafetensorsFile& out) : out_(out) {}

    bool rootIsObject = false;
    std::size_t metadataKeys = 0;  // how many top-level keys are "__metadata__"
    std::optional<Error> firstError;

    bool null() { return scalar(nullptr); }
    bool boolean(bool v) { return scalar(v); }
    bool number_integer(Json::number_integer_t v) { return scalar(v); }
    bool number_unsigned(Json::number_unsigned_t v) { return scalar(v); }
    bool number_float(Json::number_float_t v, const std::string& /*text*/) { return scalar(v); }
    bool string(std::string& v) { return scalar(std::move(v)); }
    bool binary(Json::binary_t& v) { return scalar(std::move(v)); }
    bool start_object(std::size_t /*size*/)
    {
        if (!rootSeen_) {
            rootSeen_ = rootIsObject = inRoot_ = true;
            return true;
        }
        stack_.push_back({place(Json::object()), {}});
        return true;
    }
    bool key(std::string& k)
    {
        if (stack_.empty()) {
            key_ = std::move(k);
            return true;
        }
        Frame& f = stack_.back();
        // ordered_map's own members search; its base vector's append and indexing do not.
        Json::object_t::Container& members = *f.value->get_ptr<Json::object_t*>();
        if (f.index.empty() && members.size() >= kIndexFrom) {
            f.index.reserve(members.size() * 2);
            for (std::size_t i = 0; i < members.size(); ++i) {
                f.index.emplace(members[i].first, i);
            }
        }
        std::size_t at = members.size();
        if (f.index.empty()) {
            for (std::size_t i = 0; i < members.size(); ++i) {
                if (members[i].first == k) {
                    at = i;
                    break;
                }
            }
        } else if (const auto it = f.index.find(k); it != f.index.end()) {
            at = it->second;
        }
        if (at == members.size()) {
            if (!f.index.empty()) {
                f.index.emplace(k, at);
            }
            members.emplace_back(std::move(k), nullptr);
        }
        member_ = &members[at].second;
        return true;
    }
    bool end_object()
    {
        if (stack_.empty()) {
            inRoot_ = false;  // the root object's end
            return true;
        }
        return close();
    }
    bool start_array(std::size_t /*size*/)
    {
        rootSeen_ = true;
        stack_.push_back({place(Json::array()), {}});
        return true;
    }
    bool end_array() { return close(); }
    static bool parse_error(std::size_t /*at*/, const std::string& /*token*/, const nlohmann::detail::exception& /*e*/)
    {
        return false;
    }

private:
    static constexpr std::size_t kIndexFrom = 16;
    struct Frame {
        Json* value;
        std::unordered_map<std::string, std::size_t> index;  // empty while the object is small
    };

    // Where a value goes: the entry being built, the end of the open array, or the member whose
    // key came last. Pointers into a container stay valid while it is open: only the innermost
    // open container grows.
    Json* place(Json&& v)
    {
        if (stack_.empty()) {
            value_ = std::move(v);
            return &value_;
        }
        Json* parent = stack_.back().value;
        if (parent->is_array()) {
            parent->get_ptr<Json::array_t*>()->push_back(std::move(v));
            return &parent->get_ptr<Json::array_t*>()->back();
        }
        *member_ = std::move(v);
        return member_;
    }
    template <class T> bool scalar(T&& v)
    {
        rootSeen_ = true;
        place(Json(std::forward<T>(v)));
        if (stack_.empty()) {
            entryDone();
        }
        return true;
    }
    bool close()
    {
        stack_.pop_back();
        if (stack_.empty()) {
            entryDone();
        }
        return true;
    }
    void entryDone()
    {
        if (!inRoot_) {
            return;  // a root that is not an object; the caller refuses it
        }
        if (key_ == "__metadata__") {
            ++metadataKeys;
            if (!firstError) {
                if (auto ok = readMetadata(value_, out_); !ok) {
                    firstError = std::move(ok.error());
                }
            }
            return;
        }
        // After an error the names are still kept: repeated keys are reported before bad entries.
        if (!firstError) {
            auto e = readEntry(key_, value_);
            if (e) {
                out_.tensors.push_back(std::move(*e));
                return;
            }
            firstError = std::move(e.error());
        }
        SafetensorsEntry named;
        named.name = std::move(key_);
        out_.tensors.push_back(std::move(named));
    }

    SafetensorsFile& out_;
    bool rootSeen_ = false;
    bool inRoot_ = false;
    std::string key_;  // the top-level key whose value is being built
    Json value_;       // that value
    std::vector<Frame> stack_;
    Json* member_ = nullptr;
};

// Open addressing over entry indices (a power of two at least twice the count, linear probing):
// no allocation per name, which a std::unordered_set of 200k names spent most of its time on.
bool hasRepeatedName(const std::vector<SafetensorsEntry>& tensors)
{
    std::size_t cap = 16;
    while (cap < tensors.size() * 2) {
        cap *= 2;
    }
    std::vector<std::uint32_t> slots(cap, 0);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const std::string& name = tensors[i].name;
        std::size_t s = std::hash<std::string_view>{}(name) & (cap - 1);
        for (; slots[s] != 0; s = (s + 1) & (cap - 1)) {
            if (tensors[slots[s] - 1].name == name) {
                return true;
            }
        }
        slots[s] = static_cast<std::uint32_t>(i + 1);
    }
    return false;
}

}  // namespace

bool looksLikeSafetensors(Bytes file)
{
    if (file.size() < 10) {
        return false;
    }
    const std::uint64_t n = loadLE(file, 0, 8);
    return n >= 2 && n <= kMaxHeader && n <= file.size() - 8 && std::to_integer<char>(file[8]) == '{';
}

Expected<SafetensorsFile> parseSafetensors(Bytes file)
{
    return parseSafetensors(file, file.size());
}

Expected<SafetensorsFile> parseSafetensors(Bytes file, std::uint64_t fileSize)
{
    if (file.size() < 8) {
        return makeError(ErrorCode::Truncated, "safetensors: file is shorter than its 8-byte header length");
    }
    SafetensorsFile out;
    out.headerSize = loadLE(file, 0, 8);
    if (out.headerSize > kMaxHeader) {
        return makeError(ErrorCode::Limit, "safetensors: header of " + std::to_string(out.headerSize) +
                                               " bytes is larger than the 100000000 allowed");
    }
    if (out.headerSize > fileSize - 8) {
        return makeError(ErrorCode::Truncated, "safetensors: header length " + std::to_string(out.headerSize) +
                                                   " runs past the end of the file");
    }
    if (out.headerSize > file.size() - 8) {
        return makeError(ErrorCode::Internal, "safetensors: the header was not read whole");
    }
    out.dataStart = 8 + out.headerSize;
    const std::string_view text = asText(file.subspan(8, static_cast<std::size_t>(out.headerSize)));
    if (text.empty() || text.front() != '{') {
        return corrupt("header does not start with '{'", 8);
    }

    HeaderReader reader(out);
    if (!Json::sax_parse(text, &reader)) {
        return corrupt("header is not valid JSON", 8);
    }
    if (!reader.rootIsObject) {
        return corrupt("header is not a JSON object", 8);
    }
    // The reference reader refuses repeated keys (nlohmann would keep one silently).
    if (reader.metadataKeys > 1 || hasRepeatedName(out.tensors)) {
        return corrupt("header has duplicate keys", 8);
    }
    if (reader.firstError) {
        return std::move(*reader.firstError);
    }
    auto end = validateLayout(out.tensors);
    if (!end) {
        return std::move(end.error());
    }
    const std::uint64_t dataSize = fileSize - out.dataStart;
    if (*end != dataSize) {
        const ErrorCode code = *end > dataSize ? ErrorCode::Truncated : ErrorCode::Corrupt;
        return makeError(code, "safetensors: tensors end at " + std::to_string(*end) +
                                   " bytes into the data buffer, but the buffer has " + std::to_string(dataSize) +
                                   (*end > dataSize ? " (the file is truncated)" : " (trailing bytes)"));
    }
    return out;
}

Expected<std::string> safetensorsHeader(const std::vector<SafetensorsOut>& tensors,
                                        const std::vector<std::pair<std::string, std::string>>& metadata)
{
    // Built as text, entry by entry: a JSON object with 40k members would make every insertion a
    // linear search (ordered_json), i.e. quadratic in the tensor count.
    std::string text = "{";
    try {
        if (!metadata.empty()) {
            Json meta = Json::object();
            for (const auto& [k, v] : metadata) {
                meta[k] = v;
            }
            text += "\"__metadata__\":" + meta.dump();
        }
        std::unordered_set<std::string_view> names;
        names.reserve(tensors.size());
        std::uint64_t offset = 0;
        for (const auto& t : tensors) {
            const std::string_view code = safetensorsName(t.dtype);
            if (code.empty()) {
                return makeError(ErrorCode::Unsupported, "safetensors cannot hold tensor \"" + t.name + "\" of dtype " +
                                                             std::string(dtypeName(t.dtype)));
            }
            if (!isValidUtf8(t.name)) {
                return makeError(ErrorCode::Usage, "tensor name \"" + validUtf8(t.name) +
                                                       "\" is not valid UTF-8, which safetensors requires");
            }
            if (t.name == "__metadata__" || !names.insert(t.name).second) {
                return makeError(ErrorCode::Usage, "tensor name \"" + t.name + "\" is reserved or used twice");
            }
            std::uint64_t numel = 1;
            for (std::int64_t d : t.shape) {
                if (d < 0 || !checkedMul(numel, static_cast<std::uint64_t>(d), numel)) {
                    return makeError(ErrorCode::Usage, "tensor \"" + t.name + "\" has an invalid shape");
                }
            }
            std::uint64_t nbytes = 0;
            if (!checkedMul(numel, elementSize(t.dtype), nbytes) || nbytes != t.nbytes ||
                offset > kMaxSize - t.nbytes) {
                return makeError(ErrorCode::Usage, "tensor \"" + t.name + "\": " + std::to_string(t.nbytes) +
                                                       " bytes do not match its shape and dtype");
            }
            if (text.size() > 1) {
                text += ',';
            }
            text += Json(t.name).dump();
            text += R"(:{"dtype":")";
            text += code;
            text += R"(","shape":)";
            text += Json(t.shape).dump();
            text += ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.nbytes) + "]}";
            offset += t.nbytes;
        }
    } catch (const Json::exception&) {
        return makeError(ErrorCode::Usage, "safetensors: a tensor name or metadata text is not valid UTF-8");
    }
    text += '}';
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) {
        out[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
    }
    return out + text;
}

}  // namespace ckpt::archive
