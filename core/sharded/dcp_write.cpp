// A checkpoint -> a single-rank DCP folder. Each item is written by the ordinary torch writer
// (write::writeCheckpoint of a one-value plan) and appended to `__0_0.distcp`, which is what
// FileSystemWriter's _write_item does with torch.save into its stream; `.metadata` is the Metadata
// pickle built from the real classes' module paths and pickled state (pytorch/pytorch
// torch/distributed/checkpoint/metadata.py, filesystem.py `_StorageInfo`, planner_helpers.py
// `_create_write_item_for_tensor`, default_planner.py `create_default_global_save_plan`).
#include "sharded/dcp_write.h"

#include "pickle/pickler.h"
#include "sharded/out_dir.h"

#include <array>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

namespace ckpt::sharded {

namespace fs = std::filesystem;
using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

namespace {

constexpr std::string_view kMetadataModule = "torch.distributed.checkpoint.metadata";
constexpr const char* kDataFile = "__0_0.distcp";
constexpr int kMaxDepth = 1000;

Error usage(const std::string& message)
{
    return makeError(ErrorCode::Usage, message);
}

// A leaf of the flattened state dict: its path (str for dict keys, int for list indices) and value.
struct Leaf {
    std::vector<std::pair<bool, std::string>> path;  // (is index, text)
    std::string fqn;
    ValueId value;
};

bool isContainer(const Arena& a, ValueId id)
{
    const Kind k = a[id].kind;
    return k == Kind::Dict || k == Kind::List;
}

// _traverse.py `_is_terminal`: a mapping never is; a list is unless it holds a tensor or a
// container that is not terminal itself; anything else (tuples too) is.
bool terminal(const Arena& a, ValueId id, int depth)
{
    const auto& v = a[id];
    if (v.kind == Kind::Dict) {
        return false;
    }
    if (v.kind != Kind::List || depth > kMaxDepth) {
        return true;
    }
    return std::all_of(v.items.begin(), v.items.end(), [&](ValueId e) {
        return a[e].kind != Kind::Tensor && !(isContainer(a, e) && !terminal(a, e, depth + 1));
    });
}

Expected<std::string> dcpKeyText(const Arena& a, ValueId key)
{
    const auto& k = a[key];
    switch (k.kind) {
    case Kind::Str:
        return std::string(k.text.view());
    case Kind::Int:
        return std::to_string(k.i);
    case Kind::Bool:
        return std::string(k.flag ? "True" : "False");
    default:
        return usage("a DCP folder's keys are str(key) of each dict key, and a key here is a " +
                     std::string(pickle::kindName(k.kind)) + "; rename it first");
    }
}

Expected<void> collect(const Arena& a, ValueId id, Leaf& at, int depth, std::vector<Leaf>& out)
{
    if (depth > kMaxDepth) {
        return makeError(ErrorCode::Limit, "the state dict nests more than 1000 levels deep");
    }
    const auto& v = a[id];
    if (v.kind == Kind::Dict) {
        for (std::size_t i = 0; i + 1 < v.items.size(); i += 2) {
            auto k = dcpKeyText(a, v.items[i]);
            if (!k) {
                return k.error();
            }
            at.path.emplace_back(false, std::move(*k));
            if (auto r = collect(a, v.items[i + 1], at, depth + 1, out); !r) {
                return r;
            }
            at.path.pop_back();
        }
        return {};
    }
    if (depth > 0 && !terminal(a, id, 0)) {
        for (std::size_t i = 0; i < v.items.size(); ++i) {
            at.path.emplace_back(true, std::to_string(i));
            if (auto r = collect(a, v.items[i], at, depth + 1, out); !r) {
                return r;
            }
            at.path.pop_back();
        }
        return {};
    }
    Leaf leaf{at.path, {}, id};
    for (const auto& [index, text] : at.path) {
        leaf.fqn += (leaf.fqn.empty() ? "" : ".") + text;
    }
    out.push_back(std::move(leaf));
    return {};
}

// The plan of each item in turn: the caller's arena with the item as root and only its storage,
// renumbered 0. One copy of the arena serves every item (each item's storage number is put back
// once it is written): a copy per item made a 40,000-tensor convert quadratic, minutes for what
// takes a second.
class ItemPlans {
public:
    explicit ItemPlans(const transform::Plan& plan) : whole_(plan)
    {
        sub_.options = plan.options;
        sub_.options.format = transform::OutputFormat::Torch;
        sub_.arena = plan.arena;
    }
    ItemPlans(const ItemPlans&) = delete;
    ItemPlans& operator=(const ItemPlans&) = delete;
    ItemPlans(ItemPlans&&) = delete;
    ItemPlans& operator=(ItemPlans&&) = delete;
    ~ItemPlans() = default;

    // Valid until the next call.
    const transform::Plan& of(ValueId value)
    {
        if (renumbered_.valid()) {
            sub_.arena[renumbered_].i = oldIndex_;
            renumbered_ = {};
        }
        sub_.arena.storages.clear();
        sub_.storages.clear();
        sub_.tensorCount = 0;
        if (whole_.arena[value].kind == Kind::Tensor) {
            const ValueId storage = pickle::tensorOf(whole_.arena, value).storage;
            oldIndex_ = whole_.arena[storage].i;
            const auto index = static_cast<std::size_t>(oldIndex_);
            sub_.storages.push_back(whole_.storages[index]);
            sub_.arena.storages.push_back(whole_.arena.storages[index]);
            sub_.arena[storage].i = 0;
            renumbered_ = storage;
            sub_.tensorCount = 1;
        }
        sub_.root = value;
        return sub_;
    }

private:
    const transform::Plan& whole_;
    transform::Plan sub_;
    ValueId renumbered_;         // the storage value whose number `of` changed
    std::int64_t oldIndex_ = 0;  // its number in the caller's arena
};

// Builds the Metadata pickle's values in their own arena.
class MetadataBuilder {
public:
    ValueId object(std::string_view module, std::string_view name, ValueId state)
    {
        pickle::ObjectInfo o;
        o.callable = {std::string(module), std::string(name)};
        o.form = pickle::ObjectForm::NewObj;
        o.args = a_.tuple({});
        o.state = state;
        return a_.object(std::move(o));
    }
    ValueId call(std::string_view module, std::string_view name, pickle::IdList args)
    {
        pickle::ObjectInfo o;
        o.callable = {std::string(module), std::string(name)};
        o.form = pickle::ObjectForm::Reduce;
        o.args = a_.tuple(std::move(args));
        return a_.object(std::move(o));
    }
    ValueId size(const std::vector<std::int64_t>& dims)
    {
        std::vector<ValueId> items;
        items.reserve(dims.size());
        for (const auto d : dims) {
            items.push_back(a_.integer(d));
        }
        return call("torch", "Size", {a_.tuple(std::move(items))});
    }
    ValueId fields(const std::vector<std::pair<std::string, ValueId>>& kv)
    {
        std::vector<ValueId> items;
        items.reserve(2 * kv.size());
        for (const auto& [k, v] : kv) {
            items.push_back(a_.str(k));
            items.push_back(v);
        }
        return a_.dict(std::move(items), false);
    }

    // TensorProperties.__getstate__: (dtype, layout, requires_grad, memory_format, pin_memory),
    // the memory format as its _MEM_FORMAT_ENCODING member (0: contiguous_format).
    ValueId tensorStorage(const pickle::TensorInfo& t)
    {
        const ValueId props =
            object(kMetadataModule, "TensorProperties",
                   a_.tuple({a_.dtype(t.dtype), call("torch.serialization", "_get_layout", {a_.str("torch.strided")}),
                             a_.boolean(t.requiresGrad), call(kMetadataModule, "_MEM_FORMAT_ENCODING", {a_.integer(0)}),
                             a_.boolean(false)}));
        const std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
        const ValueId chunk =
            object(kMetadataModule, "ChunkStorageMetadata",
                   fields({{"offsets", size(std::vector<std::int64_t>(shape.size(), 0))}, {"sizes", size(shape)}}));
        return object(kMetadataModule, "TensorStorageMetadata",
                      fields({{"properties", props}, {"size", size(shape)}, {"chunks", a_.list({chunk})}}));
    }

    void add(const Leaf& leaf, const Arena& source, std::uint64_t offset, std::uint64_t length)
    {
        const bool tensor = source[leaf.value].kind == Kind::Tensor;
        ValueId index;
        if (tensor) {
            const auto& t = pickle::tensorOf(source, leaf.value);
            sdm_.push_back(a_.str(leaf.fqn));
            sdm_.push_back(tensorStorage(t));
            index = object(kMetadataModule, "MetadataIndex",
                           fields({{"fqn", a_.str(leaf.fqn)},
                                   {"index", a_.integer(0)},
                                   {"offset", size(std::vector<std::int64_t>(t.shape.size(), 0))}}));
        } else {
            sdm_.push_back(a_.str(leaf.fqn));
            sdm_.push_back(object(kMetadataModule, "BytesStorageMetadata", {}));
            index = object(kMetadataModule, "MetadataIndex", fields({{"fqn", a_.str(leaf.fqn)}, {"index", a_.none()}}));
        }
        storage_.push_back(index);
        storage_.push_back(object("torch.distributed.checkpoint.filesystem", "_StorageInfo",
                                  fields({{"relative_path", a_.str(kDataFile)},
                                          {"offset", a_.integer(static_cast<std::int64_t>(offset))},
                                          {"length", a_.integer(static_cast<std::int64_t>(length))}})));
        std::vector<ValueId> path;
        for (const auto& [isIndex, text] : leaf.path) {
            path.push_back(isIndex ? a_.integer(std::stoll(text)) : a_.str(text));
        }
        planner_.push_back(a_.str(leaf.fqn));
        planner_.push_back(a_.tuple(std::move(path)));
    }

    Expected<std::string> pickled(const std::string& checkpointId)
    {
        const ValueId meta = object(kMetadataModule, "StorageMeta",
                                    fields({{"checkpoint_id", a_.str(checkpointId)},
                                            {"save_id", a_.str(uuid())},
                                            {"load_id", a_.none()},
                                            {"modules", a_.list({})}}));
        const ValueId root = object(kMetadataModule, "Metadata",
                                    fields({{"state_dict_metadata", a_.dict(std::move(sdm_), false)},
                                            {"planner_data", a_.dict(std::move(planner_), false)},
                                            {"storage_data", a_.dict(std::move(storage_), false)},
                                            {"storage_meta", meta},
                                            {"version", a_.str("1.0.0")}}));
        return pickle::picklePersistent(a_, root);
    }

private:
    // save_id is str(uuid.uuid4()) (filesystem.py _generate_uuid).
    static std::string uuid()
    {
        std::random_device rd;
        std::array<std::uint8_t, 16> b{};
        for (auto& x : b) {
            x = static_cast<std::uint8_t>(rd());
        }
        b[6] = static_cast<std::uint8_t>((b[6] & 0x0FU) | 0x40U);
        b[8] = static_cast<std::uint8_t>((b[8] & 0x3FU) | 0x80U);
        static constexpr const char* hex = "0123456789abcdef";
        std::string s;
        for (std::size_t i = 0; i < b.size(); ++i) {
            if (i == 4 || i == 6 || i == 8 || i == 10) {
                s += '-';
            }
            s += hex[b[i] >> 4U];
            s += hex[b[i] & 0x0FU];
        }
        return s;
    }

    Arena a_;
    std::vector<ValueId> sdm_;
    std::vector<ValueId> storage_;
    std::vector<ValueId> planner_;
};

Expected<std::uint64_t> append(const std::string& from, std::ofstream& to, const std::string& toPath)
{
    std::ifstream in(from, std::ios::binary);
    std::vector<char> buf(std::size_t{1} << 20);
    std::uint64_t n = 0;
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        const auto got = in.gcount();
        if (got <= 0) {
            break;
        }
        to.write(buf.data(), got);
        n += static_cast<std::uint64_t>(got);
    }
    if (in.bad() || !to) {
        return write::detail::writeError(toPath, "cannot write the data file", errno);
    }
    return n;
}

}  // namespace

Expected<DcpWriteResult> writeDcpFolder(const Checkpoint& in, const transform::Plan& plan, const std::string& outDir,
                                        const write::WriteOptions& options,
                                        const std::function<void(const write::WriteProgress&)>& progress)
{
    const Arena& a = plan.arena;
    if (a[plan.root].kind != Kind::Dict) {
        return usage("a DCP folder holds a state dict, and the root is not a dict; choose it with --select");
    }
    std::vector<Leaf> leaves;
    Leaf at;
    if (auto r = collect(a, plan.root, at, 0, leaves); !r) {
        return r.error();
    }
    std::set<std::string> seen;
    for (const auto& l : leaves) {
        if (!seen.insert(l.fqn).second) {
            // flatten_state_dict raises ValueError("duplicated flatten key ...") here.
            return usage("two paths flatten to the DCP key '" + l.fqn +
                         "' (keys are joined by '.'); rename one of them first");
        }
        if (a[l.value].kind == Kind::Tensor) {
            const auto& t = pickle::tensorOf(a, l.value);
            if (t.form != pickle::TensorForm::Strided || !t.storage.valid() || a[t.storage].kind != Kind::Storage) {
                return makeError(ErrorCode::Unsupported,
                                 "'" + l.fqn + "' is not a plain strided tensor; a DCP folder holds those only");
            }
        }
    }
    const fs::path dir(outDir);
    std::error_code ec;
    if (fs::is_directory(dir, ec)) {
        for (const auto& e : fs::directory_iterator(dir, ec)) {
            const std::string n = e.path().filename().string();
            if (n == ".metadata" || n.ends_with(".distcp") || (n.starts_with("__") && n.ends_with(".metadata"))) {
                Error err = usage("already holds " + n +
                                  " of a DCP set; write the new one into a new or empty folder (nothing was written)");
                err.path = outDir;
                return err;
            }
        }
    }
    auto exists = detail::checkTargetDir(dir, "__", ".distcp");
    if (!exists) {
        return exists.error();
    }
    auto tmp = detail::TempDir::create(dir);
    if (!tmp) {
        return tmp.error();
    }
    const std::string dataPath = (fs::path(tmp->path()) / kDataFile).string();
    const std::string itemPath = (fs::path(tmp->path()) / "item.pt").string();
    std::ofstream data(dataPath, std::ios::binary);
    MetadataBuilder meta;
    DcpWriteResult result;
    result.dir = outDir;
    std::uint64_t offset = 0;
    // Progress over the whole data file: the items' storages (what nearly all of it is), the items
    // written so far, and the one being written.
    std::uint64_t planned = 0;
    for (const auto& s : plan.storages) {
        planned += s.nbytes;
    }
    std::function<void(const write::WriteProgress&)> itemProgress;
    if (progress) {
        itemProgress = [&](const write::WriteProgress& p) {
            const std::uint64_t done = offset + p.bytesDone;
            progress({done, std::max(done, planned), {}});
        };
    }
    // BYTE_IO items first, then tensors, as _split_by_size_and_type orders a rank's file.
    ItemPlans items(plan);
    for (const bool tensors : {false, true}) {
        for (const auto& l : leaves) {
            if ((a[l.value].kind == Kind::Tensor) != tensors) {
                continue;
            }
            auto written = write::writeCheckpoint(in, items.of(l.value), itemPath, itemProgress, {}, options);
            if (!written) {
                return written.error();
            }
            auto length = append(itemPath, data, (dir / kDataFile).string());
            fs::remove(itemPath, ec);
            if (!length) {
                return length.error();
            }
            meta.add(l, a, offset, *length);
            offset += *length;
            ++(tensors ? result.tensors : result.values);
        }
    }
    data.close();
    if (!data) {
        return write::detail::writeError((dir / kDataFile).string(), "cannot write the data file", errno);
    }
    auto pickled = meta.pickled(fs::absolute(dir, ec).string());
    if (!pickled) {
        return pickled.error();
    }
    {
        std::ofstream md(fs::path(tmp->path()) / ".metadata", std::ios::binary);
        md.write(pickled->data(), static_cast<std::streamsize>(pickled->size()));
        if (!md) {
            return write::detail::writeError((dir / ".metadata").string(), "cannot write the metadata", errno);
        }
    }
    if (auto same = in.checkUnchanged(); !same) {
        return same.error();
    }
    // .metadata last: FileSystemWriter.finish writes it after every data file, and a reader takes
    // a folder without it for an unfinished save.
    result.files = {kDataFile, ".metadata"};
    if (auto moved = detail::moveInto(*tmp, dir, *exists, result.files); !moved) {
        return moved.error();
    }
    if (*exists) {
        fs::remove(tmp->path(), ec);
    }
    tmp->release();
    result.bytes = offset + pickled->size();
    return result;
}

}  // namespace ckpt::sharded
