#include "cli/json_out.h"

#include "checkpoint/block_quant.h"
#include "checkpoint/dtensor.h"
#include "checkpoint/file_formats.h"
#include "checkpoint/layout.h"
#include "checkpoint/model_folder.h"
#include "checkpoint/script_state_dict.h"
#include "util/printable.h"

#include <array>
#include <charconv>
#include <cmath>
#include <ostream>
#include <type_traits>
#include <unordered_map>

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

// Appends JSON text to a string and hands it to the stream in 64 KiB pieces: each ostream <<
// builds a sentry and, on std::cout synced with stdio, an fwrite of its own, which was a third of
// `inspect --json` on 180k tensors (80 MB of JSON).
class JsonText {
public:
    explicit JsonText(std::ostream& out) : out_(out) { buf_.reserve(kFlushAt + 4096); }
    JsonText(const JsonText&) = delete;
    JsonText& operator=(const JsonText&) = delete;
    ~JsonText() { flush(); }

    JsonText& operator<<(std::string_view text)
    {
        buf_.append(text);
        maybeFlush();
        return *this;
    }
    JsonText& operator<<(char c)
    {
        buf_.push_back(c);
        return *this;
    }
    template <class N>
    requires std::is_integral_v<N> JsonText& operator<<(N n)
    {
        std::array<char, 24> digits{};
        const auto [end, ec] = std::to_chars(digits.data(), digits.data() + digits.size(), n);
        buf_.append(digits.data(), end);
        return *this;
    }
    // A JSON string (printable.h's appendJsonString: bytes that are not UTF-8 as `\xNN`, every
    // control character escaped).
    void quoted(std::string_view text)
    {
        appendJsonString(buf_, text);
        maybeFlush();
    }
    void dims(const std::vector<std::int64_t>& v)
    {
        buf_.push_back('[');
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (i != 0) {
                buf_ += ", ";
            }
            *this << v[i];
        }
        buf_.push_back(']');
    }
    void flush()
    {
        out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
        buf_.clear();
    }

private:
    static constexpr std::size_t kFlushAt = std::size_t{64} * 1024;
    void maybeFlush()
    {
        if (buf_.size() >= kFlushAt) {
            flush();
        }
    }

    std::ostream& out_;
    std::string buf_;
};

std::string_view boolText(bool b)
{
    return b ? "true" : "false";
}

// What torch.jit.load(f).state_dict() returns, by key, each naming its tensor's key path; what it
// leaves out although it holds tensors; or why it cannot be told.
void writeScriptStateDict(const Checkpoint& c, JsonText& out)
{
    out << ",\n \"torchscript\": {";
    const auto sd = scriptStateDict(c);
    if (!sd) {
        out << "\"error\": ";
        out.quoted(sd.error().message);
        out << '}';
        return;
    }
    out << "\"state_dict\": [";
    for (std::size_t i = 0; i < sd->entries.size(); ++i) {
        const auto& e = sd->entries[i];
        const auto& t = c.tensors[e.tensor];
        out << (i ? ",\n  {" : "\n  {") << "\"key\": ";
        out.quoted(e.key);
        out << ", \"path\": ";
        out.quoted(t.path);
        out << ", \"dtype\": ";
        out.quoted(dtypeName(t.dtype));
        out << ", \"shape\": ";
        out.dims(t.shape);
        out << '}';
    }
    out << (sd->entries.empty() ? "]" : "\n ]") << ", \"left_out\": [";
    for (std::size_t i = 0; i < sd->skipped.size(); ++i) {
        out << (i ? ", {" : "{") << "\"path\": ";
        out.quoted(sd->skipped[i].path);
        out << ", \"type\": ";
        out.quoted(sd->skipped[i].type);
        out << '}';
    }
    out << "]}";
}

// A double as JSON: the shortest text that reads back the same; null for NaN and infinities, which
// JSON cannot hold.
std::string jsonNumber(double x)
{
    if (!std::isfinite(x)) {
        return "null";
    }
    std::array<char, 32> buf{};
    const auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), x);
    return ec == std::errc() ? std::string(buf.data(), end) : std::string("null");
}

void writeValues(const Quantizer::Values& v, JsonText& out)
{
    out << "{\"dtype\": ";
    out.quoted(dtypeName(v.dtype));
    out << ", \"count\": " << v.count << ", \"first\": [";
    for (std::size_t i = 0; i < v.values.size(); ++i) {
        out << (i ? ", " : "");
        out << jsonNumber(v.values[i]);
    }
    out << "], \"min\": " << (v.min ? jsonNumber(*v.min) : std::string("null"))
        << ", \"max\": " << (v.max ? jsonNumber(*v.max) : std::string("null")) << '}';
}

// A quantized tensor's quantizer: `scheme`, and `scale`/`zero_point` per tensor or `axis`,
// `scales`, `zero_points` per channel (docs: README, JSON).
void writeQuantizer(const Quantizer& q, JsonText& out)
{
    out << R"(, "quantizer": {"scheme": )";
    out.quoted(q.scheme);
    if (q.perTensorAffine) {
        out << ", \"scale\": " << jsonNumber(q.scale) << ", \"zero_point\": " << q.zeroPoint;
    }
    if (q.axis) {
        out << ", \"axis\": " << *q.axis;
    }
    if (q.scales) {
        out << ", \"scales\": ";
        writeValues(*q.scales, out);
    }
    if (q.zeroPoints) {
        out << ", \"zero_points\": ";
        writeValues(*q.zeroPoints, out);
    }
    out << ", \"summary\": ";
    out.quoted(q.summary());
    out << '}';
}

void writeBlockScale(const Checkpoint& c, const BlockScale& b, JsonText& out)
{
    out << R"(, "block_scale": {"scale": )";
    out.quoted(c.tensors[b.scale].path);
    out << ", \"block\": ";
    out.dims(b.block);
    out << ", \"block_from\": ";
    out.quoted(b.blockFrom);
    out << ", \"expected_scale_shape\": ";
    out.dims(b.expectedScaleShape);
    out << ", \"problem\": ";
    if (b.ok()) {
        out << "null";
    } else {
        out.quoted(b.problem);
    }
    out << '}';
}

void writeInspectJsonTo(const Checkpoint& c, JsonText& out)
{
    out << "{\n \"schema\": " << kJsonSchema << ",\n \"file\": ";
    out.quoted(c.path);
    out << ",\n \"format\": ";
    out.quoted(formatName(c.format));
    out << ",\n \"file_size\": " << c.fileSize;
    if (c.folder) {
        // Opened through its folder (model_folder.h): `file` is the model, and the folder's other
        // files are named with their roles.
        out << ",\n \"folder\": {\"path\": ";
        out.quoted(c.folder->dir);
        out << ", \"layout\": ";
        out.quoted(c.folder->layout);
        out << ", \"members\": [";
        for (std::size_t i = 0; i < c.folder->members.size(); ++i) {
            out << (i ? ", " : "") << "{\"name\": ";
            out.quoted(c.folder->members[i].name);
            out << ", \"role\": ";
            out.quoted(c.folder->members[i].role);
            out << '}';
        }
        out << ']';
        if (const auto& a = c.folder->adapterConfig) {
            // adapter_config.json's facts (a PEFT folder): null where the file does not say.
            auto text = [&](const std::string& s) {
                if (s.empty()) {
                    out << "null";
                } else {
                    out.quoted(s);
                }
            };
            out << R"(, "adapter": {"base_model_name_or_path": )";
            text(a->baseModel);
            out << R"(, "peft_type": )";
            text(a->peftType);
            out << R"(, "r": )";
            if (a->rank) {
                out << *a->rank;
            } else {
                out << "null";
            }
            out << R"(, "target_modules": [)";
            for (std::size_t i = 0; i < a->targetModules.size(); ++i) {
                out << (i ? ", " : "");
                out.quoted(a->targetModules[i]);
            }
            out << R"(], "target_modules_left_out": )" << a->moreModules << R"(, "problem": )";
            text(a->problem);
            out << '}';
        }
        out << '}';
    }
    if (fileFormat(c.format).zipArchive) {
        out << ",\n \"archive_folder\": ";
        out.quoted(c.archiveFolder);
        out << ",\n \"byteorder\": ";
        out.quoted(c.byteorder);
    }
    if (fileFormat(c.format).pickled) {
        out << ",\n \"pickle_protocol\": " << c.pickleProtocol;
    }
    out << ",\n \"tensors\": [";
    std::uint64_t tensorBytes = 0;
    const BlockQuantization blocks = blockQuantization(c);
    std::unordered_map<std::string_view, const TiedName*> restored;
    for (const auto& t : c.ties.restored) {
        restored.emplace(t.name, &t);
    }
    for (std::uint32_t i = 0; i < c.tensors.size(); ++i) {
        const auto& t = c.tensors[TensorIndex{i}];
        out << (i ? ",\n  {" : "\n  {") << "\"path\": ";
        out.quoted(t.path);
        out << ", \"dtype\": ";
        out.quoted(dtypeName(t.dtype));
        out << ", \"shape\": ";
        out.dims(t.shape);
        out << ", \"stride\": ";
        out.dims(t.stride);
        out << ", \"storage_offset\": " << t.storageOffset << ", \"storage\": ";
        if (!t.storage.valid()) {
            out << "null";
        } else {
            out.quoted(c.storages[t.storage].key);
        }
        out << ", \"location\": ";
        out.quoted(t.location);
        out << ", \"numel\": " << t.numel << ", \"nbytes\": " << t.nbytes
            << ", \"requires_grad\": " << boolText(t.requiresGrad) << ", \"parameter\": " << boolText(t.isParameter)
            << ", \"contiguous\": " << boolText(t.contiguous);
        if (t.form != pickle::TensorForm::Strided) {
            static constexpr std::array<std::string_view, 7> kForms{"strided", "quantized", "sparse", "meta",
                                                                    "wrapper", "device",    "nested"};
            out << R"(, "layout": ")"
                << (isJagged(c, t) ? std::string_view("jagged") : kForms.at(static_cast<std::size_t>(t.form))) << '"';
        }
        if (const auto nnz = sparseNnz(c, t)) {
            out << R"(, "nnz": )" << *nnz;
        }
        if (t.form == pickle::TensorForm::Nested) {
            // shape, stride and numel are its flat buffer's; the components are the tensors it holds
            out << R"(, "components": )";
            if (auto comps = nestedComponents(c, t)) {
                out << '[';
                for (std::size_t k = 0; k < comps->size(); ++k) {
                    out << (k ? ", " : "");
                    out.dims((*comps)[k].shape);
                }
                out << ']';
            } else {
                out << "null";
            }
        }
        if (const auto piece = dtensor::localPiece(c.arena, pickle::tensorOf(c.arena, t.value))) {
            out << R"(, "dtensor": {"local_shape": )";
            out.dims(piece->shape);
            out << ", \"local_bytes\": " << piece->bytes << ", \"placements\": ";
            out.quoted(piece->placements);
            out << ", \"mesh_shape\": ";
            if (piece->mesh) {
                out.dims(*piece->mesh);
            } else {
                out << "null";
            }
            out << '}';
        }
        if (!t.hasData()) {
            out << R"(, "has_data": false)";
        }
        if (const auto it = restored.find(t.path); it != restored.end()) {
            out << R"(, "tied_to": )";
            out.quoted(it->second->source);
        }
        if (const auto q = quantizerOf(c, t)) {
            writeQuantizer(*q, out);
        }
        if (const auto* b = blocks.ofWeight(TensorIndex{i})) {
            writeBlockScale(c, *b, out);
        } else if (const auto* s = blocks.ofScale(TensorIndex{i})) {
            out << R"(, "scale_of": )";
            out.quoted(c.tensors[s->weight].path);
        }
        out << '}';
        tensorBytes += t.dataBytes();
    }
    out << (c.tensors.empty() ? "]" : "\n ]") << ",\n \"storages\": [";
    std::uint64_t storageBytes = 0;
    for (std::uint32_t i = 0; i < c.storages.size(); ++i) {
        const auto& s = c.storages[StorageIndex{i}];
        out << (i ? ",\n  {" : "\n  {") << "\"key\": ";
        out.quoted(s.key);
        out << ", \"location\": ";
        out.quoted(s.location);
        out << ", \"dtype\": ";
        out.quoted(dtypeName(s.dtype));
        out << ", \"numel\": " << s.numel << ", \"nbytes\": " << s.nbytes << ", \"file_offset\": " << s.fileOffset;
        if (!s.record.empty()) {
            out << ", \"record\": ";
            out.quoted(s.record);
        }
        out << ", \"tensors\": " << s.tensorCount << ", \"reached_bytes\": " << s.reachedBytes << '}';
        storageBytes += s.nbytes;
    }
    out << (c.storages.empty() ? "]" : "\n ]") << ",\n \"objects\": [";
    for (std::uint32_t i = 0; i < c.objects.size(); ++i) {
        const auto& o = c.objects[ObjectIndex{i}];
        out << (i ? ",\n  {" : "\n  {") << "\"path\": ";
        out.quoted(o.path);
        out << ", \"type\": ";
        out.quoted(o.type);
        out << ", \"module\": " << boolText(o.isModule);
        // A value-like object (a numpy scalar, a path) carries the value the text table shows.
        if (const auto value = leafValueText(c, o.node, 200)) {
            out << ", \"value\": ";
            out.quoted(*value);
        }
        out << '}';
    }
    out << (c.objects.empty() ? "]" : "\n ]") << ",\n \"totals\": {\"tensors\": " << c.tensors.size()
        << ", \"tensor_bytes\": " << tensorBytes << ", \"storage_bytes\": " << storageBytes << ", \"by_location\": {";
    bool first = true;
    for (const auto& [loc, n] : c.bytesByLocation()) {
        out << (first ? "" : ", ");
        out.quoted(loc);
        out << ": " << n;
        first = false;
    }
    out << "}}";
    if (!c.safetensorsMetadata.empty()) {  // only a safetensors header has it
        out << ",\n \"metadata\": {";
        first = true;
        for (const auto& [k, v] : c.safetensorsMetadata) {
            out << (first ? "" : ", ");
            out.quoted(k);
            out << ": ";
            out.quoted(v);
            first = false;
        }
        out << '}';
    }
    if (c.undecodable.count > 0) {
        // Corrupt text, for scripts: how many strings torch.load cannot decode, and where.
        out << ",\n \"undecodable_strings\": {\"count\": " << c.undecodable.count
            << ", \"python2\": " << c.undecodable.python2 << ", \"first_at\": ";
        out.quoted(c.undecodable.firstAt);
        out << ", \"paths\": [";
        for (std::size_t i = 0; i < c.undecodable.paths.size(); ++i) {
            out << (i ? ", " : "");
            out.quoted(c.undecodable.paths[i]);
        }
        out << "]}";
    }
    if (c.torchScript) {
        writeScriptStateDict(c, out);
    }
    if (!c.exportLayout.empty()) {
        out << ",\n \"export_archive\": ";
        out.quoted(c.exportLayout);
    }
    out << ",\n \"warnings\": [";
    for (std::size_t i = 0; i < c.warnings.size(); ++i) {
        out << (i ? ", " : "");
        out.quoted(c.warnings[i]);
    }
    out << "]\n}";
}

}  // namespace

void writeInspectJson(const Checkpoint& c, std::ostream& target)
{
    JsonText out(target);
    writeInspectJsonTo(c, out);
}

}  // namespace ckpt::cli
