// DeepSpeed ZeRO sets (SHARDED.md §2), checked without consolidating: the rank-0 model states say
// the data-parallel world size, which fixes the rank files zero_to_fp32.py will look for.
#include "sharded/sharded.h"

#include <filesystem>

namespace ckpt::sharded {

namespace fs = std::filesystem;

namespace {

std::optional<std::int64_t> intAt(const Checkpoint& c, std::string_view path)
{
    const NodeIndex n = c.find(path);
    if (!n.valid() || c.nodes[n].kind != NodeKind::Scalar || c.arena[c.nodes[n].value].kind != pickle::Kind::Int) {
        return std::nullopt;
    }
    return c.arena[c.nodes[n].value].i;
}

bool isFile(const fs::path& p)
{
    std::error_code ec;
    return fs::is_regular_file(p, ec);
}

std::string rankName(bool stage3, std::int64_t rank, bool optim)
{
    if (!optim && !stage3) {
        return "mp_rank_00_model_states.pt";
    }
    return "zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_" + (optim ? "optim" : "model") + "_states.pt";
}

}  // namespace

Expected<std::vector<SetFinding>> zeroFindings(const SetLocation& loc)
{
    const fs::path tag(loc.index);
    const bool stage3 = isFile(tag / rankName(true, 0, false));
    const fs::path rank0 = tag / rankName(stage3, 0, false);
    auto ck = openCheckpoint(rank0.string());
    if (!ck) {
        return ck.error();
    }
    const auto world = intAt(**ck, "dp_world_size");
    if (!world || *world < 1 || *world > (1 << 20)) {
        Error e = makeError(ErrorCode::Unsupported, "the rank-0 model states hold no dp_world_size: not a "
                                                    "DeepSpeed engine checkpoint this reads");
        e.path = rank0.string();
        return e;
    }
    std::vector<SetFinding> out;
    std::vector<std::string> missing;
    for (std::int64_t r = 0; r < *world; ++r) {
        if (stage3 && !isFile(tag / rankName(true, r, false))) {
            missing.push_back(rankName(true, r, false));
        }
        const std::string optim = rankName(stage3, r, true);
        if (!isFile(tag / optim) && !isFile(tag / ("bf16_" + optim))) {
            missing.push_back(optim);
        }
    }
    if (!missing.empty()) {
        std::string names;
        for (std::size_t i = 0; i < missing.size() && i < 4; ++i) {
            names += (i ? ", " : "") + missing[i];
        }
        if (missing.size() > 4) {
            names += ", ... (" + std::to_string(missing.size()) + " in all)";
        }
        out.push_back({"zero-rank-missing", "error", "Rank files of the ZeRO checkpoint are missing",
                       "dp_world_size is " + std::to_string(*world) + " but " + tag.filename().string() + " lacks " +
                           names + ". zero_to_fp32.py needs one *_optim_states.pt per rank (it stops with \"Expected " +
                           std::to_string(*world) +
                           " of '*_optim_states.pt' ... but found N files\", DeepSpeed#1793) and the fp32 "
                           "weights exist nowhere else; copy every rank's files from the training nodes.",
                       missing});
    }
    if (stage3) {
        std::size_t placeholders = 0;
        std::vector<std::string> paths;
        for (const auto& t : (*ck)->tensors) {
            if (t.path.rfind("module/", 0) == 0 && t.numel == 0) {
                ++placeholders;
                paths.push_back(t.path);
            }
        }
        if (placeholders > 0) {
            out.push_back({"zero3-placeholder-module", "warning",
                           "The model states hold ZeRO-3 placeholders, not weights",
                           std::to_string(placeholders) + " tensors under `module` of " + rank0.filename().string() +
                               " have 0 elements: ZeRO-3 frees each partitioned parameter to torch.empty(0) before "
                               "saving, so load_state_dict with them fails with size mismatch ... torch.Size([0]) "
                               "(transformers#20082). The weights are the fp32 partitions in the optim states: "
                               "consolidate with zero_to_fp32.py.",
                           paths});
        }
    }
    return out;
}

}  // namespace ckpt::sharded

namespace ckpt::sharded {

namespace {

// One consolidated fp32 parameter: pieces of the ranks' flat partitions, in order.
struct ZeroParam {
    std::string name;
    std::vector<std::int64_t> shape;
    std::uint64_t numel = 0;
    std::vector<detail::Piece> pieces;
};

// param_shapes: a list (one per group) of OrderedDict name -> torch.Size, in flat order.
Expected<std::vector<std::vector<ZeroParam>>> paramShapes(const Checkpoint& c)
{
    const NodeIndex list = c.find("param_shapes");
    if (!list.valid() || (c.nodes[list].kind != NodeKind::List && c.nodes[list].kind != NodeKind::Tuple)) {
        return makeError(ErrorCode::Unsupported, "the rank-0 model states hold no param_shapes list");
    }
    std::vector<std::vector<ZeroParam>> groups;
    const Node& l = c.nodes[list];
    for (std::uint32_t g = 0; g < l.childCount; ++g) {
        const Node& group = c.nodes[l.child(g)];
        groups.emplace_back();
        for (std::uint32_t row = 0; row < group.childCount; ++row) {
            const Node& p = c.nodes[group.child(row)];
            const pickle::Value& v = c.arena[p.value];
            if (v.kind != pickle::Kind::Size && v.kind != pickle::Kind::Tuple && v.kind != pickle::Kind::List) {
                return makeError(ErrorCode::Unsupported,
                                 "param_shapes entry '" + std::string(p.name) + "' is not a torch.Size");
            }
            ZeroParam zp;
            zp.name = std::string(p.name);
            zp.numel = 1;
            for (const auto item : v.items) {
                const pickle::Value& d = c.arena[item];
                if (d.kind != pickle::Kind::Int || d.i < 0) {
                    return makeError(ErrorCode::Unsupported,
                                     "param_shapes entry '" + zp.name + "' has a bad dimension");
                }
                zp.shape.push_back(d.i);
                zp.numel *= static_cast<std::uint64_t>(d.i);
            }
            groups.back().push_back(std::move(zp));
        }
    }
    return groups;
}

struct Partition {
    StorageIndex storage;
    std::uint64_t byteOffset = 0;
    std::uint64_t numel = 0;
};

Expected<Partition> partitionOf(const Checkpoint& c, std::size_t group)
{
    const std::string path = "optimizer_state_dict/single_partition_of_fp32_groups/" + std::to_string(group);
    const NodeIndex n = c.find(path);
    if (!n.valid() || c.nodes[n].kind != NodeKind::Tensor) {
        return makeError(ErrorCode::Unsupported, "no " + path + " tensor (not a ZeRO stage 1/2 optimizer state)");
    }
    const TensorEntry& t = c.tensors[c.nodes[n].tensor];
    if (t.dtype != DType::Float32 || !t.contiguous || !t.storage.valid() || t.shape.size() != 1) {
        return makeError(ErrorCode::Unsupported, path + " is not a flat contiguous float32 tensor");
    }
    return Partition{t.storage, static_cast<std::uint64_t>(t.storageOffset) * 4, t.numel};
}

std::uint64_t roundUp(std::uint64_t n, std::uint64_t m)
{
    return (n + m - 1) / m * m;
}

}  // namespace

Expected<ConsolidateResult> consolidateZero12(const SetLocation& loc, const std::string& outPath)
{
    const fs::path tag(loc.index);
    auto model = openCheckpoint((tag / "mp_rank_00_model_states.pt").string());
    if (!model) {
        return model.error();
    }
    auto world = intAt(**model, "dp_world_size");
    if (!world || *world < 1 || *world > 4096) {
        return makeError(ErrorCode::Unsupported, "the rank-0 model states hold no usable dp_world_size");
    }
    auto groups = paramShapes(**model);
    if (!groups) {
        return groups.error();
    }
    std::vector<CheckpointPtr> ranks;
    for (std::int64_t r = 0; r < *world; ++r) {
        const std::string name = rankName(false, r, true);
        if (isFile(tag / ("bf16_" + name))) {
            return makeError(ErrorCode::Unsupported, "a bf16 optimizer (BF16_Optimizer keeps its padding and has "
                                                     "no zero_stage); zero_to_fp32.py refuses it too");
        }
        auto ck = openCheckpoint((tag / name).string());
        if (!ck) {
            return ck.error();
        }
        ranks.push_back(*ck);
    }
    std::vector<ZeroParam> params;
    for (std::size_t g = 0; g < groups->size(); ++g) {
        std::vector<Partition> parts;
        std::uint64_t total = 0;
        for (const auto& rank : ranks) {
            auto p = partitionOf(*rank, g);
            if (!p) {
                return p.error();
            }
            parts.push_back(*p);
            total += p->numel;
        }
        // zero_to_fp32's check: the params and the partitions agree once both are rounded up to
        // the 2 x world alignment (the padding sits at the tail of the last rank only).
        std::uint64_t offset = 0;
        for (auto& zp : (*groups)[g]) {
            std::uint64_t want = zp.numel;
            std::uint64_t at = offset;
            std::size_t r = 0;
            std::uint64_t base = 0;
            while (want > 0 && r < parts.size()) {
                if (at >= base + parts[r].numel) {
                    base += parts[r].numel;
                    ++r;
                    continue;
                }
                const std::uint64_t local = at - base;
                const std::uint64_t take = std::min(want, parts[r].numel - local);
                zp.pieces.push_back({r, parts[r].storage, parts[r].byteOffset + local * 4, take * 4});
                want -= take;
                at += take;
            }
            if (want > 0) {
                return makeError(ErrorCode::Corrupt, "param '" + zp.name +
                                                         "' runs past the ranks' fp32 partitions "
                                                         "(zero_to_fp32: consumed more numels than available)");
            }
            offset += zp.numel;
            params.push_back(std::move(zp));
        }
        const auto align = static_cast<std::uint64_t>(2 * *world);
        if (roundUp(offset, align) != roundUp(total, align)) {
            return makeError(ErrorCode::Corrupt, "group " + std::to_string(g) + ": consumed " + std::to_string(offset) +
                                                     " numels out of " + std::to_string(total) +
                                                     " - something is wrong (zero_to_fp32's check)");
        }
    }
    std::vector<detail::Assembled> out;
    out.reserve(params.size());
    for (auto& p : params) {
        out.push_back({p.name, DType::Float32, std::move(p.shape), std::move(p.pieces)});
    }
    return detail::writeAssembled(out, ranks, outPath);
}

}  // namespace ckpt::sharded
