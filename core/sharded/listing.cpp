#include "sharded/listing.h"

#include "sharded/chunks.h"
#include "sharded/dcp.h"
#include "sharded/formats.h"
#include "sharded/fsdp.h"
#include "sharded/zero.h"

#include <algorithm>
#include <filesystem>
#include <numeric>

namespace ckpt::sharded {

std::uint64_t SetListing::totalBytes() const
{
    return std::accumulate(rows.begin(), rows.end(), std::uint64_t{0},
                           [](std::uint64_t sum, const SetRow& r) { return sum + (r.tiedTo.empty() ? r.nbytes : 0); });
}

std::optional<SetLocation> setInput(const std::string& path)
{
    auto loc = detectSet(path);
    if (loc.kind == SetKind::None) {
        return std::nullopt;
    }
    std::error_code ec;
    const auto* f = setFormat(loc.kind);
    if (!std::filesystem::is_regular_file(path, ec) || f == nullptr || f->member == nullptr) {
        return loc;
    }
    switch (f->member(loc)) {
    case MemberOpens::TheSet:
        break;
    case MemberOpens::Alone:
        loc.alone = true;
        break;
    case MemberOpens::File:
        return std::nullopt;
    }
    return loc;
}

std::optional<SetLocation> wholeSetInput(const std::string& path)
{
    auto loc = setInput(path);
    if (loc && loc->alone) {
        return std::nullopt;
    }
    return loc;
}

bool listsAsSet(SetKind kind)
{
    return setFormat(kind) != nullptr;
}

namespace {

std::string chunkFiles(const std::vector<std::string>& names)
{
    std::string s = std::to_string(names.size()) + (names.size() == 1 ? " chunk: " : " chunks: ");
    for (std::size_t i = 0; i < names.size() && i < 4; ++i) {
        s += (i ? ", " : "") + names[i];
    }
    return names.size() > 4 ? s + ", ..." : s;
}

// Each file of `pieces` once, in first use: the row's stored_in.
std::vector<std::uint32_t> filesOf(const std::vector<SetPiece>& pieces)
{
    std::vector<std::uint32_t> files;
    for (const auto& p : pieces) {
        if (std::find(files.begin(), files.end(), p.file) == files.end()) {
            files.push_back(p.file);
        }
    }
    return files;
}

// "" for a rank file that was read, "unreadable" or "missing" for one that was not.
std::string zeroFileState(const zero::Set& set, std::size_t f)
{
    if (set.sources.present(f)) {
        return {};
    }
    return set.isMissing(f) ? "missing" : "unreadable";
}

std::string rankFiles(const zero::Set& set, const zero::Tensor& t)
{
    std::vector<std::string> names;
    for (const auto f : t.files) {
        const std::string state = zeroFileState(set, f);
        names.push_back(set.files[f] + (state.empty() ? "" : " (" + state + ")"));
    }
    std::string s = std::to_string(names.size()) + (names.size() == 1 ? " file: " : " rank files: ");
    for (std::size_t i = 0; i < names.size() && i < 4; ++i) {
        s += (i ? ", " : "") + names[i];
    }
    return names.size() > 4 ? s + ", ..." : s;
}

}  // namespace

std::string whatLoadsSet(const SetListing& l)
{
    const auto fact = [&](std::string_view name) -> const std::variant<bool, std::string, std::int64_t>* {
        for (const auto& [k, v] : l.facts) {
            if (k == name) {
                return &v;
            }
        }
        return nullptr;
    };
    switch (l.kind) {
    case SetKind::HuggingFace: {
        const bool safetensors = std::any_of(l.files.begin(), l.files.end(),
                                             [](const std::string& f) { return f.ends_with(".safetensors"); });
        return safetensors ? "transformers' from_pretrained(DIR) (each shard with safetensors.torch.load_file; "
                             "torch.load reads no safetensors)"
                           : "transformers' from_pretrained(DIR) (each shard with torch.load)";
    }
    case SetKind::DeepSpeedZero:
        return "DeepSpeed's engine.load_checkpoint(DIR), or zero_to_fp32.py into one file torch.load reads";
    case SetKind::Dcp: {
        const auto* format = fact("serialization_format");
        if (format != nullptr && std::holds_alternative<std::string>(*format) &&
            std::get<std::string>(*format) == "safetensors") {
            return "no PyTorch reader as it is (see dcp-safetensors-format); `ckptscope convert DIR -o model.pt` "
                   "writes one file torch.load reads";
        }
        const auto* zstd = fact("zstd_items");
        const bool compressed =
            zstd != nullptr && std::holds_alternative<std::int64_t>(*zstd) && std::get<std::int64_t>(*zstd) > 0;
        return std::string("torch.distributed.checkpoint.load (dcp.load) into a model's state dict, or "
                           "dcp_to_torch_save(DIR, FILE) into one file torch.load reads") +
               (compressed ? " (its zstd items need the zstandard or pyzstd module)" : "");
    }
    case SetKind::FsdpRanks:
        return "each rank's own torch.load under the process groups that saved it (FSDP SHARDED_STATE_DICT)";
    default:
        break;
    }
    return "its writer's own loader";
}

SetListing listingOf(const dcp::Set& set)
{
    const auto& loc = set.loc;
    SetListing l{loc.kind, loc.dir, loc.index, set.meta.files, {}, {}, set.findings, {}, {}};
    for (std::size_t i = 0; i < set.meta.files.size(); ++i) {
        l.fileErrors.push_back(set.data.present(i) ? std::string() : set.data.error(i));
    }
    l.summary = (set.meta.version.empty() ? std::string("no version (PyTorch < 2.4)") : "version " + set.meta.version) +
                (set.meta.oldTensorProperties ? ", TensorProperties under torch.distributed._shard" : "") +
                (set.meta.subclass.empty() ? "" : ", metadata class " + set.meta.subclass) +
                (set.safetensorsFiles.empty() ? "" : ", data files in safetensors (serialization_format=SAFETENSORS)") +
                (set.zstdItems == 0 ? "" : ", " + std::to_string(set.zstdItems) + " items zstd-compressed") +
                (set.extraState.empty() ? ""
                                        : ", " + std::to_string(set.extraState.size()) +
                                              " _extra_state values (convert keeps them; --drop-extra-state "
                                              "leaves them out)");
    l.facts.emplace_back("version", set.meta.version);
    l.facts.emplace_back("old_tensor_properties", set.meta.oldTensorProperties);
    if (!set.meta.subclass.empty()) {
        l.facts.emplace_back("metadata_class", set.meta.subclass);
    }
    l.facts.emplace_back("serialization_format",
                         std::string(set.safetensorsFiles.empty() ? "torch_save" : "safetensors"));
    l.facts.emplace_back("zstd_items", static_cast<std::int64_t>(set.zstdItems));
    l.facts.emplace_back("extra_state_values", static_cast<std::int64_t>(set.extraState.size()));
    for (const auto& t : set.meta.items) {
        if (!t.isTensor) {
            l.values.push_back({t.fqn,
                                t.bytes.found ? std::optional(static_cast<std::uint32_t>(t.bytes.file)) : std::nullopt,
                                dcp::valueText(set, t)});
            continue;
        }
        SetRow row{t.fqn, t.dtype, t.size, "cpu", t.numel() * elementSize(t.dtype), {}, {}, {}, {}, {}};
        std::vector<std::string> names;
        for (const auto& c : t.chunks) {
            names.push_back(c.at.found ? set.meta.files[c.at.file] : std::string("?"));
            if (c.at.found) {
                row.pieces.push_back({static_cast<std::uint32_t>(c.at.file), c.offsets, c.sizes,
                                      detail::numelOf(c.sizes) * elementSize(t.dtype), c.at.offset, c.at.length});
            }
        }
        row.storedIn = chunkFiles(names);
        row.storedInFiles = filesOf(row.pieces);
        l.rows.push_back(std::move(row));
    }
    return l;
}

SetListing listingOf(const fsdp::Set& set)
{
    const auto& loc = set.loc;
    SetListing l{loc.kind, loc.dir, loc.index, {}, {}, {}, set.findings, {}, {}};
    for (const auto& f : set.files) {
        l.files.push_back(std::filesystem::path(f.path).filename().string());
    }
    if (set.oneFile) {
        // One rank's local shards: the set's other files are not read.
        l.facts.emplace_back("one_file", true);
        const auto& first = set.files.front();
        l.summary = "rank " + std::to_string(first.rank) + " of " + std::to_string(first.world) +
                    " opened alone (its local shards; the folder gives the consolidated tensors)";
    }
    for (const auto& t : set.tensors) {
        SetRow row{t.key, t.dtype, t.size, t.device, t.numel() * elementSize(t.dtype), {}, {}, {}, {}, {}};
        row.storedAs = t.plain ? "tensor" : (t.dtensor ? "DTensor" : "ShardedTensor");
        std::vector<std::string> names;
        for (const auto& s : t.shards) {
            names.push_back(l.files[s.file]);
            const std::vector<std::int64_t> local(s.tensor.shape.begin(), s.tensor.shape.end());
            row.pieces.push_back({static_cast<std::uint32_t>(s.file), s.box.offsets, s.box.sizes,
                                  detail::numelOf(local) * elementSize(s.tensor.dtype), std::nullopt, 0});
        }
        row.storedIn = chunkFiles(names);
        row.storedInFiles = filesOf(row.pieces);
        l.rows.push_back(std::move(row));
    }
    return l;
}

Expected<SetListing> listingOf(const zero::Set& set)
{
    const auto& loc = set.loc;
    SetListing l{loc.kind, loc.dir, loc.index, set.files, {}, {}, set.findings, {}, {}};
    for (std::size_t f = 0; f < set.files.size(); ++f) {
        l.fileErrors.push_back(zeroFileState(set, f));
    }
    for (const auto& t : set.tensors) {
        std::string device = "cpu";
        if (!t.pieces.empty()) {
            auto src = set.sources.get(t.pieces.front().source);
            if (!src) {
                return src.error();
            }
            device = (*src)->storages[t.pieces.front().storage].location;
        }
        std::string where = rankFiles(set, t);
        if (t.aliasOf) {
            where = "shares " + set.tensors[*t.aliasOf].key + " (shared_params)";
        } else if (t.role == "buffer" && t.from != t.dtype) {
            where += " (" + std::string(dtypeName(t.from)) + " buffer, cast to float32)";
        }
        SetRow row{t.key,
                   t.dtype,
                   t.shape,
                   device,
                   t.numel() * elementSize(t.dtype),
                   where,
                   t.aliasOf ? set.tensors[*t.aliasOf].key : std::string(),
                   {},
                   {},
                   {}};
        for (const auto f : t.files) {
            row.storedInFiles.push_back(static_cast<std::uint32_t>(f));
        }
        l.rows.push_back(std::move(row));
    }
    return l;
}

SetListing listingOf(const ShardedSet& set)
{
    SetListing l;
    l.kind = set.kind;
    l.dir = set.dir;
    l.index = set.indexPath;
    l.files = set.shardFiles;
    l.fileErrors = set.shardErrors;
    l.findings = set.findings;
    l.summary = "index " + std::filesystem::path(set.indexPath).filename().string();
    l.rows.reserve(set.tensors.size());
    const auto tied = set.tiedMap();
    for (const auto& t : set.tensors) {
        const TensorEntry& e = t.entry;
        const auto kept = tied.find(t.name);
        l.rows.push_back({t.name,
                          e.dtype,
                          e.shape,
                          e.location,
                          e.nbytes,
                          set.shardFiles.at(t.shard),
                          kept == tied.end() ? std::string() : kept->second,
                          {},
                          {t.shard},
                          {}});
    }
    return l;
}

}  // namespace ckpt::sharded
