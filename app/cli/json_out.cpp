#include "cli/json_out.h"

#include "util/printable.h"

#include <array>
#include <ostream>
#include <streambuf>

namespace ckpt::cli {

nlohmann::ordered_json shapeJson(const std::vector<std::int64_t>& dims)
{
    auto a = nlohmann::ordered_json::array();
    for (auto d : dims) {
        a.push_back(d);
    }
    return a;
}

nlohmann::ordered_json errorJson(const Error& e)
{
    nlohmann::ordered_json j;
    j["schema"] = kJsonSchema;
    j["file"] = e.path;
    j["error"] = e.message;
    if (e.offset) {
        j["offset"] = *e.offset;
    }
    return j;
}

}  // namespace ckpt::cli

namespace ckpt::cli {

namespace {

void quoted(std::ostream& out, std::string_view text)
{
    // Plain runs go out in one write: a put per character through the stdio-synced std::cout
    // was a tenth of `inspect --json` on 200k tensors.
    static constexpr char kHex[] = "0123456789abcdef";
    std::string fixed;
    if (!isValidUtf8(text)) {
        fixed = validUtf8(text);  // a JSON document must be UTF-8 whatever bytes the file's keys hold
    }
    const std::string_view s = fixed.empty() ? text : fixed;
    out.put('"');
    std::size_t plain = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char ch = s[i];
        const auto u = static_cast<unsigned char>(ch);
        if (u >= 0x20 && ch != '"' && ch != '\\') {
            continue;
        }
        out.write(s.data() + plain, static_cast<std::streamsize>(i - plain));
        plain = i + 1;
        switch (ch) {
        case '"':
            out << "\\\"";
            break;
        case '\\':
            out << "\\\\";
            break;
        case '\n':
            out << "\\n";
            break;
        case '\t':
            out << "\\t";
            break;
        case '\r':
            out << "\\r";
            break;
        default:
            out << "\\u00" << kHex[u >> 4U] << kHex[u & 15U];
        }
    }
    out.write(s.data() + plain, static_cast<std::streamsize>(s.size() - plain));
    out.put('"');
}

void dims(std::ostream& out, const std::vector<std::int64_t>& v)
{
    out << '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
        out << (i ? ", " : "") << v[i];
    }
    out << ']';
}

const char* boolText(bool b)
{
    return b ? "true" : "false";
}

// Hands the text to the real stream in 64 KiB pieces. std::cout, synced with stdio, makes each
// << an fwrite or putc of its own: on 200k tensors (80 MB of JSON) that was a fifth of the run.
class ChunkBuffer : public std::streambuf {
public:
    explicit ChunkBuffer(std::ostream& out) : out_(out) { setp(buf_.data(), buf_.data() + buf_.size()); }
    ChunkBuffer(const ChunkBuffer&) = delete;
    ChunkBuffer& operator=(const ChunkBuffer&) = delete;
    ~ChunkBuffer() override { drain(); }

protected:
    int_type overflow(int_type ch) override
    {
        drain();
        if (!traits_type::eq_int_type(ch, traits_type::eof())) {
            *pptr() = traits_type::to_char_type(ch);
            pbump(1);
        }
        return traits_type::not_eof(ch);
    }
    int sync() override
    {
        drain();
        return out_ ? 0 : -1;
    }

private:
    void drain()
    {
        out_.write(pbase(), pptr() - pbase());
        setp(buf_.data(), buf_.data() + buf_.size());
    }

    std::ostream& out_;
    std::array<char, 64 * 1024> buf_{};
};

void writeInspectJsonTo(const Checkpoint& c, std::ostream& out)
{
    out << "{\n \"schema\": " << kJsonSchema << ",\n \"file\": ";
    quoted(out, c.path);
    out << ",\n \"format\": ";
    quoted(out, formatName(c.format));
    out << ",\n \"file_size\": " << c.fileSize;
    if (c.format == Format::TorchZip) {
        out << ",\n \"archive_folder\": ";
        quoted(out, c.archiveFolder);
        out << ",\n \"byteorder\": ";
        quoted(out, c.byteorder);
    }
    if (c.format != Format::Safetensors) {
        out << ",\n \"pickle_protocol\": " << c.pickleProtocol;
    }
    out << ",\n \"tensors\": [";
    std::uint64_t tensorBytes = 0;
    for (std::size_t i = 0; i < c.tensors.size(); ++i) {
        const auto& t = c.tensors[i];
        out << (i ? ",\n  {" : "\n  {") << "\"path\": ";
        quoted(out, t.path);
        out << ", \"dtype\": ";
        quoted(out, dtypeName(t.dtype));
        out << ", \"shape\": ";
        dims(out, t.shape);
        out << ", \"stride\": ";
        dims(out, t.stride);
        out << ", \"storage_offset\": " << t.storageOffset << ", \"storage\": ";
        if (t.storage == kNoIndex) {
            out << "null";
        } else {
            quoted(out, c.storages[t.storage].key);
        }
        out << ", \"location\": ";
        quoted(out, t.location);
        out << ", \"numel\": " << t.numel << ", \"nbytes\": " << t.nbytes
            << ", \"requires_grad\": " << boolText(t.requiresGrad) << ", \"parameter\": " << boolText(t.isParameter)
            << ", \"contiguous\": " << boolText(t.contiguous);
        if (t.form != pickle::TensorForm::Strided) {
            static constexpr const char* kForms[] = {"strided", "quantized", "sparse", "meta",
                                                     "wrapper", "device",    "nested"};
            out << ", \"layout\": \"" << kForms[static_cast<int>(t.form)] << '"';  // NOLINT
        }
        out << '}';
        tensorBytes += t.nbytes;
    }
    out << (c.tensors.empty() ? "]" : "\n ]") << ",\n \"storages\": [";
    std::uint64_t storageBytes = 0;
    for (std::size_t i = 0; i < c.storages.size(); ++i) {
        const auto& s = c.storages[i];
        out << (i ? ",\n  {" : "\n  {") << "\"key\": ";
        quoted(out, s.key);
        out << ", \"location\": ";
        quoted(out, s.location);
        out << ", \"dtype\": ";
        quoted(out, dtypeName(s.dtype));
        out << ", \"numel\": " << s.numel << ", \"nbytes\": " << s.nbytes << ", \"file_offset\": " << s.fileOffset;
        if (!s.record.empty()) {
            out << ", \"record\": ";
            quoted(out, s.record);
        }
        out << ", \"tensors\": " << s.tensorCount << ", \"reached_bytes\": " << s.reachedBytes << '}';
        storageBytes += s.nbytes;
    }
    out << (c.storages.empty() ? "]" : "\n ]") << ",\n \"objects\": [";
    for (std::size_t i = 0; i < c.objects.size(); ++i) {
        const auto& o = c.objects[i];
        out << (i ? ",\n  {" : "\n  {") << "\"path\": ";
        quoted(out, o.path);
        out << ", \"type\": ";
        quoted(out, o.type);
        out << ", \"module\": " << boolText(o.isModule) << '}';
    }
    out << (c.objects.empty() ? "]" : "\n ]") << ",\n \"totals\": {\"tensors\": " << c.tensors.size()
        << ", \"tensor_bytes\": " << tensorBytes << ", \"storage_bytes\": " << storageBytes << ", \"by_location\": {";
    bool first = true;
    for (const auto& [loc, n] : c.bytesByLocation()) {
        out << (first ? "" : ", ");
        quoted(out, loc);
        out << ": " << n;
        first = false;
    }
    out << "}}";
    if (c.format == Format::Safetensors && !c.safetensorsMetadata.empty()) {
        out << ",\n \"metadata\": {";
        first = true;
        for (const auto& [k, v] : c.safetensorsMetadata) {
            out << (first ? "" : ", ");
            quoted(out, k);
            out << ": ";
            quoted(out, v);
            first = false;
        }
        out << '}';
    }
    out << ",\n \"warnings\": [";
    for (std::size_t i = 0; i < c.warnings.size(); ++i) {
        out << (i ? ", " : "");
        quoted(out, c.warnings[i]);
    }
    out << "]\n}";
}

}  // namespace

void writeInspectJson(const Checkpoint& c, std::ostream& target)
{
    ChunkBuffer chunks(target);
    std::ostream out(&chunks);
    writeInspectJsonTo(c, out);
    out.flush();
}

}  // namespace ckpt::cli
