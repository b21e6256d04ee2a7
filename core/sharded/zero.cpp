// DeepSpeed ZeRO folders (docs/format.md §12.1), rebuilt as deepspeed/utils/zero_to_fp32.py does, but as a
// plan of pieces: no tensor's bytes are read until consolidate() streams them into the output.
#include "sharded/zero.h"

#include "sharded/open_control.h"
#include "util/checked.h"
#include "util/folder_member.h"
#include "util/shape_text.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <string_view>

namespace ckpt::sharded::zero {

namespace fs = std::filesystem;

std::uint64_t Tensor::numel() const
{
    std::uint64_t n = 1;
    for (const auto d : shape) {
        n *= static_cast<std::uint64_t>(d);
    }
    return n;
}

bool Set::isMissing(std::size_t f) const
{
    return std::find(missing.begin(), missing.end(), f) != missing.end();
}

bool Set::complete() const
{
    const bool errors = std::any_of(findings.begin(), findings.end(), detail::stopsTheRead);
    const bool located = std::all_of(tensors.begin(), tensors.end(), [](const Tensor& t) {
        return t.aliasOf || t.value || !t.pieces.empty() || t.numel() == 0;
    });
    return !errors && located;
}

namespace {

const pickle::Value* valueAt(const Checkpoint& c, std::string_view path)
{
    const NodeIndex n = c.find(path);
    return n.valid() ? &c.arena[c.nodes[n].value] : nullptr;
}

// ZeroStageEnum's members (deepspeed/runtime/zero/config.py), for pickles that name them.
std::optional<std::int64_t> zeroStageNamed(std::string_view name)
{
    static const std::map<std::string_view, std::int64_t> kStages{
        {"disabled", 0}, {"optimizer_states", 1}, {"gradients", 2}, {"weights", 3}, {"max_stage", 3}};
    const auto it = kStages.find(name);
    return it == kStages.end() ? std::nullopt : std::optional<std::int64_t>(it->second);
}

// An int, or an int Enum member: pickled as a REDUCE of its class on the value (Python < 3.11) or
// of getattr(class, NAME) (Python >= 3.11, Enum.__reduce_ex__).
std::optional<std::int64_t> intAt(const Checkpoint& c, std::string_view path)
{
    const pickle::Value* v = valueAt(c, path);
    if (v && v->kind == pickle::Kind::Object) {
        const auto& o = c.arena.objects.at(static_cast<std::size_t>(v->i));
        const pickle::Value& args = c.arena[o.args];
        if (o.callable.qualified() == "builtins.getattr" && args.items.size() == 2 &&
            c.arena[args.items[1]].kind == pickle::Kind::Str) {
            return zeroStageNamed(c.arena[args.items[1]].text);
        }
        v = args.items.size() == 1 ? &c.arena[args.items[0]] : nullptr;
    }
    if (!v || v->kind != pickle::Kind::Int) {
        return std::nullopt;
    }
    return v->i;
}

// partition_count: an int (stage 3) or one per group (stages 1/2), of which zero_to_fp32 takes the max.
std::optional<std::int64_t> partitionCount(const Checkpoint& c)
{
    if (auto n = intAt(c, "optimizer_state_dict/partition_count")) {
        return n;
    }
    const NodeIndex n = c.find("optimizer_state_dict/partition_count");
    if (!n.valid()) {
        return std::nullopt;
    }
    std::optional<std::int64_t> most;
    for (std::uint32_t i = 0; i < c.nodes[n].childCount; ++i) {
        const pickle::Value& v = c.arena[c.nodes[c.nodes[n].child(i)].value];
        if (v.kind == pickle::Kind::Int) {
            most = std::max(most.value_or(v.i), v.i);
        }
    }
    return most;
}

bool boolAt(const Checkpoint& c, std::string_view path)
{
    const pickle::Value* v = valueAt(c, path);
    return v && v->kind == pickle::Kind::Bool && v->flag;
}

const TensorEntry* tensorAt(const Checkpoint& c, std::string_view path)
{
    const NodeIndex n = c.find(path);
    if (!n.valid() || c.nodes[n].kind != NodeKind::Tensor) {
        return nullptr;
    }
    return &c.tensors[c.nodes[n].tensor];
}

std::vector<std::int64_t> dims(const Checkpoint& c, const pickle::Value& v)
{
    std::vector<std::int64_t> out;
    for (const auto item : v.items) {
        const pickle::Value& d = c.arena[item];
        if (d.kind != pickle::Kind::Int || d.i < 0) {
            return {-1};
        }
        out.push_back(d.i);
    }
    return out;
}

std::uint64_t numelOf(const std::vector<std::int64_t>& shape)
{
    std::uint64_t n = 1;
    for (const auto d : shape) {
        n *= static_cast<std::uint64_t>(d);
    }
    return n;
}

// name -> torch.Size rows of an (Ordered)Dict node, in order.
Expected<std::vector<std::pair<std::string, std::vector<std::int64_t>>>> shapesOf(const Checkpoint& c, NodeIndex n,
                                                                                  const std::string& what)
{
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
    const Node& group = c.nodes[n];
    for (std::uint32_t row = 0; row < group.childCount; ++row) {
        const Node& p = c.nodes[group.child(row)];
        const pickle::Value& v = c.arena[p.value];
        auto shape = (v.kind == pickle::Kind::Size || v.kind == pickle::Kind::Tuple || v.kind == pickle::Kind::List)
                         ? dims(c, v)
                         : std::vector<std::int64_t>{-1};
        if (!shape.empty() && shape.front() < 0) {
            return makeError(ErrorCode::Unsupported, what + " entry '" + std::string(p.name) + "' is not a torch.Size");
        }
        // Checked once here, so no element count, byte size or running offset after it wraps (a
        // [2^62, 4] param was written over 0 bytes). 8 bytes: the widest element a set holds.
        const auto numel = checkedNumel(shape);
        if (!numel || !checkedBytes(*numel, 8)) {
            return makeError(ErrorCode::Limit, what + " entry '" + std::string(p.name) + "' has a shape of " +
                                                   shapeText(shape) + ", more elements than a tensor can hold");
        }
        out.emplace_back(std::string(p.name), std::move(shape));
    }
    return out;
}

// A flat run of float32 (or any one type) elements in one file: pieces of consecutive runs are
// what a consolidated tensor is made of.
struct Span {
    std::size_t source = 0;
    StorageIndex storage;
    std::uint64_t byteOffset = 0;
    std::uint64_t numel = 0;
};

Expected<Span> spanOf(const TensorEntry& t, std::size_t source, const std::string& what)
{
    if (!t.contiguous || !t.storage.valid() || t.form != pickle::TensorForm::Strided) {
        return makeError(ErrorCode::Unsupported, what + " is not a contiguous tensor with a storage");
    }
    return Span{source, t.storage, static_cast<std::uint64_t>(t.storageOffset) * elementSize(t.dtype), t.numel};
}

// Elements [at, at + count) of `spans` laid end to end, as pieces; false when they run past the end.
bool take(const std::vector<Span>& spans, std::uint64_t at, std::uint64_t count, std::uint32_t esize,
          std::vector<detail::Piece>& out)
{
    std::uint64_t base = 0;
    for (const auto& s : spans) {
        if (count == 0) {
            break;
        }
        if (at < base + s.numel) {
            const std::uint64_t local = at - base;
            const std::uint64_t n = std::min(count, s.numel - local);
            out.push_back({s.source, s.storage, s.byteOffset + local * esize, n * esize});
            at += n;
            count -= n;
        }
        base += s.numel;
    }
    return count == 0;
}

std::uint64_t total(const std::vector<Span>& spans)
{
    std::uint64_t n = 0;
    for (const auto& s : spans) {
        n += s.numel;
    }
    return n;
}

std::uint64_t roundUp(std::uint64_t n, std::uint64_t m)
{
    return (n + m - 1) / m * m;
}

std::string listNames(const std::vector<std::string>& names)
{
    std::string s;
    for (std::size_t i = 0; i < names.size() && i < 4; ++i) {
        s += (i ? ", " : "") + names[i];
    }
    if (names.size() > 4) {
        s += ", ... (" + std::to_string(names.size()) + " in all)";
    }
    return s;
}

std::string modelName(bool stage3Files, std::int64_t rank)
{
    return stage3Files ? "zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_model_states.pt"
                       : std::string("mp_rank_00_model_states.pt");
}

std::string optimName(bool bf16, std::int64_t rank)
{
    return std::string(bf16 ? "bf16_" : "") + "zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states.pt";
}

// zero_to_fp32's glob: *_optim_states.pt.
bool isOptimFile(const std::string& name)
{
    static const std::regex re(R"(^.*_optim_states\.pt$)");
    return std::regex_match(name, re);
}

// Hyperparameters and step counts are plain Python values; anything else (a tensor lr, an object)
// is not carried into the consolidated optimizer.
bool plainValue(const pickle::Arena& a, pickle::ValueId id, int depth)
{
    const pickle::Value& v = a[id];
    switch (v.kind) {
    case pickle::Kind::None:
    case pickle::Kind::Bool:
    case pickle::Kind::Int:
    case pickle::Kind::Float:
    case pickle::Kind::Str:
        return true;
    case pickle::Kind::Tuple:
    case pickle::Kind::List:
    case pickle::Kind::Dict:
        return depth < 8 && !v.attrs.valid() && std::all_of(v.items.begin(), v.items.end(), [&](pickle::ValueId item) {
                   return plainValue(a, item, depth + 1);
               });
    default:
        return false;
    }
}

// A value plainValue() accepted, rebuilt in `to`.
pickle::ValueId copyPlain(const pickle::Arena& from, pickle::ValueId id, pickle::Arena& to)
{
    const pickle::Value& v = from[id];
    pickle::IdList items;
    for (const auto item : v.items) {
        items.push_back(copyPlain(from, item, to));
    }
    switch (v.kind) {
    case pickle::Kind::Tuple:
        return to.tuple(std::move(items));
    case pickle::Kind::List:
        return to.list(std::move(items));
    case pickle::Kind::Dict:
        return to.dict(std::move(items), v.flag);
    case pickle::Kind::None:
        return to.none();
    case pickle::Kind::Bool:
        return to.boolean(v.flag);
    case pickle::Kind::Int:
        return to.integer(v.i);
    case pickle::Kind::Float:
        return to.real(v.f);
    default:  // Str
        return to.str(v.text);
    }
}

class Builder {
public:
    Builder(Set& set, const source::Folder& tag, Weights weights, bool keepOptimizer)
        : s_(set), tag_(tag), weights_(weights), keep_(keepOptimizer)
    {
    }

    Expected<void> run();

private:
    std::size_t addFile(const std::string& name);
    Expected<void> openFiles(bool stage3Files);
    Expected<std::vector<std::string>> optimFilesPresent();
    void rankFindings(bool stage3Files, const std::vector<std::string>& missing);
    Expected<void> detectStage(bool stage3Files);
    Expected<void> addModule();
    Expected<void> addBuffers();
    Expected<void> addFrozen();
    Expected<void> addParams12();
    Expected<void> addParams3();
    Expected<void> addOptimizer();
    [[nodiscard]] std::string statePath(const Checkpoint& c, std::size_t k) const;
    Expected<std::vector<Span>> stateSpans(std::size_t rank, const std::string& key, DType& dtype);
    Expected<void> addFlatState(const std::string& key);
    Expected<void> addGroupValue(const std::string& key);
    Expected<void> addParamGroups();
    void addShared();
    Tensor& push(std::string key, std::string role, std::vector<std::int64_t> shape, DType dtype);
    [[nodiscard]] bool optimComplete() const;
    [[nodiscard]] const Checkpoint& model0() const { return *model0_; }
    // Rank file `f`, read again if the set's cache let it go (members.h): hold it while reading it.
    [[nodiscard]] Expected<CheckpointPtr> source(std::size_t f) const { return s_.sources.get(f); }

    Set& s_;
    const source::Folder& tag_;
    // The two files every stage reads from throughout: kept, whatever the cache of the others does.
    CheckpointPtr model0_;
    CheckpointPtr optim0_;  // null when rank 0's optimizer states are missing or unreadable
    Weights weights_;
    std::vector<std::size_t> modelFiles_;  // per rank (one for stages 1/2)
    std::vector<std::size_t> optimFiles_;  // per rank
    std::size_t fileCount_ = 0;            // the rank files to read, once rank 0's says the world size
    std::map<std::string, std::size_t, std::less<>> byKey_;
    std::vector<std::string> unreadable_;  // "name: the reader's message"
    std::optional<Error> refused_;         // a rank file that leads outside the tag folder, or a failed request
    bool keep_ = false;
    // Where each trainable param sits in the flat partitions, for the optimizer state laid out
    // the same way: stage 1/2 its group and offset in the group's ranks laid end to end, stage 3
    // its sub-group and offset in every rank's flat groups laid end to end. `group` is the flat
    // group's index in param_shapes and in the base optimizer's state.
    struct Slot {
        std::size_t tensor = 0;
        std::size_t group = 0;
        std::uint64_t offset = 0;
        std::uint64_t numel = 0;
    };
    std::vector<Slot> slots_;
    std::vector<std::vector<std::uint64_t>> partNumel_;  // stage 1/2: [group][rank] fp32 partition numel
    std::vector<std::vector<std::uint64_t>> subNumel_;   // stage 3: [rank][sub-group] fp32 flat numel
};

// A rank file that is there but does not read (truncated copy, LFS pointer) is a finding of its
// own: the set still lists, and consolidate refuses it like a missing one.
std::size_t Builder::addFile(const std::string& name)
{
    s_.files.push_back(name);
    CheckpointPtr read;
    auto got = readFolderMember(tag_, name, "the ZeRO tag folder", s_.files.size() - 1, fileCount_);
    if (got.stops) {
        refused_ = refused_.value_or(got.checkpoint.error());
    } else if (got.missing) {
        s_.missing.push_back(s_.files.size() - 1);
    } else {
        auto& ck = got.checkpoint;
        if (ck && (*ck)->truncation.salvaged) {
            unreadable_.push_back(name + ": the file is cut off (it ends " + (*ck)->truncation.endsIn + ")");
        } else if (ck) {
            read = *ck;
            // Scanned now, while it is read: the set keeps only a few rank files open.
            detail::unsafeCodeFindings(*read, name, s_.findings);
        } else {
            unreadable_.push_back(name + ": " + ck.error().message);
        }
    }
    s_.sources.add(tag_.pathOf(name), read, !tag_.local());
    return s_.files.size() - 1;
}

bool Builder::optimComplete() const
{
    return std::all_of(optimFiles_.begin(), optimFiles_.end(), [&](std::size_t f) { return s_.sources.present(f); });
}

Tensor& Builder::push(std::string key, std::string role, std::vector<std::int64_t> shape, DType dtype)
{
    Tensor t;
    t.key = std::move(key);
    t.role = std::move(role);
    t.shape = std::move(shape);
    t.dtype = dtype;
    t.from = dtype;
    // A key given twice keeps its first place with the later value, as a Python dict assignment.
    if (auto it = byKey_.find(t.key); it != byKey_.end()) {
        s_.tensors[it->second] = std::move(t);
        return s_.tensors[it->second];
    }
    byKey_.emplace(t.key, s_.tensors.size());
    s_.tensors.push_back(std::move(t));
    return s_.tensors.back();
}

Expected<void> Builder::openFiles(bool stage3Files)
{
    auto first = readFolderMember(tag_, modelName(stage3Files, 0), "the ZeRO tag folder", 0, 0).checkpoint;
    if (!first) {
        return first.error();
    }
    s_.files.push_back(modelName(stage3Files, 0));
    s_.sources.add(tag_.pathOf(s_.files.back()), *first, !tag_.local());
    model0_ = *first;
    detail::unsafeCodeFindings(*model0_, s_.files.back(), s_.findings);
    modelFiles_.push_back(0);
    const auto world = intAt(model0(), "dp_world_size");
    if (!world || *world < 1 || *world > 65536) {
        Error e = makeError(ErrorCode::Unsupported, "the rank-0 model states hold no dp_world_size: not a "
                                                    "DeepSpeed engine checkpoint this reads");
        e.path = tag_.pathOf(modelName(stage3Files, 0));
        return e;
    }
    s_.world = *world;
    fileCount_ = static_cast<std::size_t>(stage3Files ? 2 * s_.world : s_.world + 1);
    // Tensor-parallel ranks (mp_rank_01, ...) split tensors along a layer-dependent dimension;
    // zero_to_fp32.py reads mp_rank_00 only and stops on the surplus files.
    if (const auto mp = intAt(model0(), "mp_world_size"); mp && *mp > 1) {
        Error e = makeError(ErrorCode::Unsupported,
                            "mp_world_size is " + std::to_string(*mp) +
                                ": the ZeRO partitions of each tensor-parallel rank are separate models' pieces, "
                                "which ckptscope does not merge (zero_to_fp32.py does not either); merge the "
                                "tensor-parallel ranks with the training framework's own tools");
        e.path = s_.loc.dir;
        return e;
    }
    auto listed = optimFilesPresent();
    if (!listed) {
        return listed.error();
    }
    const auto& present = *listed;
    // The bf16_ prefix comes with bf16 training; a folder with no optimizer files at all says so
    // in its ds_config.
    s_.bf16 =
        std::any_of(present.begin(), present.end(), [](const std::string& n) { return n.rfind("bf16_", 0) == 0; }) ||
        (present.empty() && boolAt(model0(), "ds_config/bf16/enabled"));
    std::vector<std::string> missing;
    for (std::int64_t r = 1; stage3Files && r < s_.world; ++r) {
        modelFiles_.push_back(addFile(modelName(true, r)));
        if (s_.isMissing(s_.files.size() - 1)) {
            missing.push_back(s_.files.back());
        }
    }
    for (std::int64_t r = 0; r < s_.world; ++r) {
        const bool other = std::find(present.begin(), present.end(), optimName(!s_.bf16, r)) != present.end();
        optimFiles_.push_back(addFile(optimName(other ? !s_.bf16 : s_.bf16, r)));
        if (s_.isMissing(s_.files.size() - 1)) {
            missing.push_back(s_.files.back());
        }
    }
    if (refused_) {
        return *refused_;
    }
    rankFindings(stage3Files, missing);
    if (!unreadable_.empty()) {
        std::vector<std::string> names;
        for (const auto& u : unreadable_) {
            names.push_back(u.substr(0, u.find(':')));
        }
        s_.findings.push_back(
            {{"shard-unreadable", diagnose::Severity::Error, "Rank files of the ZeRO checkpoint cannot be read",
              unreadable_.front() +
                  (unreadable_.size() > 1 ? " (and " + std::to_string(unreadable_.size() - 1) + " more)"
                                          : std::string()) +
                  ". torch.load (and so zero_to_fp32.py) fails on it the same way; copy the file "
                  "again from the training node.",
              names}});
    }
    std::vector<std::string> extra;
    for (const auto& n : present) {
        if (std::find(s_.files.begin(), s_.files.end(), n) == s_.files.end()) {
            extra.push_back(n);
        }
    }
    if (s_.sources.present(optimFiles_.front())) {
        auto optim0 = source(optimFiles_.front());
        if (!optim0) {
            return optim0.error();
        }
        optim0_ = *optim0;
    }
    const Checkpoint* optim0 = optim0_.get();
    // -1: no optimizer file to say it.
    const std::int64_t count = optim0 ? partitionCount(*optim0).value_or(-1) : -1;
    if (!extra.empty() || (count >= 0 && count != s_.world)) {
        const std::int64_t expected = count >= 0 ? count : s_.world;
        s_.findings.push_back(
            {{"world-size-mismatch", diagnose::Severity::Error, "The rank files disagree with the saved world size",
              "dp_world_size is " + std::to_string(s_.world) + ", partition_count " +
                  (count >= 0 ? std::to_string(count) : std::string("unknown")) + ", and " +
                  fs::path(s_.loc.index).filename().string() + " holds " + std::to_string(present.size()) +
                  " *_optim_states.pt" +
                  (extra.empty() ? std::string() : " (not of this run: " + listNames(extra) + ")") +
                  ". zero_to_fp32.py stops with \"Expected " + std::to_string(expected) +
                  " of '*_optim_states.pt' ... but found " + std::to_string(present.size()) +
                  " files\" (DeepSpeed#1793): remove files left by an older save, or take every file from one save.",
              extra}});
    }
    return {};
}

// What zero_to_fp32's glob would find: the tag folder's *_optim_states.pt, from its listing where it
// has one. A folder nothing lists is asked for rank 0 up to one past the world size (where a stale
// file of an older, larger save is found), each under the prefix ds_config's bf16 says first.
Expected<std::vector<std::string>> Builder::optimFilesPresent()
{
    auto listed = tag_.list();
    if (!listed) {
        return listed.error();
    }
    std::vector<std::string> out;
    if (*listed) {
        std::copy_if((*listed)->begin(), (*listed)->end(), std::back_inserter(out), isOptimFile);
        std::sort(out.begin(), out.end());
        return out;
    }
    const bool bf16 = boolAt(model0(), "ds_config/bf16/enabled");
    for (std::int64_t r = 0; r <= s_.world; ++r) {
        for (const bool prefixed : {bf16, !bf16}) {
            auto there = tag_.exists(optimName(prefixed, r));
            if (!there) {
                return there.error();
            }
            if (*there) {
                out.push_back(optimName(prefixed, r));
                break;
            }
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

void Builder::rankFindings(bool stage3Files, const std::vector<std::string>& missing)
{
    if (!missing.empty()) {
        s_.findings.push_back(
            {{"zero-rank-missing", diagnose::Severity::Error, "Rank files of the ZeRO checkpoint are missing",
              "dp_world_size is " + std::to_string(s_.world) + " but " + fs::path(s_.loc.index).filename().string() +
                  " lacks " + listNames(missing) +
                  ". zero_to_fp32.py needs one *_optim_states.pt per rank (it stops with \"Expected " +
                  std::to_string(s_.world) +
                  " of '*_optim_states.pt' ... but found N files\", DeepSpeed#1793) and the fp32 "
                  "weights exist nowhere else; copy every rank's files from the training nodes.",
              missing}});
    }
    if (!stage3Files) {
        return;
    }
    std::vector<std::string> paths;
    for (const auto& t : model0().tensors) {
        if (t.path.rfind("module/", 0) == 0 && t.numel == 0) {
            paths.push_back(t.path);
        }
    }
    if (!paths.empty()) {
        // What torch.load of the model states gives is worth knowing, but with every rank's optimizer
        // states read the set itself consolidates: `check` of a healthy ZeRO-3 folder passes.
        s_.findings.push_back(
            {{"zero3-placeholder-module", optimComplete() ? diagnose::Severity::Info : diagnose::Severity::Warning,
              "The model states hold ZeRO-3 placeholders, not weights",
              std::to_string(paths.size()) + " tensors under `module` of " + s_.files.front() +
                  " have 0 elements: ZeRO-3 frees each partitioned parameter to torch.empty(0) "
                  "before saving, so load_state_dict with them fails with size mismatch ... "
                  "torch.Size([0]) (transformers#20082). The weights are the fp32 partitions in "
                  "the optim states: " +
                  (optimComplete() ? std::string("every rank's are here, and ")
                                   : std::string("with every rank's optim states present, ")) +
                  "`ckptscope convert " + s_.loc.dir + " -o model.pt` writes them (as zero_to_fp32.py does).",
              paths}});
    }
}

// zero_to_fp32 takes the stage from the optimizer states' zero_stage; without optimizer files the
// file names (per-rank model states) and ds_config say it.
Expected<void> Builder::detectStage(bool stage3Files)
{
    const Checkpoint* optim0 = optim0_.get();
    if (optim0) {
        const auto stage = intAt(*optim0, "optimizer_state_dict/zero_stage");
        if (!stage) {
            Error e = makeError(ErrorCode::Unsupported,
                                s_.bf16 ? "a BF16_Optimizer state (bf16 with ZeRO stage 0/1: no zero_stage, and its "
                                          "partitions keep their padding); zero_to_fp32.py refuses it too (\"is not "
                                          "a zero checkpoint\"): the 16-bit weights are whole in the model states' "
                                          "`module`"
                                        : "the optimizer states hold no zero_stage: zero_to_fp32.py says \"is not a "
                                          "zero checkpoint\"");
            e.path = tag_.pathOf(s_.files[optimFiles_.front()]);
            return e;
        }
        if (*stage < 1 || *stage > 3) {
            return makeError(ErrorCode::Unsupported, "unknown zero stage " + std::to_string(*stage));
        }
        s_.stage = static_cast<int>(*stage);
    } else {
        const auto configured = intAt(model0(), "ds_config/zero_optimization/stage");
        s_.stage = stage3Files ? 3 : static_cast<int>(std::clamp<std::int64_t>(configured.value_or(2), 1, 2));
    }
    if ((s_.stage == 3) != stage3Files) {
        return makeError(ErrorCode::Corrupt, "the optimizer states say ZeRO stage " + std::to_string(s_.stage) +
                                                 " but the model states are named for stage " +
                                                 (stage3Files ? "3" : "1/2"));
    }
    return {};
}

Expected<void> Builder::addModule()
{
    const Checkpoint& c = model0();
    const NodeIndex module = c.find("module");
    if (!module.valid()) {
        return makeError(ErrorCode::Unsupported, "the model states hold no `module`");
    }
    std::map<std::pair<std::uint32_t, std::uint64_t>, std::size_t> seen;  // (storage, offset) -> tensor
    const Node& m = c.nodes[module];
    for (std::uint32_t i = 0; i < m.childCount; ++i) {
        const Node& n = c.nodes[m.child(i)];
        if (n.kind != NodeKind::Tensor) {
            continue;
        }
        const TensorEntry& t = c.tensors[n.tensor];
        auto span = spanOf(t, modelFiles_.front(), "module tensor '" + std::string(n.name) + "'");
        if (!span) {
            return span.error();
        }
        const auto at = std::make_pair(static_cast<std::uint32_t>(t.storage.value()), span->byteOffset);
        Tensor& out = push(std::string(n.name), "module", t.shape, t.dtype);
        out.files = {modelFiles_.front()};
        if (auto it = seen.find(at); it != seen.end() && s_.tensors[it->second].numel() == t.numel) {
            out.aliasOf = it->second;  // tied weights stay one tensor, as torch.save keeps them
            continue;
        }
        seen.emplace(at, s_.tensors.size() - 1);
        out.pieces.push_back({span->source, span->storage, span->byteOffset, t.nbytes});
    }
    return {};
}

// Buffers are saved whole in the module; zero_to_fp32 casts them .float().
Expected<void> Builder::addBuffers()
{
    const Checkpoint& c = model0();
    std::vector<std::string> names;
    if (const NodeIndex b = c.find("buffer_names"); b.valid()) {
        for (std::uint32_t i = 0; i < c.nodes[b].childCount; ++i) {
            const pickle::Value& v = c.arena[c.nodes[c.nodes[b].child(i)].value];
            if (v.kind == pickle::Kind::Str) {
                names.push_back(v.text);
            }
        }
    } else {
        return makeError(ErrorCode::Unsupported, "the model states hold no buffer_names: \"is not a model state "
                                                 "checkpoint\" (zero_to_fp32.py)");
    }
    const NodeIndex module = c.find("module");
    if (!module.valid()) {
        return makeError(ErrorCode::Unsupported, "the model states hold no `module`");
    }
    const Node& m = c.nodes[module];
    for (std::uint32_t i = 0; i < m.childCount; ++i) {
        const Node& n = c.nodes[m.child(i)];
        if (n.kind != NodeKind::Tensor || std::find(names.begin(), names.end(), n.name) == names.end()) {
            continue;
        }
        const TensorEntry& t = c.tensors[n.tensor];
        auto span = spanOf(t, modelFiles_.front(), "buffer '" + std::string(n.name) + "'");
        if (!span) {
            return span.error();
        }
        if (t.dtype == DType::Unknown || elementSize(t.dtype) == 0 || t.dtype == DType::Complex64 ||
            t.dtype == DType::Complex128 || t.dtype == DType::Complex32) {
            return makeError(ErrorCode::Unsupported, "buffer '" + std::string(n.name) + "' is " +
                                                         std::string(dtypeName(t.dtype)) + ", not cast to float here");
        }
        Tensor& out = push(std::string(n.name), "buffer", t.shape, DType::Float32);
        out.from = t.dtype;
        out.files = {modelFiles_.front()};
        out.pieces.push_back({span->source, span->storage, span->byteOffset, t.nbytes});
    }
    return {};
}

// Frozen parameters are in the model states: whole on rank 0 (stages 1/2), or one padded partition
// per rank's model states (stage 3), concatenated and cut to numel.
Expected<void> Builder::addFrozen()
{
    const Checkpoint& c = model0();
    const NodeIndex n = c.find("frozen_param_shapes");
    if (!n.valid() || c.nodes[n].childCount == 0) {
        return {};
    }
    auto shapes = shapesOf(c, n, "frozen_param_shapes");
    if (!shapes) {
        return shapes.error();
    }
    const auto world = static_cast<std::uint64_t>(s_.world);
    for (auto& [name, shape] : *shapes) {
        const std::string path = "frozen_param_fragments/" + name;
        const TensorEntry* f0 = tensorAt(c, path);
        if (!f0) {
            return makeError(ErrorCode::Corrupt, "frozen parameter '" + name + "' has no frozen_param_fragments entry");
        }
        if (s_.stage < 3) {
            auto span = spanOf(*f0, modelFiles_.front(), path);
            if (!span) {
                return span.error();
            }
            Tensor& out = push(name, "frozen", f0->shape, f0->dtype);
            out.files = {modelFiles_.front()};
            out.pieces.push_back({span->source, span->storage, span->byteOffset, f0->nbytes});
            continue;
        }
        const std::uint64_t numel = numelOf(shape);
        const std::uint64_t per = (numel + world - 1) / world;
        Tensor& out = push(name, "frozen", shape, f0->dtype);
        out.files = modelFiles_;
        std::vector<detail::Piece> pieces;
        bool all = true;
        for (std::uint64_t r = 0; r < world; ++r) {
            const std::uint64_t want = std::min(per, numel - std::min(numel, r * per));
            if (!s_.sources.present(modelFiles_[r])) {
                all = false;
                continue;
            }
            auto held = source(modelFiles_[r]);
            if (!held) {
                return held.error();
            }
            const Checkpoint* rank = held->get();
            const TensorEntry* f = tensorAt(*rank, path);
            if (!f || f->dtype != f0->dtype) {
                return makeError(ErrorCode::Corrupt, s_.files[modelFiles_[r]] + " holds no " +
                                                         std::string(dtypeName(f0->dtype)) + " fragment of '" + name +
                                                         "'");
            }
            auto span = spanOf(*f, modelFiles_[r], path);
            if (!span) {
                return span.error();
            }
            if (!take({*span}, 0, want, elementSize(f->dtype), pieces)) {
                return makeError(ErrorCode::Corrupt, "the frozen fragments of '" + name + "' hold fewer than its " +
                                                         std::to_string(numel) + " elements");
            }
        }
        if (all) {
            out.pieces = std::move(pieces);
        }
    }
    return {};
}

Expected<std::vector<std::vector<std::pair<std::string, std::vector<std::int64_t>>>>> paramShapes(const Checkpoint& c)
{
    const NodeIndex list = c.find("param_shapes");
    if (!list.valid() || (c.nodes[list].kind != NodeKind::List && c.nodes[list].kind != NodeKind::Tuple)) {
        return makeError(ErrorCode::Unsupported, "the rank-0 model states hold no param_shapes list");
    }
    std::vector<std::vector<std::pair<std::string, std::vector<std::int64_t>>>> groups;
    for (std::uint32_t g = 0; g < c.nodes[list].childCount; ++g) {
        auto rows = shapesOf(c, c.nodes[list].child(g), "param_shapes");
        if (!rows) {
            return rows.error();
        }
        groups.push_back(std::move(*rows));
    }
    return groups;
}

// Stages 1/2: each group's partitions laid end to end across the ranks, params walked in order.
Expected<void> Builder::addParams12()
{
    auto groups = paramShapes(model0());
    if (!groups) {
        return groups.error();
    }
    const bool have = optimComplete();
    for (std::size_t g = 0; g < groups->size(); ++g) {
        std::vector<Span> spans;
        for (std::size_t r = 0; have && r < optimFiles_.size(); ++r) {
            const std::string path = "optimizer_state_dict/single_partition_of_fp32_groups/" + std::to_string(g);
            auto held = source(optimFiles_[r]);
            if (!held) {
                return held.error();
            }
            const TensorEntry* t = tensorAt(**held, path);
            if (!t || t->dtype != DType::Float32 || t->shape.size() != 1) {
                return makeError(ErrorCode::Unsupported, s_.files[optimFiles_[r]] + ": no flat float32 " + path +
                                                             " (not a ZeRO stage 1/2 optimizer state)");
            }
            auto span = spanOf(*t, optimFiles_[r], path);
            if (!span) {
                return span.error();
            }
            spans.push_back(*span);
        }
        partNumel_.emplace_back();
        for (const auto& sp : spans) {
            partNumel_.back().push_back(sp.numel);
        }
        // DeepSpeed pads each flat group to a multiple of 2 x world and cuts it into equal
        // partitions, the padding stripped from the tail on save: rank r holds
        // min(per, total - r * per) elements. Partitions of other lengths do not tile the group, and
        // reading them end to end would shift every param after the odd one (zero_to_fp32 checks
        // only the total).
        if (have && !spans.empty()) {
            const std::uint64_t per = spans.front().numel;
            const std::uint64_t all = total(spans);
            const std::uint64_t n = spans.size();
            bool tiles = roundUp(all, 2 * n) / n == per;
            for (std::size_t r = 0; tiles && r < spans.size(); ++r) {
                const std::uint64_t start = per > 0 && r > all / per ? all : std::min<std::uint64_t>(all, r * per);
                tiles = spans[r].numel == std::min(per, all - start);
            }
            if (!tiles) {
                std::string sizes;
                for (std::size_t k = 0; k < spans.size() && k < 8; ++k) {
                    sizes += (k ? ", " : "") + std::to_string(spans[k].numel);
                }
                return makeError(ErrorCode::Corrupt, "group " + std::to_string(g) +
                                                         ": the ranks' fp32 partitions hold " + sizes +
                                                         (spans.size() > 8 ? ", ..." : "") +
                                                         " elements, which do not tile the flat group (equal "
                                                         "partitions of the group padded to 2 x world, only the last "
                                                         "short): the rank files come from different saves or were "
                                                         "altered");
            }
        }
        FlatGroup flat;
        flat.numel = total(spans);
        if (have && !take(spans, 0, flat.numel, 4, flat.pieces)) {
            return makeError(ErrorCode::Internal, "group " + std::to_string(g) + " does not cover its partitions");
        }
        std::uint64_t offset = 0;
        for (auto& [name, shape] : (*groups)[g]) {
            const std::uint64_t numel = numelOf(shape);
            Tensor& out = push(name, "parameter", shape, DType::Float32);
            out.files = optimFiles_;
            const std::size_t index = byKey_.at(name);
            slots_.push_back({index, g, offset, numel});
            flat.members.emplace_back(index, offset);
            if (have && !take(spans, offset, numel, 4, out.pieces)) {
                return makeError(ErrorCode::Corrupt, "param '" + name +
                                                         "' runs past the ranks' fp32 partitions "
                                                         "(zero_to_fp32: consumed more numels than available)");
            }
            if (!checkedAdd(offset, numel, offset)) {
                return makeError(ErrorCode::Limit, "group " + std::to_string(g) +
                                                       ": param_shapes add up to more "
                                                       "elements than a tensor can hold");
            }
        }
        // zero_to_fp32's check: both totals agree once rounded up to the 2 x world alignment
        // (the padding sits at the tail of the last rank only).
        const auto align = static_cast<std::uint64_t>(2 * s_.world);
        if (have && roundUp(offset, align) != roundUp(total(spans), align)) {
            return makeError(ErrorCode::Corrupt, "group " + std::to_string(g) + ": consumed " +
                                                     std::to_string(roundUp(offset, align)) + " numels out of " +
                                                     std::to_string(roundUp(total(spans), align)) +
                                                     " - something is wrong (zero_to_fp32's check)");
        }
        if (have) {
            s_.flatGroups.push_back(std::move(flat));
        }
    }
    return {};
}

// Stage 3: every param is partitioned on its own, ceil(numel / world) elements per rank (the last
// ranks zero-padded); a rank's fp32_flat_groups are its partitions in param_shapes order.
Expected<void> Builder::addParams3()
{
    auto groups = paramShapes(model0());
    if (!groups) {
        return groups.error();
    }
    const bool have = optimComplete();
    std::vector<std::vector<Span>> ranks;
    for (std::size_t r = 0; have && r < optimFiles_.size(); ++r) {
        auto held = source(optimFiles_[r]);
        if (!held) {
            return held.error();
        }
        const Checkpoint& c = **held;
        const NodeIndex list = c.find("optimizer_state_dict/fp32_flat_groups");
        if (!list.valid() || (c.nodes[list].kind != NodeKind::List && c.nodes[list].kind != NodeKind::Tuple)) {
            return makeError(ErrorCode::Unsupported,
                             s_.files[optimFiles_[r]] + ": no fp32_flat_groups list (not a ZeRO-3 optimizer state)");
        }
        ranks.emplace_back();
        for (std::uint32_t g = 0; g < c.nodes[list].childCount; ++g) {
            const Node& n = c.nodes[c.nodes[list].child(g)];
            const std::string path = "fp32_flat_groups/" + std::to_string(g);
            if (n.kind != NodeKind::Tensor || c.tensors[n.tensor].dtype != DType::Float32 ||
                c.tensors[n.tensor].shape.size() != 1) {
                return makeError(ErrorCode::Unsupported,
                                 s_.files[optimFiles_[r]] + ": " + path + " is not a flat float32 tensor");
            }
            auto span = spanOf(c.tensors[n.tensor], optimFiles_[r], path);
            if (!span) {
                return span.error();
            }
            ranks.back().push_back(*span);
        }
        subNumel_.emplace_back();
        for (const auto& sp : ranks.back()) {
            subNumel_.back().push_back(sp.numel);
        }
    }
    const auto world = static_cast<std::uint64_t>(s_.world);
    std::uint64_t offset = 0;
    for (std::size_t g = 0; g < groups->size(); ++g) {
        for (auto& [name, shape] : (*groups)[g]) {
            const std::uint64_t numel = numelOf(shape);
            const std::uint64_t per = (numel + world - 1) / world;
            Tensor& out = push(name, "parameter", shape, DType::Float32);
            out.files = optimFiles_;
            slots_.push_back({byKey_.at(name), g, offset, numel});
            for (std::uint64_t r = 0; have && r < world; ++r) {
                const std::uint64_t want = std::min(per, numel - std::min(numel, r * per));
                if (offset + per > total(ranks[r]) || !take(ranks[r], offset, want, 4, out.pieces)) {
                    return makeError(ErrorCode::Corrupt, "param '" + name + "' runs past the fp32_flat_groups of " +
                                                             s_.files[optimFiles_[r]] +
                                                             " (zero_to_fp32: consumed more numels than available)");
                }
            }
            if (!checkedAdd(offset, per, offset) || offset > UINT64_MAX / world) {
                return makeError(ErrorCode::Limit, "param_shapes add up to more elements than a tensor can hold");
            }
        }
    }
    // Every rank holds the same partitions' lengths (ceil(numel / world) per param): a rank with
    // more or fewer does not tile the params, whatever rank 0 says.
    for (std::size_t r = 1; have && r < ranks.size(); ++r) {
        if (total(ranks[r]) != total(ranks.front())) {
            return makeError(ErrorCode::Corrupt, s_.files[optimFiles_[r]] + " holds " +
                                                     std::to_string(total(ranks[r])) + " fp32 elements and " +
                                                     s_.files[optimFiles_.front()] + " " +
                                                     std::to_string(total(ranks.front())) +
                                                     ": the partitions do not tile the params (the rank files come "
                                                     "from different saves or were altered)");
        }
    }
    if (have && offset * world != total(ranks.front()) * world) {
        return makeError(ErrorCode::Corrupt, "consumed " + std::to_string(offset * world) + " numels out of " +
                                                 std::to_string(total(ranks.front()) * world) +
                                                 " - something is wrong (zero_to_fp32's check)");
    }
    return {};
}

// shared_params: alias -> the name that holds the data; applied last, as zero_to_fp32 does.
void Builder::addShared()
{
    const Checkpoint& c = model0();
    const NodeIndex n = c.find("shared_params");
    if (!n.valid()) {
        return;
    }
    for (std::uint32_t i = 0; i < c.nodes[n].childCount; ++i) {
        const Node& row = c.nodes[c.nodes[n].child(i)];
        const pickle::Value& v = c.arena[row.value];
        if (v.kind != pickle::Kind::Str) {
            continue;
        }
        const auto it = byKey_.find(v.text);
        if (it == byKey_.end()) {
            continue;
        }
        const std::size_t target = it->second;
        Tensor alias = s_.tensors[target];
        Tensor& out = push(std::string(row.name), "shared", alias.shape, alias.dtype);
        out.from = alias.from;
        out.files = alias.files;
        out.aliasOf = alias.aliasOf.value_or(target);  // an alias of an alias shares the same data
    }
}

// Where flat group `k`'s base optimizer state is in a rank's optimizer states: stage 3 keeps the
// torch state_dict of its sub-groups (stage3.py), stage 1/2 the torch state_dict of its groups (the
// default) or, with elastic_checkpoint, a list of lean per-group states.
std::string Builder::statePath(const Checkpoint& c, std::size_t k) const
{
    if (s_.stage == 3) {
        return "optimizer_state_dict/optimizer_state_dict/state/" + std::to_string(k);
    }
    const bool torchForm = c.find("optimizer_state_dict/base_optimizer_state/state").valid();
    return std::string("optimizer_state_dict/base_optimizer_state/") + (torchForm ? "state/" : "") + std::to_string(k);
}

// One rank's optimizer tensors `key` laid out as its fp32 partitions, of any one dtype; a torch
// state_dict's may still carry the tail padding: only the partition's length is taken.
Expected<std::vector<Span>> Builder::stateSpans(std::size_t rank, const std::string& key, DType& dtype)
{
    auto held = source(optimFiles_[rank]);
    if (!held) {
        return held.error();
    }
    const Checkpoint& c = **held;
    const bool three = s_.stage == 3;
    const std::size_t count = three ? subNumel_.at(rank).size() : partNumel_.size();
    std::vector<Span> spans;
    for (std::size_t g = 0; g < count; ++g) {
        const std::uint64_t want = three ? subNumel_[rank][g] : partNumel_[g].at(rank);
        const TensorEntry* t = tensorAt(c, statePath(c, g) + "/" + key);
        if (!t || t->shape.size() != 1 || t->numel < want || elementSize(t->dtype) == 0 ||
            (dtype != DType::Unknown && t->dtype != dtype)) {
            return makeError(ErrorCode::Unsupported, s_.files[optimFiles_[rank]] + ": the optimizer's '" + key +
                                                         "' of group " + std::to_string(g) +
                                                         " does not mirror the fp32 partition in one dtype; "
                                                         "--keep-optimizer cannot place it");
        }
        dtype = t->dtype;
        auto span = spanOf(*t, optimFiles_[rank], key);
        if (!span) {
            return span.error();
        }
        span->numel = want;
        spans.push_back(*span);
    }
    return spans;
}

Expected<void> Builder::addFlatState(const std::string& key)
{
    DType dtype = DType::Unknown;
    std::vector<std::vector<Span>> ranks;
    for (std::size_t r = 0; r < optimFiles_.size(); ++r) {
        auto spans = stateSpans(r, key, dtype);
        if (!spans) {
            return spans.error();
        }
        ranks.push_back(std::move(*spans));
    }
    const auto world = static_cast<std::uint64_t>(s_.world);
    const std::uint32_t esize = elementSize(dtype);
    for (const auto& slot : slots_) {
        Tensor t;
        t.key = key;
        t.role = "optimizer";
        t.dtype = dtype;
        t.from = dtype;
        t.shape = s_.tensors[slot.tensor].shape;
        t.files = optimFiles_;
        t.parents = {"optimizer", "state", s_.tensors[slot.tensor].key};
        bool ok = true;
        if (s_.stage == 3) {
            const std::uint64_t per = (slot.numel + world - 1) / world;
            for (std::uint64_t r = 0; ok && r < world; ++r) {
                ok = take(ranks[r], slot.offset, std::min(per, slot.numel - std::min(slot.numel, r * per)), esize,
                          t.pieces);
            }
        } else {
            std::vector<Span> group;
            group.reserve(ranks.size());
            for (auto& rank : ranks) {
                group.push_back(rank.at(slot.group));
            }
            ok = take(group, slot.offset, slot.numel, esize, t.pieces);
        }
        if (!ok) {
            return makeError(ErrorCode::Corrupt, "the optimizer's '" + key + "' of '" + s_.tensors[slot.tensor].key +
                                                     "' runs past its partitions");
        }
        s_.tensors.push_back(std::move(t));
    }
    return {};
}

// A value the base optimizer keeps once per flat group (`step`: a count, or a 0-dim tensor since
// torch 1.12), repeated for each param of the group as torch.optim keeps one per param. A tensor
// gets a storage of its own per param: Adam increments it in place.
Expected<void> Builder::addGroupValue(const std::string& key)
{
    const CheckpointPtr src = optim0_;
    for (const auto& slot : slots_) {
        const NodeIndex n = src->find(statePath(*src, slot.group) + "/" + key);
        const std::string param = s_.tensors[slot.tensor].key;
        Tensor t;
        t.key = key;
        t.role = "optimizer";
        t.files = {optimFiles_.front()};
        t.parents = {"optimizer", "state", param};
        const Node* node = n.valid() ? &src->nodes[n] : nullptr;
        if (node && node->kind == NodeKind::Tensor && src->tensors[node->tensor].numel == 1) {
            const TensorEntry& e = src->tensors[node->tensor];
            auto span = spanOf(e, optimFiles_.front(), key);
            if (!span) {
                return span.error();
            }
            t.dtype = e.dtype;
            t.from = e.dtype;
            t.shape.assign(e.shape.begin(), e.shape.end());
            t.pieces.push_back({span->source, span->storage, span->byteOffset, e.nbytes});
        } else if (node && node->kind != NodeKind::Tensor && plainValue(src->arena, node->value, 0)) {
            const pickle::ValueId v = node->value;
            t.value = [src, v](pickle::Arena& a) { return copyPlain(src->arena, v, a); };
        } else {
            return makeError(ErrorCode::Unsupported,
                             s_.files[optimFiles_.front()] + ": the optimizer's '" + key + "' of group " +
                                 std::to_string(slot.group) + " (param '" + param +
                                 "') is missing, or neither a plain value nor one element; --keep-optimizer cannot "
                                 "place it");
        }
        s_.tensors.push_back(std::move(t));
    }
    return {};
}

// The base optimizer's param_groups, as torch.optim.Optimizer.state_dict() has them, each `params`
// rewritten from flat group indices to the names of the consolidated parameters those flat groups
// hold (torch's load_state_dict pairs them with the new optimizer's params in order, whatever they
// are). Stage 3 lists its sub-groups under the param group they came from. The elastic lean states
// keep no param_groups: none is written then.
Expected<void> Builder::addParamGroups()
{
    const CheckpointPtr src = optim0_;
    const NodeIndex n = src->find(s_.stage == 3 ? "optimizer_state_dict/optimizer_state_dict/param_groups"
                                                : "optimizer_state_dict/base_optimizer_state/param_groups");
    if (!n.valid()) {
        return {};
    }
    std::size_t flatGroups = 0;
    for (const auto& slot : slots_) {
        flatGroups = std::max(flatGroups, slot.group + 1);
    }
    std::vector<std::vector<std::string>> names(flatGroups);
    for (const auto& slot : slots_) {
        names[slot.group].push_back(s_.tensors[slot.tensor].key);
    }
    const pickle::Arena& a = src->arena;
    const pickle::Value& list = a[src->nodes[n].value];
    auto refuse = [&](const std::string& why) {
        return makeError(ErrorCode::Unsupported,
                         s_.files[optimFiles_.front()] + ": the optimizer's param_groups " + why +
                             "; --keep-optimizer keeps plain hyperparameters and flat group indices only");
    };
    if (list.kind != pickle::Kind::List) {
        return refuse("are no list");
    }
    struct Group {
        pickle::ValueId dict;
        std::vector<std::string> params;
    };
    std::vector<Group> groups;
    std::vector<int> listed(flatGroups, 0);
    for (const auto id : list.items) {
        const pickle::Value& g = a[id];
        if (g.kind != pickle::Kind::Dict) {
            return refuse("hold something that is no dict");
        }
        Group out{id, {}};
        for (std::size_t i = 0; i + 1 < g.items.size(); i += 2) {
            const pickle::Value& k = a[g.items[i]];
            if (k.kind != pickle::Kind::Str) {
                return refuse("have a key that is no string");
            }
            if (std::string_view(k.text) != "params") {
                if (!plainValue(a, g.items[i + 1], 0)) {
                    return refuse("hold a " + std::string(pickle::kindName(a[g.items[i + 1]].kind)) + " under '" +
                                  std::string(k.text) + "'");
                }
                continue;
            }
            for (const auto p : a[g.items[i + 1]].items) {
                const pickle::Value& index = a[p];
                if (index.kind != pickle::Kind::Int || index.i < 0 || static_cast<std::size_t>(index.i) >= flatGroups) {
                    return refuse("name a param that is no flat group of the model states' param_shapes");
                }
                ++listed[static_cast<std::size_t>(index.i)];
                const auto& held = names[static_cast<std::size_t>(index.i)];
                out.params.insert(out.params.end(), held.begin(), held.end());
            }
        }
        groups.push_back(std::move(out));
    }
    if (std::any_of(listed.begin(), listed.end(), [](int times) { return times != 1; })) {
        return refuse("do not list every flat group exactly once");
    }
    Tensor t;
    t.key = "param_groups";
    t.role = "optimizer";
    t.files = {optimFiles_.front()};
    t.parents = {"optimizer"};
    t.value = [src, groups](pickle::Arena& out) {
        pickle::IdList built;
        for (const auto& g : groups) {
            const pickle::Value& dict = src->arena[g.dict];
            pickle::IdList items;
            for (std::size_t i = 0; i + 1 < dict.items.size(); i += 2) {
                items.push_back(copyPlain(src->arena, dict.items[i], out));
                if (std::string_view(src->arena[dict.items[i]].text) != "params") {
                    items.push_back(copyPlain(src->arena, dict.items[i + 1], out));
                    continue;
                }
                pickle::IdList params;
                for (const auto& name : g.params) {
                    params.push_back(out.str(name));
                }
                items.push_back(out.list(std::move(params)));
            }
            built.push_back(out.dict(std::move(items), false));
        }
        return out.list(std::move(built));
    };
    s_.tensors.push_back(std::move(t));
    return {};
}

// {"model": the fp32 model, "optimizer": {"state": {param: {...}}, "param_groups": [...]}}: the
// state keys of rank 0's first flat group in their order, per-element ones consolidated like the
// master weights, per-group ones repeated per param.
Expected<void> Builder::addOptimizer()
{
    if (s_.tensors.empty() || slots_.empty() || !optimComplete()) {
        return {};  // nothing located: the findings say why, and consolidate refuses
    }
    const Checkpoint& c = *optim0_;
    const std::uint64_t first = s_.stage == 3 ? subNumel_.front().front() : partNumel_.front().front();
    const NodeIndex n = c.find(statePath(c, 0));
    std::vector<std::pair<std::string, bool>> keys;  // name, per element
    for (std::uint32_t i = 0; n.valid() && i < c.nodes[n].childCount; ++i) {
        const Node& k = c.nodes[c.nodes[n].child(i)];
        const bool flat = k.kind == NodeKind::Tensor && k.name != "step" && c.tensors[k.tensor].shape.size() == 1 &&
                          c.tensors[k.tensor].numel >= first;
        keys.emplace_back(std::string(k.name), flat);
    }
    if (std::none_of(keys.begin(), keys.end(), [](const auto& k) { return k.second; })) {
        return makeError(ErrorCode::Unsupported, "--keep-optimizer: the optimizer states hold no per-element state "
                                                 "(exp_avg, ...) laid out as the fp32 partitions");
    }
    for (auto& t : s_.tensors) {
        t.parents = {"model"};
    }
    for (const auto& [key, flat] : keys) {
        if (auto r = flat ? addFlatState(key) : addGroupValue(key); !r) {
            return r;
        }
    }
    return addParamGroups();
}

Expected<void> Builder::run()
{
    const auto stage3Files = tag_.exists(modelName(true, 0));
    if (!stage3Files) {
        return stage3Files.error();
    }
    if (auto r = openFiles(*stage3Files); !r) {
        return r;
    }
    if (auto r = detectStage(*stage3Files); !r) {
        return r;
    }
    if (weights_ == Weights::Module) {
        if (s_.stage == 3) {
            return makeError(ErrorCode::Unsupported, "ZeRO-3 model states hold 0-element placeholders, not 16-bit "
                                                     "weights: take the fp32 master weights (the default)");
        }
        return addModule();
    }
    if (auto r = addBuffers(); !r) {
        return r;
    }
    if (auto r = addFrozen(); !r) {
        return r;
    }
    if (auto r = s_.stage == 3 ? addParams3() : addParams12(); !r) {
        return r;
    }
    addShared();
    return keep_ ? addOptimizer() : Expected<void>{};
}

// Each flat group becomes a storage-only entry its params view; a shared param that aliased one of
// them views the same place. A group whose params are not all still its plain fp32 tensors (a
// later key of the same name replaced one) keeps a storage per param.
void viewFlatGroups(const Set& set, std::vector<detail::Assembled>& out)
{
    for (const auto& g : set.flatGroups) {
        const bool plain = !g.members.empty() && std::all_of(g.members.begin(), g.members.end(), [&](const auto& m) {
            const Tensor& t = set.tensors[m.first];
            return t.role == "parameter" && t.dtype == DType::Float32 && t.from == DType::Float32 && !t.aliasOf &&
                   !t.value && m.second + t.numel() <= g.numel;
        });
        if (!plain) {
            continue;
        }
        detail::Assembled storage;
        storage.shape = {static_cast<std::int64_t>(g.numel)};
        storage.pieces = g.pieces;
        storage.storageOnly = true;
        for (const auto& [member, offset] : g.members) {
            out[member].pieces.clear();
            out[member].aliasOf = out.size();
            out[member].aliasOffset = offset;
        }
        out.push_back(std::move(storage));
    }
    for (auto& t : out) {
        if (t.aliasOf && out[*t.aliasOf].aliasOf) {
            t.aliasOffset = out[*t.aliasOf].aliasOffset;
            t.aliasOf = out[*t.aliasOf].aliasOf;
        }
    }
}

// The tag folder `latest` names is a child of the folder holding `latest` (isChildTag), and once
// symlinks are resolved still one: a symlink would make it any folder's. `latest` itself is a member
// of the folder (latestOf).
Expected<void> checkTagFolder(const SetLocation& loc)
{
    if (auto latest = latestOf(loc.dir); !latest) {
        return latest.error();
    }
    const fs::path tag(loc.index);
    if (tag == fs::path(loc.dir)) {
        return {};
    }
    std::error_code ec;
    const fs::path home = fs::canonical(loc.dir.empty() ? fs::path(".") : fs::path(loc.dir), ec);
    const std::string name = tag.filename().string();
    const fs::path real = fs::canonical(tag, ec);
    if (!isChildTag(name) || ec || real.parent_path() != home) {
        const std::string named =
            name.empty() ? name : tag.lexically_relative(loc.dir.empty() ? fs::path(".") : fs::path(loc.dir)).string();
        return notChildTag(named, loc.dir, (fs::path(loc.dir) / "latest").string(),
                           real.empty() ? std::string() : ", which resolves to " + real.string() + ",");
    }
    return {};
}

}  // namespace

Expected<Set> open(const SetLocation& loc, Weights weights, bool keepOptimizer)
{
    if (auto tag = checkTagFolder(loc); !tag) {
        return tag.error();
    }
    return open(std::make_shared<const source::LocalFolder>(loc.index), loc, weights, keepOptimizer);
}

Expected<Set> open(const source::FolderPtr& tag, const SetLocation& loc, Weights weights, bool keepOptimizer)
{
    Set set;
    set.loc = loc;
    Builder b(set, *tag, weights, keepOptimizer && weights == Weights::Fp32Master);
    if (auto r = b.run(); !r) {
        Error e = r.error();
        if (e.path.empty()) {
            e.path = loc.index;
        }
        return e;
    }
    return set;
}

std::string tagIn(std::string_view latestText)
{
    std::string t(latestText.substr(0, latestText.find('\n')));
    while (!t.empty() && (t.back() == '\r' || t.back() == ' ')) {
        t.pop_back();
    }
    return t;
}

bool isChildTag(std::string_view tag)
{
    return !tag.empty() && tag != "." && tag != ".." && tag.find('/') == std::string_view::npos &&
           tag.find('\0') == std::string_view::npos;
}

Error notChildTag(const std::string& tag, const std::string& dir, const std::string& latestPath,
                  const std::string& resolved)
{
    Error e = makeError(ErrorCode::Corrupt, "latest names '" + tag + "'" + (resolved.empty() ? "," : resolved) +
                                                " not a tag folder inside " + dir +
                                                ": a ZeRO checkpoint's tag folder is a child of the folder "
                                                "holding latest, so nothing was read");
    e.path = latestPath;
    return e;
}

Expected<std::string> latestOf(const std::string& dir)
{
    return memberOfFolder(dir, "latest", "the DeepSpeed save folder");
}

bool opensAsSet(const SetLocation& loc)
{
    return open(loc).ok();
}

std::vector<detail::Assembled> assembled(const Set& set, bool groupStorages)
{
    std::vector<detail::Assembled> out;
    out.reserve(set.tensors.size() + set.flatGroups.size());
    for (const auto& t : set.tensors) {
        out.push_back({t.key, t.dtype, t.shape, t.pieces, t.from, t.aliasOf, t.parents, t.value});
    }
    if (groupStorages) {
        viewFlatGroups(set, out);
    }
    return out;
}

Expected<void> checkConsolidatable(const Set& set)
{
    if (!set.complete()) {
        const std::string codes = detail::stoppingCodes(set.findings);
        Error e = makeError(ErrorCode::Corrupt, "the ZeRO checkpoint is incomplete (" +
                                                    (codes.empty() ? std::string("rank files missing") : codes) +
                                                    "; its findings name the rank files missing or unreadable): it "
                                                    "is not read as one model, and nothing is written from it");
        e.path = set.loc.dir;
        return e;
    }
    return {};
}

Expected<ConsolidateResult> consolidate(const Set& set, const std::string& outPath, bool groupStorages)
{
    if (auto whole = checkConsolidatable(set); !whole) {
        return whole.error();
    }
    return detail::writeAssembled(assembled(set, groupStorages), set.sources, outPath);
}

}  // namespace ckpt::sharded::zero
