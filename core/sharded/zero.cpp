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
