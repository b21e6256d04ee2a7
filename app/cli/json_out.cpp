#include "cli/json_out.h"

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

nlohmann::ordered_json inspectJson(const Checkpoint& c)
{
    using nlohmann::ordered_json;
    ordered_json j;
    j["schema"] = kJsonSchema;
    j["file"] = c.path;
    j["format"] = formatName(c.format);
    j["file_size"] = c.fileSize;
    if (c.format == Format::TorchZip) {
        j["archive_folder"] = c.archiveFolder;
        j["byteorder"] = c.byteorder;
    }
    if (c.format != Format::Safetensors) {
        j["pickle_protocol"] = c.pickleProtocol;
    }

    auto tensors = ordered_json::array();
    std::uint64_t tensorBytes = 0;
    for (const auto& t : c.tensors) {
        ordered_json tj;
        tj["path"] = t.path;
        tj["dtype"] = dtypeName(t.dtype);
        tj["shape"] = shapeJson(t.shape);
        tj["stride"] = shapeJson(t.stride);
        tj["storage_offset"] = t.storageOffset;
        tj["storage"] = t.storage == kNoIndex ? ordered_json(nullptr) : ordered_json(c.storages[t.storage].key);
        tj["location"] = t.location;
        tj["numel"] = t.numel;
        tj["nbytes"] = t.nbytes;
        tj["requires_grad"] = t.requiresGrad;
        tj["parameter"] = t.isParameter;
        tj["contiguous"] = t.contiguous;
        if (t.form != pickle::TensorForm::Strided) {
            static constexpr const char* kForms[] = {"strided", "quantized", "sparse", "meta",
                                                     "wrapper", "device",    "nested"};
            tj["layout"] = kForms[static_cast<int>(t.form)];  // NOLINT(cppcoreguidelines-pro-bounds-constant-array-index)
        }
        tensorBytes += t.nbytes;
        tensors.push_back(std::move(tj));
    }
    j["tensors"] = std::move(tensors);

    auto storages = ordered_json::array();
    std::uint64_t storageBytes = 0;
    for (const auto& s : c.storages) {
        ordered_json sj;
        sj["key"] = s.key;
        sj["location"] = s.location;
        sj["dtype"] = dtypeName(s.dtype);
        sj["numel"] = s.numel;
        sj["nbytes"] = s.nbytes;
        sj["file_offset"] = s.fileOffset;
        if (!s.record.empty()) {
            sj["record"] = s.record;
        }
        sj["tensors"] = s.tensorCount;
        sj["reached_bytes"] = s.reachedBytes;
        storageBytes += s.nbytes;
        storages.push_back(std::move(sj));
    }
    j["storages"] = std::move(storages);

    auto objects = ordered_json::array();
    for (const auto& o : c.objects) {
        objects.push_back({{"path", o.path}, {"type", o.type}, {"module", o.isModule}});
    }
    j["objects"] = std::move(objects);

    ordered_json totals;
    totals["tensors"] = c.tensors.size();
    totals["tensor_bytes"] = tensorBytes;
    totals["storage_bytes"] = storageBytes;
    ordered_json by = ordered_json::object();
    for (const auto& [loc, n] : c.bytesByLocation()) {
        by[loc] = n;
    }
    totals["by_location"] = std::move(by);
    j["totals"] = std::move(totals);
    if (c.format == Format::Safetensors && !c.safetensorsMetadata.empty()) {
        ordered_json md = ordered_json::object();
        for (const auto& [k, v] : c.safetensorsMetadata) {
            md[k] = v;
        }
        j["metadata"] = std::move(md);
    }
    j["warnings"] = c.warnings;
    return j;
}

}  // namespace ckpt::cli
