// What a TorchScript archive adds to a torch.save zip (docs/format.md §11): the class sources under
// `code/`, scanned for the parameter and buffer lists that data.pkl's flat attribute dicts lack.
#include "archive/zip.h"
#include "checkpoint/loaders.h"
#include "pickle/unpickler.h"
#include "util/checked.h"
#include "util/json_text.h"
#include "util/printable.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace ckpt::detail {

namespace {

// A class source larger than this is no printer output (the largest in the corpus, detectron2's
// whole model in one file, is 0.3 MiB): it is left unread rather than inflated.
constexpr std::uint64_t kMaxSourceBytes = std::uint64_t{16} << 20;
// And all of them together: 500 deflated 16 MiB sources (a few MB of file) were 8 GiB to inflate.
// A real archive's code/ is a few MiB at most.
constexpr std::uint64_t kMaxSourcesTotal = std::uint64_t{64} << 20;

}  // namespace

namespace {

// caffe2/proto/caffe2.proto TensorProto.DataType, by protobuf JSON name or number.
std::optional<DType> caffe2DataType(const nlohmann::json& j)
{
    static const std::pair<const char*, DType> kNames[] = {
        {"FLOAT", DType::Float32},   {"INT32", DType::Int32},   {"BYTE", DType::UInt8},  {"BOOL", DType::Bool},
        {"UINT8", DType::UInt8},     {"INT8", DType::Int8},     {"INT16", DType::Int16}, {"INT64", DType::Int64},
        {"FLOAT16", DType::Float16}, {"DOUBLE", DType::Float64}};
    static const std::pair<int, DType> kCodes[] = {
        {1, DType::Float32}, {2, DType::Int32}, {3, DType::UInt8},  {5, DType::Bool},     {6, DType::UInt8},
        {7, DType::Int8},    {9, DType::Int16}, {10, DType::Int64}, {12, DType::Float16}, {13, DType::Float64}};
    if (j.is_string()) {
        for (const auto& [name, t] : kNames) {
            if (j.get<std::string>() == name) {
                return t;
            }
        }
    } else if (j.is_number_integer()) {
        for (const auto& [code, t] : kCodes) {
            if (j.get<std::int64_t>() == code) {
                return t;
            }
        }
    }
    return std::nullopt;
}

// A protobuf int64 in JSON: a string of digits, or a number.
std::optional<std::int64_t> protoInt(const nlohmann::json& j)
{
    if (j.is_number_integer()) {
        return j.get<std::int64_t>();
    }
    if (!j.is_string()) {
        return std::nullopt;
    }
    const auto& t = j.get_ref<const std::string&>();
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return ec == std::errc() && end == t.data() + t.size() ? std::optional<std::int64_t>(v) : std::nullopt;
}

Error layoutError(ErrorCode code, const std::string& message)
{
    return makeError(code, "TorchScript archive of PyTorch 1.0-1.2 (model.json): " + message);
}

struct FirstLayout {
    Checkpoint& c;
    const archive::ZipReader& zip;
    std::vector<pickle::ValueId> tensors;  // model.json's tensor table
    std::vector<const archive::ZipRecord*> records;

    Expected<void> tensorTable(const nlohmann::json& model)
    {
        if (!model.contains("tensors")) {
            return {};
        }
        if (!model["tensors"].is_array()) {
            return layoutError(ErrorCode::Corrupt, "its tensors are no list");
        }
        std::unordered_map<std::string, std::uint32_t> storageOf;
        for (const auto& t : model["tensors"]) {
            const std::string what = "tensor " + std::to_string(tensors.size());
            if (!t.is_object() || !t.contains("data") || !t["data"].is_object() || !t["data"].contains("key") ||
                !t["data"]["key"].is_string()) {
                return layoutError(ErrorCode::Corrupt, what + " names no record");
            }
            if (t.contains("isQuantized") && t["isQuantized"].is_boolean() && t["isQuantized"].get<bool>()) {
                return layoutError(ErrorCode::Unsupported, what + " is quantized, which ckptscope does not read here");
            }
            const auto dtype = t.contains("dataType") ? caffe2DataType(t["dataType"]) : std::nullopt;
            if (!dtype) {
                return layoutError(ErrorCode::Unsupported, what + " has a data type ckptscope does not know");
            }
            pickle::TensorInfo info;
            const nlohmann::json none = nlohmann::json::array();
            const auto& dims = t.contains("dims") ? t["dims"] : none;
            const auto& strides = t.contains("strides") ? t["strides"] : none;
            if (!dims.is_array() || !strides.is_array() || dims.size() != strides.size()) {
                return layoutError(ErrorCode::Corrupt, what + " has dims and strides of different lengths");
            }
            std::int64_t numel = 1;
            for (std::size_t d = 0; d < dims.size(); ++d) {
                const auto n = protoInt(dims[d]);
                const auto st = protoInt(strides[d]);
                if (!n || !st || *n < 0 || *st < 0 || !checkedMul(numel, *n, numel)) {
                    return layoutError(ErrorCode::Corrupt, what + " has a size or stride no tensor can have");
                }
                info.shape.push_back(*n);
                info.stride.push_back(*st);
            }
            const auto offset = t.contains("offset") ? protoInt(t["offset"]) : std::optional<std::int64_t>(0);
            if (!offset || *offset < 0) {
                return layoutError(ErrorCode::Corrupt, what + " has a negative storage offset");
            }
            info.storageOffset = *offset;
            const std::string key = t["data"]["key"].get<std::string>();
            auto [it, added] = storageOf.try_emplace(key, static_cast<std::uint32_t>(c.arena.storages.size()));
            if (added) {
                const archive::ZipRecord* rec = zip.find(key);
                if (rec == nullptr) {
                    return layoutError(ErrorCode::Corrupt, "record " + key + " of " + what + " is missing");
                }
                pickle::StorageRef ref;
                ref.key = pickle::Text(key);
                ref.location =
                    pickle::Text(t.contains("device") && t["device"].is_string() ? t["device"].get<std::string>()
                                                                                 : std::string("cpu"));
                ref.dtype = *dtype;
                ref.className = pickle::Text(storageClassName(*dtype));
                // LEGACY_loadTensor: the record is the storage, record size / element size elements.
                ref.numel = rec->size / std::max<std::uint32_t>(1, elementSize(*dtype));
                c.arena.storages.push_back(ref);
                records.push_back(rec);
            }
            info.rebuild = pickle::internGlobal({"torch._utils", "_rebuild_tensor_v2"});
            info.storage = c.arena.storage(it->second);
            info.dtype = *dtype;
            info.requiresGrad =
                t.contains("requiresGrad") && t["requiresGrad"].is_boolean() && t["requiresGrad"].get<bool>();
            tensors.push_back(c.arena.tensor(std::move(info)));
        }
        return {};
    }

    // LEGACY_convertModule's walk: each module's parameters and buffers (ParameterDef, naming a
    // tensor of the table), then its submodules, keys joined with dots as state_dict() joins them.
    Expected<void> module(const nlohmann::json& m, const std::string& prefix, int depth, pickle::IdList& items)
    {
        if (depth > 200 || !m.is_object()) {
            return layoutError(ErrorCode::Corrupt, "its modules nest too deep or are no objects");
        }
        if (m.contains("parameters") && m["parameters"].is_array()) {
            for (const bool buffers : {false, true}) {
                for (const auto& p : m["parameters"]) {
                    const bool isBuffer = p.is_object() && p.contains("isBuffer") && p["isBuffer"].is_boolean() &&
                                          p["isBuffer"].get<bool>();
                    if (isBuffer != buffers) {
                        continue;
                    }
                    const auto id = p.is_object() && p.contains("tensorId") ? protoInt(p["tensorId"])
                                                                            : std::optional<std::int64_t>(0);
                    if (!p.is_object() || !p.contains("name") || !p["name"].is_string() || !id || *id < 0 ||
                        static_cast<std::uint64_t>(*id) >= tensors.size()) {
                        return layoutError(ErrorCode::Corrupt,
                                           "a parameter of module '" + prefix + "' names no tensor of the table");
                    }
                    items.push_back(c.arena.str(pickle::Text(prefix + p["name"].get<std::string>())));
                    items.push_back(tensors[static_cast<std::size_t>(*id)]);
                }
            }
        }
        if (m.contains("submodules") && m["submodules"].is_array()) {
            for (const auto& sub : m["submodules"]) {
                const std::string name = sub.is_object() && sub.contains("name") && sub["name"].is_string()
                                             ? sub["name"].get<std::string>()
                                             : std::string("?");
                if (auto ok = module(sub, prefix + name + ".", depth + 1, items); !ok) {
                    return ok;
                }
            }
        }
        return {};
    }
};

}  // namespace

Expected<void> loadFirstScriptLayout(Checkpoint& c, const archive::ZipReader& zip)
{
    const archive::ZipRecord* rec = zip.find("model.json");
    if (rec == nullptr || rec->size > kMaxSourceBytes) {
        return layoutError(ErrorCode::Limit, "its model.json is missing or larger than any export writes");
    }
    std::vector<std::byte> scratch;
    auto d = zip.data(*rec, scratch);
    if (!d) {
        return d.error();
    }
    if (jsonNestingDepth(asText(*d)) > kMaxJsonDepth) {
        return layoutError(ErrorCode::Limit, "its model.json nests too deep");
    }
    const auto model = nlohmann::json::parse(asText(*d), nullptr, false);
    if (!model.is_object()) {
        return layoutError(ErrorCode::Corrupt, "its model.json is no JSON object");
    }
    FirstLayout r{c, zip, {}, {}};
    if (auto ok = r.tensorTable(model); !ok) {
        return ok;
    }
    pickle::IdList items;
    if (model.contains("mainModule")) {
        if (auto ok = r.module(model["mainModule"], "", 0, items); !ok) {
            return ok;
        }
    }
    c.root = c.arena.dict(std::move(items), true);
    // torch/csrc/jit/export.cpp of 1.0 writes producer_name "pytorch" and producer_version; 1.3
    // replaced the layout by data.pkl's.
    pickle::IdList about;
    for (const char* field : {"producerName", "producerVersion", "protoVersion"}) {
        if (model.contains(field) && (model[field].is_string() || model[field].is_number_integer())) {
            about.push_back(c.arena.str(pickle::Text(field)));
            about.push_back(c.arena.str(
                pickle::Text(model[field].is_string() ? model[field].get<std::string>() : model[field].dump())));
        }
    }
    c.rootExtras.emplace_back("[model.json]", c.arena.dict(std::move(about), false));
    std::string producer =
        model.contains("producerVersion") && model["producerVersion"].is_string()
            ? "; model.json's producerVersion is " + displayText(model["producerVersion"].get<std::string>())
            : std::string();
    c.warnings.push_back(
        "a TorchScript archive in the first layout (model.json, tensors/N" +
        std::string(zip.find("attributes.pkl") != nullptr ? ", attributes.pkl" : "") +
        ", no data.pkl; written by PyTorch 1.0-1.2" + producer +
        "): read as its modules' parameters and buffers; torch.load refuses it (no data.pkl), and "
        "torch.jit.load of Debian's 1.13 and of 2.14 says \"Legacy model format is not supported on mobile.\"");
    if (auto ok = adoptStorages(c); !ok) {
        return ok;
    }
    for (std::size_t i = 0; i < c.storages.size(); ++i) {
        placeRecord(c.storages[StorageIndex{static_cast<std::uint32_t>(i)}], *r.records[i], 0);
    }
    return checkStorageBytes(c);
}

void readScriptClasses(const archive::ZipReader& zip, Checkpoint& c)
{
    const std::string prefix = zip.folder() + "/";
    std::vector<std::byte> scratch;
    std::size_t unreadable = 0;
    std::uint64_t inflated = 0;
    for (const auto& rec : zip.records()) {
        if (rec.name.compare(0, prefix.size(), prefix) != 0) {
            continue;
        }
        const std::string module = scriptModuleOfRecord(std::string_view(rec.name).substr(prefix.size()));
        if (module.empty()) {
            continue;
        }
        if (rec.size > kMaxSourceBytes || rec.size > kMaxSourcesTotal - inflated) {
            ++unreadable;
            continue;
        }
        inflated += rec.size;
        auto data = zip.data(rec, scratch);
        if (!data) {
            ++unreadable;
            continue;
        }
        parseScriptSource(module, asText(*data), c.scriptClasses);
    }
    if (unreadable > 0) {
        c.warnings.push_back(std::to_string(unreadable) +
                             " TorchScript class source(s) under code/ could not be read: their modules' parameters "
                             "and buffers are not known");
    }
}

void readScriptConstants(const archive::ZipReader& zip, Checkpoint& c, const MemoryBudget& budget)
{
    const archive::ZipRecord* rec = zip.find("constants.pkl");
    if (rec == nullptr) {
        return;
    }
    auto& storages = c.arena.storages;
    const std::size_t dataStorages = storages.size();
    // The unpickler shares a storage between pickles by key, and constants/0 is not data/0: the
    // data keys carry their folder while constants.pkl is read, so no constant joins one of them.
    for (auto& s : storages) {
        s.key = "data/" + s.key;
    }
    const auto restore = [&](bool keepConstants) {
        if (!keepConstants) {
            storages.resize(dataStorages);
        }
        for (std::size_t i = 0; i < storages.size(); ++i) {
            if (i < dataStorages) {
                storages[i].key = storages[i].key.view().substr(5);
            } else {
                storages[i].key = "constants/" + storages[i].key;
            }
        }
    };
    std::vector<std::byte> scratch;
    auto data =
        rec->method != 0 && rec->size > budget.limit() ? Expected<Bytes>(budget.exceeded()) : zip.data(*rec, scratch);
    if (!data) {
        restore(false);
        c.warnings.push_back("constants.pkl cannot be read (" + data.error().message + "): its tensors are not shown");
        return;
    }
    pickle::UnpickleOptions opts;
    opts.budget = budget;
    auto r = pickle::unpickle(*data, c.arena, opts);
    if (!r) {
        restore(false);
        c.warnings.push_back("constants.pkl: " + r.error().message + ": its tensors are not shown");
        return;
    }
    restore(true);
    c.rootExtras.emplace_back("constants.pkl", r->root);
    for (auto& w : r->warnings) {
        c.warnings.push_back("constants.pkl: " + std::move(w));
    }
}

}  // namespace ckpt::detail
