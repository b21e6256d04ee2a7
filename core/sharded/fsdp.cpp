// Per-rank FSDP pickles (docs/format.md §12; pytorch/pytorch torch/distributed/_shard/sharded_tensor/
// api.py, fsdp/_shard_utils.py, tensor/_api.py, tensor/placement_types.py). Each rank file is an
// ordinary Checkpoint; the wrappers' state is read from its value tree.
#include "sharded/fsdp.h"

#include "archive/zip.h"
#include "checkpoint/dtensor.h"
#include "checkpoint/tensor_bytes.h"
#include "pickle/pickler.h"
#include "pickle/tensor_record.h"
#include "sharded/box_view.h"
#include "sharded/chunks.h"
#include "sharded/open_control.h"
#include "sharded/set_view.h"
#include "util/progress.h"
#include "write/output_file.h"
#include "write/targets.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

namespace ckpt::sharded::fsdp {

namespace fs = std::filesystem;
using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

std::uint64_t Tensor::numel() const
{
    return sharded::detail::numelOf(size);
}

bool Set::complete() const
{
    return sharded::detail::noErrors(findings);
}

bool namesShardedTensors(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::string head(std::size_t{1} << 20, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
    return head.find("sharded_tensor.api") != std::string::npos ||
           (head.find("DTensor") != std::string::npos && head.find("_rebuild_wrapper_subclass") != std::string::npos);
}

namespace {

std::string dims(const std::vector<std::int64_t>& d)
{
    std::string s = "[";
    for (std::size_t i = 0; i < d.size(); ++i) {
        s += (i ? ", " : "") + std::to_string(d[i]);
    }
    return s + "]";
}

const pickle::ObjectInfo* objectAt(const Arena& a, ValueId id)
{
    return id.valid() && a[id].kind == Kind::Object ? &pickle::objectOf(a, id) : nullptr;
}

using dtensor::intList;
using dtensor::objectField;
using dtensor::stateField;

std::optional<std::int64_t> integer(const Arena& a, ValueId id)
{
    return id.valid() && a[id].kind == Kind::Int ? std::optional(a[id].i) : std::nullopt;
}

Error corrupt(const std::string& file, const std::string& what)
{
    Error e = makeError(ErrorCode::Corrupt, what);
    e.path = file;
    return e;
}

// A plain strided tensor value of the arena as an entry placeBox can read.
std::optional<TensorEntry> localTensor(const Arena& a, ValueId id)
{
    if (!id.valid() || a[id].kind != Kind::Tensor) {
        return std::nullopt;
    }
    const auto& t = pickle::tensorOf(a, id);
    if (t.form != pickle::TensorForm::Strided || !t.storage.valid() || a[t.storage].kind != Kind::Storage) {
        return std::nullopt;
    }
    TensorEntry e;
    e.value = id;
    e.storage = StorageIndex{static_cast<std::uint32_t>(a[t.storage].i)};
    e.dtype = t.dtype;
    e.shape = t.shape;
    e.stride = t.stride;
    e.storageOffset = t.storageOffset;
    e.form = t.form;
    return e;
}

struct FileRead {
    std::vector<Tensor> tensors;
    int rank = -1;
    int world = -1;
    bool shardedTensor = false;
};

Expected<void> readShardedTensor(const Checkpoint& c, const pickle::TensorInfo& w, Tensor& t, FileRead& fr)
{
    const Arena& a = c.arena;
    const auto& st = a[w.subclassState];
    if (st.kind != Kind::Tuple || st.items.size() != 5 || a[st.items[0]].kind != Kind::List) {
        return corrupt(c.path, "ShardedTensor '" + t.key + "' has no (local_shards, metadata, ...) state");
    }
    fr.shardedTensor = true;
    const ValueId meta = st.items[1];
    auto size = intList(a, objectField(a, meta, "size"));
    const ValueId props = objectField(a, meta, "tensor_properties");
    const auto* po = objectAt(a, props);
    const ValueId shards = objectField(a, meta, "shards_metadata");
    if (!size || po == nullptr || !po->state.valid() || a[po->state].kind != Kind::Tuple ||
        a[po->state].items.empty() || a[a[po->state].items[0]].kind != Kind::DType || !shards.valid() ||
        a[shards].kind != Kind::List) {
        return corrupt(c.path, "ShardedTensor '" + t.key + "' has no ShardedTensorMetadata (size, properties, shards)");
    }
    t.size = *size;
    t.dtype = static_cast<DType>(a[a[po->state].items[0]].i);
    for (const auto sm : a[shards].items) {
        auto off = intList(a, objectField(a, sm, "shard_offsets"));
        auto sz = intList(a, objectField(a, sm, "shard_sizes"));
        if (!off || !sz) {
            return corrupt(c.path, "a ShardMetadata of '" + t.key + "' has no offsets or sizes");
        }
        t.declared.push_back({*off, *sz});
    }
    for (const auto shard : a[st.items[0]].items) {
        auto local = localTensor(a, objectField(a, shard, "tensor"));
        const ValueId sm = objectField(a, shard, "metadata");
        auto off = intList(a, objectField(a, sm, "shard_offsets"));
        auto sz = intList(a, objectField(a, sm, "shard_sizes"));
        if (!local || !off || !sz) {
            return corrupt(c.path, "a local Shard of '" + t.key + "' has no plain tensor or ShardMetadata");
        }
        t.shards.push_back({0, std::move(*local), {*off, *sz}});
    }
    const ValueId pg = st.items[2];
    if (auto r = integer(a, objectField(a, pg, "global_rank"))) {
        fr.rank = static_cast<int>(*r);
    }
    if (auto w2 = integer(a, objectField(a, pg, "global_world_size"))) {
        fr.world = static_cast<int>(*w2);
    }
    return {};
}

// One DTensor placement on one mesh dimension (placement_types.py). Partial is not read: its
// ranks hold addends, not pieces.
struct Placement {
    enum class Kind : std::uint8_t { Replicate, Shard, StridedShard } kind = Kind::Replicate;
    int dim = 0;
    std::int64_t splitFactor = 1;
};

// torch.chunk's piece `index` of `n` along one dimension of the box.
void chunkAlong(dcp::detail::Box& b, int d, std::int64_t n, std::int64_t index)
{
    const auto du = static_cast<std::size_t>(d);
    const std::int64_t len = b.sizes[du];
    const std::int64_t full = (len + n - 1) / n;
    const std::int64_t start = std::min(full * index, len);
    b.offsets[du] += start;
    b.sizes[du] = std::max<std::int64_t>(0, std::min(len, start + full) - start);
}

// compute_local_shape_and_global_offset: per mesh dimension, the coordinate's torch.chunk piece of
// what earlier dimensions left. A _StridedShard records FSDP2-over-TP sharding, which happened
// right to left: the tensor-parallel Shard(d) pieces were cut first and FSDP chunked each of them,
// so on a dimension the Shard placements apply before the strided ones. That is the box the rank's
// local tensor holds (_StridedShard's docstring: split_factor is the number of shards cut before).
std::optional<dcp::detail::Box> dtensorBox(const std::vector<std::int64_t>& size, const std::vector<std::int64_t>& mesh,
                                           const std::vector<std::int64_t>& coord,
                                           const std::vector<Placement>& placements)
{
    dcp::detail::Box b{std::vector<std::int64_t>(size.size(), 0), size};
    for (const bool strided : {false, true}) {
        for (std::size_t i = 0; i < placements.size(); ++i) {
            const auto& p = placements[i];
            if (p.kind == Placement::Kind::Replicate || (p.kind == Placement::Kind::StridedShard) != strided) {
                continue;
            }
            if (static_cast<std::size_t>(p.dim) >= size.size() || mesh[i] <= 0) {
                return std::nullopt;
            }
            chunkAlong(b, p.dim, mesh[i], coord[i]);
        }
    }
    return b;
}

// The placements tuple; a _StridedShard must split a dimension exactly as many ways as the Shard
// placements on it do, or the right-to-left order above is not what produced it.
Expected<std::vector<Placement>> placementsOf(const Arena& a, ValueId list, const std::string& key,
                                              const std::vector<std::int64_t>& mesh, std::size_t rank)
{
    std::vector<Placement> out;
    for (const auto p : a[list].items) {
        const auto* o = objectAt(a, p);
        const std::string name = o == nullptr ? std::string() : o->callable.name;
        Placement pl;
        if (name == "Shard" || name == "_StridedShard") {
            auto d = integer(a, stateField(a, o->state, "dim"));
            auto sf =
                name == "Shard" ? std::optional<std::int64_t>(1) : integer(a, stateField(a, o->state, "split_factor"));
            if (!d || !sf || *sf <= 0) {
                return makeError(ErrorCode::Corrupt, "a " + name + " placement of '" + key + "' has no dim" +
                                                         (name == "Shard" ? "" : " or split_factor"));
            }
            pl.kind = name == "Shard" ? Placement::Kind::Shard : Placement::Kind::StridedShard;
            pl.dim = static_cast<int>(*d < 0 ? *d + static_cast<std::int64_t>(rank) : *d);
            pl.splitFactor = *sf;
        } else if (name != "Replicate") {
            return makeError(ErrorCode::Unsupported, "DTensor '" + key + "' is placed as " +
                                                         (name.empty() ? std::string("?") : name) +
                                                         " (Shard, _StridedShard and Replicate are read; a Partial "
                                                         "holds addends that only a reduction joins)");
        }
        out.push_back(pl);
    }
    if (out.size() != mesh.size()) {
        return out;  // the caller reports the disagreement with the mesh
    }
    for (const auto& p : out) {
        if (p.kind != Placement::Kind::StridedShard) {
            continue;
        }
        std::int64_t cutBefore = 1;
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (out[i].kind == Placement::Kind::Shard && out[i].dim == p.dim) {
                cutBefore *= mesh[i];
            }
        }
        if (cutBefore != p.splitFactor) {
            return makeError(ErrorCode::Unsupported,
                             "DTensor '" + key + "' is placed as _StridedShard(dim=" + std::to_string(p.dim) +
                                 ", split_factor=" + std::to_string(p.splitFactor) +
                                 ") beside Shard placements that cut " + "that dimension " + std::to_string(cutBefore) +
                                 " ways; only FSDP2-over-tensor-parallel layouts, where the two agree, are read");
        }
    }
    return out;
}

Expected<void> readDTensor(const Checkpoint& c, const pickle::TensorInfo& w, Tensor& t, FileRead& fr)
{
    const Arena& a = c.arena;
    t.dtensor = true;
    t.size = w.shape;
    t.dtype = w.dtype;
    const auto parts = dtensor::partsOf(a, w);
    auto local = localTensor(a, parts ? parts->local : ValueId{});
    const ValueId mesh = parts ? parts->mesh : ValueId{};
    const ValueId placementList = parts ? parts->placements : ValueId{};
    auto coord = intList(a, objectField(a, mesh, "_coordinate_on_dim"));
    auto meshShape = dtensor::meshShape(a, mesh);
    if (!local || !coord || !meshShape || !placementList.valid()) {
        return corrupt(c.path,
                       "DTensor '" + t.key + "' has no _local_tensor, or no mesh shape, coordinate and placements");
    }
    auto placements = placementsOf(a, placementList, t.key, *meshShape, t.size.size());
    if (!placements) {
        Error e = placements.error();
        e.path = c.path;
        return e;
    }
    if (placements->size() != meshShape->size() || coord->size() != meshShape->size()) {
        return corrupt(c.path, "DTensor '" + t.key + "': placements, mesh and coordinate disagree in rank");
    }
    auto box = dtensorBox(t.size, *meshShape, *coord, *placements);
    if (!box) {
        return corrupt(c.path, "DTensor '" + t.key + "' shards a dimension it does not have");
    }
    t.shards.push_back({0, std::move(*local), *box});
    // Every coordinate's box, row-major over the mesh.
    std::int64_t world = 1;
    for (const auto m : *meshShape) {
        world *= std::max<std::int64_t>(m, 0);
    }
    std::vector<std::int64_t> at(meshShape->size(), 0);
    std::set<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> seen;
    for (std::int64_t r = 0; r < world && r < 65536; ++r) {
        std::int64_t rest = r;
        for (std::size_t i = meshShape->size(); i-- > 0;) {
            at[i] = rest % (*meshShape)[i];
            rest /= (*meshShape)[i];
        }
        if (auto b = dtensorBox(t.size, *meshShape, at, *placements); b && seen.insert({b->offsets, b->sizes}).second) {
            t.declared.push_back(*b);
        }
    }
    // A sub-mesh (FSDP's "dp" slice of a 2-D mesh) knows the global rank and the root's ranks
    // (2.9+: _rank, _rank_map); an older mesh only its own coordinate.
    std::int64_t rank = 0;
    for (std::size_t i = 0; i < meshShape->size(); ++i) {
        rank = rank * (*meshShape)[i] + (*coord)[i];
    }
    if (auto global = integer(a, objectField(a, mesh, "_rank"))) {
        rank = *global;
    }
    if (const ValueId map = objectField(a, mesh, "_rank_map"); map.valid() && a[map].kind == Kind::Tensor) {
        const auto& shape = pickle::tensorOf(a, map).shape;
        world = static_cast<std::int64_t>(sharded::detail::numelOf({shape.begin(), shape.end()}));
    }
    fr.rank = static_cast<int>(rank);
    fr.world = static_cast<int>(world);
    return {};
}

Expected<FileRead> readFile(const Checkpoint& c)
{
    FileRead fr;
    for (const auto& e : c.tensors) {
        Tensor t;
        t.key = e.path;
        t.device = e.location;
        const auto& info = pickle::tensorOf(c.arena, e.value);
        const std::string cls = info.subclassType.valid() && c.arena[info.subclassType].kind == Kind::Global
                                    ? pickle::globalOf(c.arena, info.subclassType).name
                                    : std::string();
        if (cls == "ShardedTensor" && info.subclassState.valid()) {
            if (auto r = readShardedTensor(c, info, t, fr); !r) {
                return r.error();
            }
            if (t.size.size() == 1 && (t.key.ends_with("_flat_param") || t.key.ends_with("flat_param"))) {
                Error err = makeError(
                    ErrorCode::Unsupported,
                    "an FSDP LOCAL_STATE_DICT dump ('" + t.key +
                        "' is a 1-D ShardedTensor of a flattened parameter): which slice of it is which parameter is "
                        "not stored, so it cannot be unflattened without the model; load it into the same FSDP model "
                        "with StateDictType.LOCAL_STATE_DICT and save a SHARDED or FULL state dict");
                err.path = c.path;
                return err;
            }
        } else if (cls == "DTensor" && info.subclassState.valid()) {
            if (auto r = readDTensor(c, info, t, fr); !r) {
                return r.error();
            }
        } else if (e.form == pickle::TensorForm::Strided && e.storage.valid()) {
            t.plain = true;
            t.dtype = e.dtype;
            t.size = e.shape;
            t.shards.push_back({0, e, {std::vector<std::int64_t>(e.shape.size(), 0), e.shape}});
            t.declared.push_back(t.shards.back().box);
        } else {
            return makeError(ErrorCode::Unsupported, "'" + t.key + "' in " + c.path + " is a " +
                                                         (cls.empty() ? std::string("storage-less tensor") : cls) +
                                                         ", which FSDP rank files are not read with");
        }
        fr.tensors.push_back(std::move(t));
    }
    return fr;
}

}  // namespace

std::optional<std::pair<std::string, int>> rankFileName(const std::string& name)
{
    static const std::regex re(R"(^(.*rank)([0-9]{1,6})(\.[A-Za-z0-9]+)$)");
    std::smatch m;
    if (!std::regex_match(name, m, re)) {
        return std::nullopt;
    }
    return std::pair{m[1].str() + "*" + m[3].str(), std::stoi(m[2].str())};
}

namespace {

std::vector<std::string> fileNames(const Set& set)
{
    std::vector<std::string> names;
    for (const auto& f : set.files) {
        names.push_back(fs::path(f.path).filename().string());
    }
    return names;
}

void addProcessGroupFinding(Set& set)
{
    std::vector<std::string> names = fileNames(set);
    set.findings.push_back(
        {{"needs-process-group", diagnose::Severity::Warning, "torch.load needs a process group for these files",
          "The rank files hold ShardedTensors, whose __setstate__ refuses to run outside torch.distributed: "
          "torch.load fails with RuntimeError: Need to initialize default process group using \"init_process_group\" "
          "before loading ShardedTensor (torch/distributed/_shard/sharded_tensor/api.py), and inside one it also "
          "needs the same rank and world size. `ckptscope convert` on the folder writes the consolidated plain "
          "tensors, which load anywhere.",
          names}});
}

// What PyTorch 2.11 was seen to do with a DTensor rank file outside a process group
// (tests/sharded/real/sets/torch_load_errors.json): weights_only=False loads this rank's DTensors,
// warning about the DeviceMesh; 2.6's default weights_only=True refuses the file.
void addDTensorFinding(Set& set)
{
    set.findings.push_back(
        {{std::string(dtensor::kRankFilesCode), diagnose::Severity::Warning, std::string(dtensor::kRankFilesTitle),
          std::string(dtensor::kRankFilesDetail), fileNames(set)}});
}

void checkWorld(Set& set, int world, const std::set<int>& ranks)
{
    std::string missing;
    for (int r = 0; r < world && r < 65536; ++r) {
        if (!ranks.contains(r)) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
    }
    if (world == static_cast<int>(set.files.size()) && missing.empty()) {
        return;
    }
    std::vector<std::string> names = fileNames(set);
    set.findings.push_back(
        {{"world-size-mismatch", diagnose::Severity::Error, "The rank files disagree with the saved world size",
          "The files were saved by " + std::to_string(world) +
              " ranks (world size in the pickles), but the folder "
              "holds " +
              std::to_string(set.files.size()) + " rank file(s)" +
              (missing.empty() ? std::string() : "; missing rank(s): " + missing) +
              ". Loading needs every rank's file (ShardedTensor's __setstate__ checks \"Global world size at save time "
              "was ...\"). Copy the missing rank files, or take the set from one save.",
          names}});
}

}  // namespace

Expected<Set> open(const SetLocation& loc, bool oneFile)
{
    return open(std::make_shared<const source::LocalFolder>(loc.dir), loc, oneFile);
}

namespace {

// The rank files of `loc.index`'s stem in `folder`, in name order, from its listing (a local folder,
// an s3:// prefix, a Hub repository): a folder nothing lists has no set of rank files to read.
Expected<std::vector<std::string>> rankFilesOf(const source::Folder& folder, const SetLocation& loc)
{
    const auto key = rankFileName(fs::path(loc.index).filename().string());
    std::vector<std::string> names;
    auto listed = folder.list();
    if (!listed) {
        return listed.error();
    }
    if (*listed) {
        for (const auto& n : **listed) {
            const auto k = rankFileName(n);
            std::error_code ec;
            if (k && key && k->first == key->first &&
                (!folder.local() || fs::is_regular_file(fs::path(folder.pathOf(n)), ec))) {
                names.push_back(n);
            }
        }
        std::sort(names.begin(), names.end());
        return names;
    }
    Error e = makeError(ErrorCode::Unsupported, "FSDP rank files are found by listing their folder, which a web "
                                                "server does not do: name one rank file to read it alone, or read "
                                                "the folder from a local copy or an s3:// prefix");
    e.path = loc.dir;
    return e;
}

}  // namespace

Expected<Set> open(const source::FolderPtr& folder, const SetLocation& loc, bool oneFile)
{
    Set set;
    set.loc = loc;
    set.oneFile = oneFile;
    std::vector<std::string> paths;
    if (oneFile && folder->local()) {
        paths.push_back(loc.index);
    } else if (oneFile) {
        paths.push_back(folder->pathOf(fs::path(loc.index).filename().string()));
    } else {
        auto names = rankFilesOf(*folder, loc);
        if (!names) {
            return names.error();
        }
        for (const auto& n : *names) {
            paths.push_back(folder->pathOf(n));
        }
    }
    std::map<std::string, std::size_t> byKey;
    std::set<int> ranks;
    int world = -1;
    bool sharded = false;
    bool dtensors = false;
    for (std::size_t i = 0; i < paths.size(); ++i) {
        const auto& p = paths[i];
        const std::string fileName = fs::path(p).filename().string();
        auto c = oneFile && folder->local()
                     ? openMember(p, i, paths.size())
                     : readFolderMember(*folder, fileName, "the folder", i, paths.size()).checkpoint;
        if (!c) {
            return c.error();
        }
        const std::string name = fs::path(p).filename().string();
        const std::size_t before = set.findings.size();
        detail::unsafeCodeFindings(**c, name, set.findings);
        // A value that calls code is never written (the consolidation writes tensors, convert's
        // plan drops such a call): it is no value the consolidation would lose, so it does not stop
        // it as the others do. Its finding says where it is.
        std::vector<std::string> calling;
        for (std::size_t k = before; k < set.findings.size(); ++k) {
            for (const auto& at : set.findings[k].paths) {
                calling.push_back(at.substr(std::min(at.size(), name.size() + 1)));  // "file:path"
            }
        }
        auto callsCode = [&](const std::string& path) {
            return std::any_of(calling.begin(), calling.end(), [&](const std::string& c) {
                return !c.empty() && (path == c || path.starts_with(c + "/"));
            });
        };
        auto fr = readFile(**c);
        if (!fr) {
            return fr.error();
        }
        const auto fileIndex = static_cast<std::uint32_t>(set.files.size());
        std::vector<std::string> others;
        for (std::uint32_t i = 1; i < (*c)->nodes.size(); ++i) {
            const Node& n = (*c)->nodes[NodeIndex{i}];
            if ((n.kind == NodeKind::Scalar || n.kind == NodeKind::Object) && !callsCode((*c)->pathOf(NodeIndex{i}))) {
                others.push_back((*c)->pathOf(NodeIndex{i}));
            }
        }
        set.files.push_back({p, std::move(others), fr->rank, fr->world});
        set.sources.add(p, *c, !folder->local());
        ranks.insert(fr->rank);
        world = std::max(world, fr->world);
        sharded = sharded || fr->shardedTensor;
        dtensors =
            dtensors || std::any_of(fr->tensors.begin(), fr->tensors.end(), [](const Tensor& t) { return t.dtensor; });
        for (auto& t : fr->tensors) {
            for (auto& s : t.shards) {
                s.file = fileIndex;
            }
            auto [it, added] = byKey.emplace(t.key, set.tensors.size());
            if (added) {
                set.tensors.push_back(std::move(t));
                continue;
            }
            Tensor& have = set.tensors[it->second];
            if (have.size != t.size || have.dtype != t.dtype) {
                return corrupt(p, "'" + t.key + "' is " + std::string(dtypeName(t.dtype)) + " " + dims(t.size) +
                                      " here but " + std::string(dtypeName(have.dtype)) + " " + dims(have.size) +
                                      " in another rank file: the files come from different saves");
            }
            if (!have.plain) {
                for (auto& s : t.shards) {
                    have.shards.push_back(std::move(s));
                }
            }
        }
    }
    if (sharded) {
        addProcessGroupFinding(set);
    }
    if (dtensors) {
        addDTensorFinding(set);
    }
    if (oneFile) {
        return set;
    }
    if (world > 0) {
        checkWorld(set, world, ranks);
    }
    dcp::detail::Coverage cov;
    for (auto& t : set.tensors) {
        // Replicated boxes are the same tensor on several ranks: one copy covers them.
        std::vector<dcp::detail::Box> boxes;
        std::set<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> seen;
        std::vector<LocalShard> unique;
        for (auto& s : t.shards) {
            if (seen.insert({s.box.offsets, s.box.sizes}).second) {
                boxes.push_back(s.box);
                unique.push_back(std::move(s));
            }
        }
        t.shards = std::move(unique);
        dcp::detail::checkBoxes(t.key, t.size, boxes, cov);
    }
    dcp::detail::coverageFindings(cov,
                                  "Consolidating would leave parts of these tensors unset. Take every rank's file "
                                  "from one save.",
                                  set.findings);
    return set;
}

namespace {

// Whole-row slabs of contiguous local tensors (FSDP's dim-0 chunks, Shard(0)) tile a validated
// tensor in the order of their first offset: streamed from the rank files with no buffer. False,
// with nothing written, otherwise.
Expected<bool> streamSlabs(const Set& set, const Tensor& t, archive::ZipWriter& zw)
{
    std::vector<const LocalShard*> order;
    for (const auto& s : t.shards) {
        for (std::size_t d = 1; d < t.size.size(); ++d) {
            if (s.box.offsets[d] != 0 || s.box.sizes[d] != t.size[d]) {
                return false;
            }
        }
        if (s.tensor.dtype != t.dtype || s.tensor.shape != s.box.sizes) {
            return false;  // placeBox names the mismatch
        }
        std::int64_t expect = 1;
        for (std::size_t d = s.tensor.shape.size(); d-- > 0;) {
            if (s.tensor.shape[d] != 1 && s.tensor.stride[d] != expect) {
                return false;
            }
            expect *= s.tensor.shape[d];
        }
        if (expect > 0) {
            order.push_back(&s);
        }
    }
    if (t.size.empty() && order.size() != 1) {
        return false;
    }
    std::sort(order.begin(), order.end(), [](const LocalShard* x, const LocalShard* y) {
        return !x->box.offsets.empty() && x->box.offsets[0] < y->box.offsets[0];
    });
    const std::uint64_t es = elementSize(t.dtype);
    for (const LocalShard* s : order) {
        auto held = set.sources.get(s->file);
        if (!held) {
            return held.error();
        }
        const Checkpoint& c = **held;
        std::uint64_t numel = 1;
        for (const auto d : s->box.sizes) {
            numel *= static_cast<std::uint64_t>(d);
        }
        if (auto r = sharded::detail::streamInto(zw, c, s->tensor.storage,
                                                 static_cast<std::uint64_t>(s->tensor.storageOffset) * es, numel * es);
            !r) {
            return r.error();
        }
        if (const auto& st = c.storages[s->tensor.storage]; c.file && !st.compressed) {
            dcp::detail::releasePages(c.bytes.subspan(st.fileOffset, st.nbytes));
        }
    }
    return true;
}

// Every local shard placed into the whole tensor's `buffer`.
Expected<void> placeShards(const Set& set, const Tensor& t, std::vector<std::byte>& buffer)
{
    std::vector<std::byte> scratch;
    for (const auto& s : t.shards) {
        auto held = set.sources.get(s.file);
        if (!held) {
            return held.error();
        }
        const Checkpoint& c = **held;
        if (s.tensor.dtype != t.dtype) {
            return corrupt(c.path, "a local shard of '" + t.key + "' is " + std::string(dtypeName(s.tensor.dtype)) +
                                       ", not " + std::string(dtypeName(t.dtype)));
        }
        auto bytes = c.storageData(s.tensor.storage, scratch);
        if (!bytes) {
            return bytes.error();
        }
        if (auto r = dcp::detail::placeBox(t.key, t.dtype, t.size, s.box, s.tensor, *bytes, buffer); !r) {
            Error e = r.error();
            e.path = c.path;
            return e;
        }
        if (c.file && !c.storages[s.tensor.storage].compressed) {
            dcp::detail::releasePages(*bytes);
        }
    }
    return {};
}

Expected<void> writeTensor(const Set& set, const Tensor& t, archive::ZipWriter& zw, const std::string& record)
{
    return sharded::detail::writeRecord(
        zw, record, t.numel() * elementSize(t.dtype), [&] { return streamSlabs(set, t, zw); },
        [&](std::vector<std::byte>& buffer) { return placeShards(set, t, buffer); });
}

// Whether the rank files make one state dict, and the reason not (what consolidate and the view
// refuse): one rank file alone, an incomplete set, values besides tensors.
Expected<void> checkWhole(const Set& set)
{
    if (set.oneFile) {
        return makeError(ErrorCode::Usage, "one rank file holds only its shards: convert the folder of all rank "
                                           "files to consolidate them");
    }
    if (!set.complete()) {
        return sharded::detail::incomplete("the FSDP rank files are incomplete", set.findings, set.loc.dir);
    }
    for (const auto& f : set.files) {
        if (!f.otherValues.empty()) {
            Error e = makeError(ErrorCode::Unsupported,
                                "holds " + std::to_string(f.otherValues.size()) + " values besides tensors (" +
                                    f.otherValues.front() + (f.otherValues.size() > 1 ? ", ..." : "") +
                                    "; optimizer state?): consolidating FSDP rank files writes tensors only, so "
                                    "nothing was written rather than drop them");
            e.path = f.path;
            return e;
        }
    }
    return {};
}

// The flat state dict of every global tensor (C-contiguous, on the CPU), storage i tensor i.
ValueId statePickle(const Set& set, Arena& a)
{
    std::vector<ValueId> items;
    for (const auto& t : set.tensors) {
        pickle::StorageRef ref;
        ref.key = std::to_string(a.storages.size());
        ref.location = "cpu";  // the local shards may sit on GPUs: one consolidated copy goes to the CPU
        ref.dtype = t.dtype;
        ref.numel = t.numel();
        a.storages.push_back(std::move(ref));
        items.push_back(a.str(t.key));
        items.push_back(
            pickle::contiguousTensor(a, static_cast<std::uint32_t>(a.storages.size() - 1), t.dtype, t.size));
    }
    return a.dict(std::move(items), true);
}

// A global tensor's local shards, from the rank files that hold them.
class ShardFiles final : public sharded::detail::BoxFiles {
public:
    explicit ShardFiles(std::shared_ptr<const Set> set) : set_(std::move(set)) {}
    [[nodiscard]] Expected<sharded::detail::OpenedBox> open(std::size_t tensor, std::size_t box) const override
    {
        const LocalShard& s = set_->tensors.at(tensor).shards.at(box);
        auto held = set_->sources.get(s.file);
        if (!held) {
            return held.error();
        }
        return sharded::detail::OpenedBox{*held, &s.tensor, (*held)->file != nullptr};
    }
    [[nodiscard]] Expected<void> checkUnchanged() const override { return set_->sources.checkUnchanged(); }

private:
    std::shared_ptr<const Set> set_;
};

}  // namespace

Expected<CheckpointPtr> view(const Set& set)
{
    if (auto whole = checkWhole(set); !whole) {
        return whole.error();
    }
    auto c = std::make_shared<Checkpoint>();
    c->root = statePickle(set, c->arena);
    c->path = set.loc.dir;
    std::vector<sharded::detail::BoxedTensor> tensors;
    std::vector<std::uint64_t> nbytes;
    for (const auto& t : set.tensors) {
        sharded::detail::BoxedTensor b{t.key, t.dtype, t.size, {}, 0};
        for (const auto& s : t.shards) {
            b.boxes.push_back(s.box);
            // What the local tensor reaches in its storage, from its view alone: opening each rank
            // file for its storage table would reopen files tensor by tensor past the cache.
            const std::vector<std::int64_t> shape(s.tensor.shape.begin(), s.tensor.shape.end());
            const std::vector<std::int64_t> stride(s.tensor.stride.begin(), s.tensor.stride.end());
            const auto reach = viewByteExtent(s.tensor.dtype, s.tensor.storageOffset, shape, stride);
            const std::uint64_t stored = reach.end - std::min(reach.begin, reach.end);
            b.storedBytes = checkedAdd(b.storedBytes, stored, b.storedBytes) ? b.storedBytes : UINT64_MAX;
        }
        nbytes.push_back(b.nbytes());
        c->fileSize += nbytes.back();
        tensors.push_back(std::move(b));
    }
    for (const auto& f : set.files) {
        c->setFiles.push_back(f.path);
    }
    c->setMembers = memberFiles(set.loc);
    return sharded::detail::finishView(
        std::move(c), nbytes,
        sharded::detail::boxStorages(std::move(tensors),
                                     std::make_shared<const ShardFiles>(std::make_shared<const Set>(set))));
}

Expected<ConsolidateResult> consolidate(const Set& set, const std::string& outPath)
{
    if (auto whole = checkWhole(set); !whole) {
        return whole.error();
    }
    auto target = write::resolveTarget(outPath);
    if (!target) {
        return target.error();
    }
    if (auto r = set.sources.checkNotMember(*target); !r) {
        return r.error();
    }
    Arena a;
    const ValueId root = statePickle(set, a);
    auto pickled = pickle::picklePersistent(a, root);
    if (!pickled) {
        return pickled.error();
    }
    auto size = sharded::detail::writeTorchArchive(
        *target, *pickled, set.tensors.size(), sharded::detail::storageBytes(a),
        [&](archive::ZipWriter& zw, std::size_t i, const std::string& record) {
            return writeTensor(set, set.tensors[i], zw, record);
        },
        [&]() { return set.sources.checkUnchanged(); });
    if (!size) {
        return size.error();
    }
    return ConsolidateResult{*target, *size, set.tensors.size(), set.files.size()};
}

}  // namespace ckpt::sharded::fsdp
