// torch.export archives (`.pt2`, docs/format.md §14): the weights and constants of an exported
// program, read from the archive's JSON configs and raw records (or, in the 2.1-2.5 layout, from
// the torch.save zips inside it), and its graph signature as the export records it. Nothing of the
// graph is run: the JSON is only read.
#include "archive/zip.h"
#include "checkpoint/loaders.h"
#include "pickle/unpickler.h"
#include "util/checked.h"
#include "util/json_text.h"

#include <algorithm>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

namespace ckpt::detail {

namespace {

using Json = nlohmann::ordered_json;
using pickle::Arena;
using pickle::ValueId;

// Record names (torch/csrc/export/pt2_archive_constants.h; torch/export/__init__.py for 2.1-2.5).
constexpr std::string_view kFormatRecord = "archive_format";
constexpr std::string_view kVersionRecord = "archive_version";
constexpr std::string_view kWeightsDir = "data/weights/";
constexpr std::string_view kConstantsDir = "data/constants/";
constexpr std::string_view kModelsDir = "models/";
constexpr std::string_view kTensorConstantPrefix = "tensor_";
constexpr std::string_view kLegacyProgram = "serialized_exported_program.json";
// A JSON record larger than this is no export's (a graph of 100k nodes is tens of MiB): refused.
constexpr std::uint64_t kMaxJsonBytes = std::uint64_t{256} << 20;

Error fail(ErrorCode code, std::string message)
{
    return makeError(code, "torch.export archive: " + std::move(message));
}

// torch/_export/serde/schema.py ScalarType -> dtype.
std::optional<DType> scalarType(std::int64_t code)
{
    switch (code) {
    case 1:
        return DType::UInt8;
    case 2:
        return DType::Int8;
    case 3:
        return DType::Int16;
    case 4:
        return DType::Int32;
    case 5:
        return DType::Int64;
    case 6:
        return DType::Float16;
    case 7:
        return DType::Float32;
    case 8:
        return DType::Float64;
    case 9:
        return DType::Complex32;
    case 10:
        return DType::Complex64;
    case 11:
        return DType::Complex128;
    case 12:
        return DType::Bool;
    case 13:
        return DType::BFloat16;
    case 28:
        return DType::UInt16;
    case 29:
        return DType::Float8_e4m3fn;
    case 30:
        return DType::Float8_e5m2;
    case 31:
        return DType::Float8_e4m3fnuz;
    case 32:
        return DType::Float8_e5m2fnuz;
    case 33:
        return DType::Float8_e8m0fnu;
    case 34:
        return DType::UInt32;
    case 35:
        return DType::UInt64;
    default:
        return std::nullopt;
    }
}

struct Reader {
    Checkpoint& c;
    const archive::ZipReader& zip;
    MemoryBudget& budget;
    // Where each arena storage's bytes are: its record, and the offset of the zip holding it (a
    // torch.save zip inside a stored record of the archive, or 0).
    struct Placement {
        const archive::ZipRecord* rec = nullptr;
        std::uint64_t base = 0;
    };
    std::vector<Placement> placed;
    std::deque<archive::ZipReader> inner;  // the torch.save zips inside records, kept for `placed`
    std::vector<std::pair<std::string, ValueId>> extras;

    Expected<std::string> text(std::string_view relName) const
    {
        const archive::ZipRecord* rec = zip.find(relName);
        if (rec == nullptr) {
            return fail(ErrorCode::Corrupt, "record " + std::string(relName) + " is missing");
        }
        // Parsed JSON takes several times its text: a large record must be about as large in the
        // file (a deflated one that inflates sixteenfold past 64 MiB is a bomb, not a program).
        if (rec->size > kMaxJsonBytes ||
            (rec->size > (std::uint64_t{64} << 20) && rec->size / 16 > rec->compressedSize)) {
            return fail(ErrorCode::Limit, "record " + std::string(relName) + " holds " + std::to_string(rec->size) +
                                              " bytes, more than any export writes");
        }
        std::vector<std::byte> scratch;
        auto d = zip.data(*rec, scratch);
        if (!d) {
            return d.error();
        }
        return std::string(asText(*d));
    }

    Expected<Json> json(std::string_view relName) const
    {
        auto t = text(relName);
        if (!t) {
            return t.error();
        }
        if (jsonNestingDepth(*t) > kMaxJsonDepth) {
            return fail(ErrorCode::Limit,
                        std::string(relName) + " nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        }
        Json j = Json::parse(*t, nullptr, false);
        if (j.is_discarded()) {
            return fail(ErrorCode::Corrupt, std::string(relName) + " is not valid JSON");
        }
        return j;
    }

    ValueId str(std::string_view s) { return c.arena.str(pickle::Text(s)); }

    // A SymInt of the schema (`{"as_int": n}`); a symbolic size has no value to read.
    static std::optional<std::int64_t> symInt(const Json& j)
    {
        if (j.is_object() && j.contains("as_int") && j["as_int"].is_number_integer()) {
            return j["as_int"].get<std::int64_t>();
        }
        return std::nullopt;
    }

    // One entry of a weights or constants config (schema.PayloadMeta) as a tensor over the raw
    // record `dir + path_name`, one storage per record (aliases share it, as _build_file_map does).
    Expected<ValueId> payloadTensor(const std::string& fqn, const Json& meta, std::string_view dir,
                                    std::unordered_map<std::string, std::uint32_t>& storageOf)
    {
        const std::string what = "'" + fqn + "'";
        const Json& tm = meta.contains("tensor_meta") ? meta["tensor_meta"] : Json();
        if (!meta.contains("path_name") || !meta["path_name"].is_string() || !tm.is_object() || !tm.contains("dtype") ||
            !tm["dtype"].is_number_integer() || !tm.contains("sizes") || !tm["sizes"].is_array() ||
            !tm.contains("strides") || !tm["strides"].is_array() || tm["sizes"].size() != tm["strides"].size()) {
            return fail(ErrorCode::Corrupt, what + " has no path_name or tensor_meta");
        }
        if (tm.contains("layout") && tm["layout"].is_number_integer() && tm["layout"].get<int>() != 7) {
            return fail(ErrorCode::Unsupported,
                        what + " is not a strided tensor (layout " + std::to_string(tm["layout"].get<int>()) + ")");
        }
        const auto dtype = scalarType(tm["dtype"].get<std::int64_t>());
        if (!dtype) {
            return fail(ErrorCode::Unsupported, what + " has scalar type " +
                                                    std::to_string(tm["dtype"].get<std::int64_t>()) +
                                                    ", which torch/_export/serde/schema.py does not name");
        }
        const std::string rel = std::string(dir) + meta["path_name"].get<std::string>();
        pickle::TensorInfo info;
        std::int64_t numel = 1;
        for (std::size_t d = 0; d < tm["sizes"].size(); ++d) {
            const auto n = symInt(tm["sizes"][d]);
            const auto s = symInt(tm["strides"][d]);
            // as_strided refuses negative strides too.
            if (!n || !s || *n < 0 || *s < 0) {
                return fail(ErrorCode::Unsupported, what + " has a symbolic or negative size or stride");
            }
            if (!checkedMul(numel, *n, numel)) {
                return fail(ErrorCode::Corrupt, what + " has more elements than a tensor can hold");
            }
            info.shape.push_back(*n);
            info.stride.push_back(*s);
        }
        if (tm.contains("storage_offset")) {
            const auto off = symInt(tm["storage_offset"]);
            if (!off || *off < 0) {
                return fail(ErrorCode::Unsupported, what + " has a symbolic or negative storage offset");
            }
            info.storageOffset = *off;
        }
        std::string location = "cpu";
        if (tm.contains("device") && tm["device"].is_object() && tm["device"].contains("type") &&
            tm["device"]["type"].is_string()) {
            location = tm["device"]["type"].get<std::string>();
            if (tm["device"].contains("index") && tm["device"]["index"].is_number_integer()) {
                location += ":" + std::to_string(tm["device"]["index"].get<std::int64_t>());
            }
        }
        auto [it, added] = storageOf.try_emplace(rel, static_cast<std::uint32_t>(c.arena.storages.size()));
        if (added) {
            const archive::ZipRecord* rec = zip.find(rel);
            if (rec == nullptr) {
                return fail(ErrorCode::Corrupt, "record " + rel + " of " + what + " is missing");
            }
            pickle::StorageRef ref;
            ref.key = pickle::Text(rel);
            ref.location = pickle::Text(location);
            ref.dtype = *dtype;
            ref.className = pickle::Text(storageClassName(*dtype));
            // _build_file_map: the record is the storage, numel = bytes / element size.
            ref.numel = rec->size / std::max<std::uint32_t>(1, elementSize(*dtype));
            c.arena.storages.push_back(ref);
            placed.push_back({rec, 0});
        } else if (c.arena.storages[it->second].dtype != *dtype) {
            c.arena.storages[it->second].conflicting = true;
        }
        info.rebuild = pickle::internGlobal({"torch._utils", "_rebuild_tensor_v2"});
        info.storage = c.arena.storage(it->second);
        info.dtype = *dtype;
        info.requiresGrad =
            tm.contains("requires_grad") && tm["requires_grad"].is_boolean() && tm["requires_grad"].get<bool>();
        // torch.export.load gives an nn.Parameter where the config says is_param.
        if (meta.contains("is_param") && meta["is_param"].is_boolean() && meta["is_param"].get<bool>()) {
            info.isParameter = true;
            info.parameterRequiresGrad = info.requiresGrad;
            info.requiresGrad = false;
        }
        return c.arena.tensor(std::move(info));
    }

    // A weights or constants config (`data/weights/<model>_weights_config.json`): fqn -> tensor, in
    // `order` first (the graph signature's), then the config's own order. Pickled payloads (tensor
    // subclasses, custom objects) are named, not read.
    Expected<ValueId> payloads(std::string_view dir, const std::string& configName,
                               const std::vector<std::string>& order, const char* what)
    {
        auto cfg = json(std::string(dir) + configName);
        if (!cfg) {
            return cfg.error();
        }
        if (!cfg->is_object() || !cfg->contains("config") || !(*cfg)["config"].is_object()) {
            return fail(ErrorCode::Corrupt, configName + " has no config object");
        }
        const Json& config = (*cfg)["config"];
        std::vector<std::string> keys;
        std::unordered_map<std::string, bool> listed;
        for (const auto& k : order) {
            if (config.contains(k) && listed.emplace(k, true).second) {
                keys.push_back(k);
            }
        }
        for (auto it = config.begin(); it != config.end(); ++it) {
            if (listed.emplace(it.key(), true).second) {
                keys.push_back(it.key());
            }
        }
        std::unordered_map<std::string, std::uint32_t> storageOf;
        pickle::IdList items;
        std::size_t notRead = 0;
        for (const auto& k : keys) {
            const Json& meta = config[k];
            if (!meta.is_object()) {
                return fail(ErrorCode::Corrupt, configName + ": '" + k + "' is not an object");
            }
            const bool pickled =
                meta.contains("use_pickle") && meta["use_pickle"].is_boolean() && meta["use_pickle"].get<bool>();
            const std::string pathName = meta.contains("path_name") && meta["path_name"].is_string()
                                             ? meta["path_name"].get<std::string>()
                                             : std::string();
            // A pickled tensor (a subclass) is a torch.save file, read in place; a custom object is
            // a TorchScript pickle and an opaque one a plain pickle: both only named.
            if (pickled && (dir == kWeightsDir || pathName.starts_with(kTensorConstantPrefix))) {
                if (const archive::ZipRecord* rec = zip.find(std::string(dir) + pathName)) {
                    auto v = embeddedTorchSave(*rec);
                    if (v) {
                        items.push_back(str(k));
                        items.push_back(*v);
                        continue;
                    }
                    c.warnings.push_back("'" + k + "': " + v.error().message);
                }
            }
            if (pickled || (dir == kConstantsDir && !pathName.starts_with(kTensorConstantPrefix))) {
                ++notRead;
                items.push_back(str(k));
                items.push_back(str("<" + std::string(pickled ? "pickled payload " : "object ") + std::string(dir) +
                                    pathName + ", not read>"));
                continue;
            }
            auto t = payloadTensor(k, meta, dir, storageOf);
            if (!t) {
                return t.error();
            }
            items.push_back(str(k));
            items.push_back(*t);
        }
        if (notRead > 0) {
            c.warnings.push_back(std::to_string(notRead) + " " + what +
                                 " of the export are pickled objects (custom or opaque objects, or tensors that "
                                 "could not be read), which torch.export.load unpickles: named, not read");
        }
        return c.arena.dict(std::move(items), true);
    }

    // A torch.save zip stored whole as a record of the archive (the 2.1-2.5 layout's
    // serialized_state_dict.pt, or `data/weights/<model>.pt`): its data.pkl read into the arena, its
    // storages keyed `<record>/<key>` and placed in the record's bytes.
    Expected<ValueId> embeddedTorchSave(const archive::ZipRecord& rec)
    {
        if (rec.size == 0) {
            return c.arena.dict({}, false);  // serialize_torch_artifact(None): b""
        }
        if (rec.method != 0) {
            return fail(ErrorCode::Unsupported, "record " + rec.name +
                                                    " is compressed: the torch.save file inside "
                                                    "it is read only from a stored record");
        }
        auto z = archive::ZipReader::parse(c.bytes.subspan(rec.dataOffset, rec.size));
        if (!z) {
            return fail(ErrorCode::Corrupt, "record " + rec.name + " is no torch.save zip: " + z.error().message);
        }
        const archive::ZipReader& in = inner.emplace_back(std::move(*z));
        const archive::ZipRecord* pkl = in.find("data.pkl");
        if (pkl == nullptr) {
            return fail(ErrorCode::Corrupt, "record " + rec.name + " is a zip without data.pkl");
        }
        std::vector<std::byte> scratch;
        auto data = in.data(*pkl, scratch);
        if (!data) {
            return data.error();
        }
        // Keys are per zip: the storages read so far keep theirs apart while this pickle is read.
        auto& storages = c.arena.storages;
        const std::size_t before = storages.size();
        const std::string mark = "\x01";
        for (auto& s : storages) {
            s.key = mark + std::string(s.key.view());
        }
        pickle::UnpickleOptions opts;
        opts.budget = budget;
        auto r = pickle::unpickle(*data, c.arena, opts);
        for (std::size_t i = 0; i < before; ++i) {
            storages[i].key = storages[i].key.view().substr(mark.size());
        }
        if (!r) {
            storages.resize(before);
            return fail(r.error().code, rec.name + ": data.pkl: " + r.error().message);
        }
        c.opcodesSeen |= r->opcodesSeen;
        for (auto& w : r->warnings) {
            c.warnings.push_back(rec.name + ": " + std::move(w));
        }
        std::vector<Placement> found;
        for (std::size_t i = before; i < storages.size(); ++i) {
            const archive::ZipRecord* stored = in.find("data/" + std::string(storages[i].key.view()));
            if (stored == nullptr) {
                const std::string key(storages[i].key.view());
                storages.resize(before);  // its values stay unreachable in the arena
                return fail(ErrorCode::Corrupt, "storage record data/" + key + " is missing from " + rec.name);
            }
            found.push_back({stored, rec.dataOffset});
        }
        for (std::size_t i = before; i < storages.size(); ++i) {
            storages[i].key = pickle::Text(rec.name + "/" + std::string(storages[i].key.view()));
        }
        placed.insert(placed.end(), found.begin(), found.end());
        return r->root;
    }

    // The graph signature as torch prints ExportGraphSignature (`p_fc1_weight: PARAMETER
    // target='fc1.weight'`): per input and output spec, its graph argument's name keying the rest
    // of that line (a dict, so each is a row of the key tree); the parameter and buffer names in
    // input order go to `order`.
    ValueId signature(const Json& sig, std::vector<std::string>& order)
    {
        auto argName = [](const Json& spec) -> std::string {
            if (!spec.contains("arg")) {
                return "?";
            }
            const Json& arg = spec["arg"];
            if (arg.contains("name") && arg["name"].is_string()) {
                return arg["name"].get<std::string>();
            }
            for (const Json& v : arg) {
                if (v.is_object() && v.contains("name") && v["name"].is_string()) {
                    return v["name"].get<std::string>();
                }
            }
            return arg.is_object() && arg.size() == 1 ? arg.begin().key() : std::string("?");
        };
        auto targetOf = [](const Json& spec) -> std::string {
            for (const char* k :
                 {"parameter_name", "buffer_name", "tensor_constant_name", "custom_obj_name", "user_input_name"}) {
                if (spec.contains(k) && spec[k].is_string()) {
                    return spec[k].get<std::string>();
                }
            }
            return {};
        };
        auto list = [&](const char* field, bool inputs) {
            pickle::IdList out;  // name, text, name, text, ...
            if (!sig.is_object() || !sig.contains(field) || !sig[field].is_array()) {
                return c.arena.dict(std::move(out), false);
            }
            for (const Json& entry : sig[field]) {
                if (!entry.is_object() || entry.size() != 1 || !entry.begin()->is_object()) {
                    continue;
                }
                std::string kind = entry.begin().key();
                const Json& spec = *entry.begin();
                const std::string target = targetOf(spec);
                if (inputs && (kind == "parameter" || kind == "buffer") && !target.empty()) {
                    order.push_back(target);
                }
                // torch.export.graph_signature's InputKind/OutputKind names, as it prints them.
                if (kind == "tensor_constant") {
                    kind = "constant_tensor";
                } else if (kind == "constant_input") {
                    kind = "user_input";
                }
                for (char& ch : kind) {
                    ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
                }
                std::string line = kind;
                if (!target.empty()) {
                    line += " target='" + target + "'";
                }
                if (spec.contains("persistent") && spec["persistent"].is_boolean()) {
                    line += spec["persistent"].get<bool>() ? " persistent=True" : " persistent=False";
                }
                out.push_back(str(argName(spec)));
                out.push_back(str(line));
            }
            return c.arena.dict(std::move(out), false);
        };
        pickle::IdList items;
        items.push_back(str("inputs"));
        items.push_back(list("input_specs", true));
        items.push_back(str("outputs"));
        items.push_back(list("output_specs", false));
        return c.arena.dict(std::move(items), false);
    }

    // The versions an export records: the archive's records, the program's schema and torch.
    void versions(const Json& program, const std::vector<std::string_view>& records, const std::string& layout)
    {
        pickle::IdList items;
        items.push_back(str("layout"));
        items.push_back(str(layout));
        for (std::string_view name : records) {
            if (zip.find(name) == nullptr) {
                continue;
            }
            auto t = text(name);
            if (!t) {
                continue;
            }
            std::string v = *t;
            while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) {
                v.pop_back();
            }
            items.push_back(str(name));
            items.push_back(str(v));
        }
        if (program.contains("schema_version") && program["schema_version"].is_object()) {
            const Json& s = program["schema_version"];
            if (s.contains("major") && s.contains("minor")) {
                items.push_back(str("schema_version"));
                items.push_back(str(s["major"].dump() + "." + s["minor"].dump()));
            }
        }
        if (program.contains("torch_version") && program["torch_version"].is_string()) {
            items.push_back(str("torch_version"));
            items.push_back(str(program["torch_version"].get<std::string>()));
        }
        extras.emplace_back("[archive]", c.arena.dict(std::move(items), false));
    }

    ValueId programSignature(const Json& program, std::vector<std::string>& order)
    {
        const Json* sig = nullptr;
        if (program.contains("graph_module") && program["graph_module"].is_object() &&
            program["graph_module"].contains("signature")) {
            sig = &program["graph_module"]["signature"];
        }
        return signature(sig != nullptr ? *sig : Json::object(), order);
    }

    // 2.6+ (torch/export/pt2_archive/_package.py): `<folder>/models/<model>.json`, the weights and
    // constants configs and raw records under data/.
    Expected<void> readCurrent()
    {
        std::string model;
        std::size_t models = 0;
        const std::string prefix = c.archiveFolder + "/" + std::string(kModelsDir);
        for (const auto& rec : zip.records()) {
            if (rec.name.starts_with(prefix) && rec.name.ends_with(".json") &&
                rec.name.find('/', prefix.size()) == std::string::npos) {
                ++models;
                const std::string name = rec.name.substr(prefix.size(), rec.name.size() - prefix.size() - 5);
                if (model.empty() || name == "model") {
                    model = name;
                }
            }
        }
        if (model.empty()) {
            return fail(ErrorCode::Unsupported, "no exported program under models/ (an AOTInductor package's "
                                                "weights live in its compiled library)");
        }
        if (models > 1) {
            c.warnings.push_back("the archive holds " + std::to_string(models) + " exported programs; '" + model +
                                 "' is shown");
        }
        auto program = json(std::string(kModelsDir) + model + ".json");
        if (!program) {
            return program.error();
        }
        std::vector<std::string> order;
        const ValueId sig = programSignature(*program, order);
        // The 2.6-2.7 layout kept each torch.save'd dict as data/weights/<model>.pt.
        const archive::ZipRecord* legacyWeights = zip.find(std::string(kWeightsDir) + model + ".pt");
        auto weights = legacyWeights != nullptr
                           ? embeddedTorchSave(*legacyWeights)
                           : payloads(kWeightsDir, model + "_weights_config.json", order, "weights");
        if (!weights) {
            return weights.error();
        }
        c.root = *weights;
        const archive::ZipRecord* legacyConstants = zip.find(std::string(kConstantsDir) + model + ".pt");
        Expected<ValueId> constants = c.arena.dict({}, false);
        if (legacyConstants != nullptr) {
            constants = embeddedTorchSave(*legacyConstants);
        } else if (zip.find(std::string(kConstantsDir) + model + "_constants_config.json") != nullptr) {
            constants = payloads(kConstantsDir, model + "_constants_config.json", {}, "constants");
        }
        if (!constants) {
            return constants.error();
        }
        extras.emplace_back("[constants]", *constants);
        extras.emplace_back("[graph_signature]", sig);
        versions(*program, {kFormatRecord, kVersionRecord, ".data/version", "byteorder"}, "pt2");
        return {};
    }

    // 2.1-2.5 (torch/_export/__init__.py `save`, still read by torch/export/__init__.py `load`):
    // records at the zip's root, the state dict and constants as torch.save files.
    Expected<void> readRootLevel()
    {
        auto program = json(kLegacyProgram);
        if (!program) {
            return program.error();
        }
        std::vector<std::string> order;
        const ValueId sig = programSignature(*program, order);
        auto part = [&](std::string_view a, std::string_view b) -> Expected<ValueId> {
            const archive::ZipRecord* rec = zip.find(a);
            rec = rec != nullptr ? rec : zip.find(b);
            if (rec == nullptr) {
                return fail(ErrorCode::Corrupt, "record " + std::string(a) + " is missing");
            }
            return embeddedTorchSave(*rec);
        };
        auto weights = part("serialized_state_dict.pt", "serialized_state_dict.json");
        if (!weights) {
            return weights.error();
        }
        c.root = *weights;
        auto constants = part("serialized_constants.pt", "serialized_constants.json");
        if (!constants) {
            return constants.error();
        }
        extras.emplace_back("[constants]", *constants);
        extras.emplace_back("[graph_signature]", sig);
        versions(*program, {"version"}, "pt2 (2.1-2.5, records at the root)");
        return {};
    }
};

}  // namespace

bool isExportArchive(const archive::ZipReader& zip)
{
    if (zip.flat()) {
        return zip.find(kLegacyProgram) != nullptr;
    }
    if (zip.find("data.pkl") != nullptr) {
        return false;
    }
    const archive::ZipRecord* format = zip.find(kFormatRecord);
    if (format != nullptr && format->size <= 16) {
        std::vector<std::byte> scratch;
        if (auto d = zip.data(*format, scratch); d && asText(*d).starts_with("pt2")) {
            return true;
        }
    }
    const std::string models = zip.folder() + "/" + std::string(kModelsDir);
    return std::ranges::any_of(zip.records(), [&](const archive::ZipRecord& rec) {
        return rec.name.starts_with(models) && rec.name.ends_with(".json");
    });
}

Expected<void> loadExportArchive(Checkpoint& c, const archive::ZipReader& zip, MemoryBudget& budget)
{
    budget.pickleBytes = c.bytes.size();  // JSON configs and embedded pickles play the pickle's part
    c.exportLayout = zip.flat() ? "pt2-root" : "pt2";
    Reader r{c, zip, budget, {}, {}, {}};
    if (auto ok = zip.flat() ? r.readRootLevel() : r.readCurrent(); !ok) {
        return ok;
    }
    if (c.arena[c.root].kind != pickle::Kind::Dict) {
        return fail(ErrorCode::Corrupt, "its state dict is no dict");
    }
    c.rootExtras = std::move(r.extras);
    if (auto ok = adoptStorages(c); !ok) {
        return ok;
    }
    for (std::size_t i = 0; i < c.storages.size(); ++i) {
        placeRecord(c.storages[StorageIndex{static_cast<std::uint32_t>(i)}], *r.placed[i].rec, r.placed[i].base);
    }
    return checkStorageBytes(c);
}

}  // namespace ckpt::detail
