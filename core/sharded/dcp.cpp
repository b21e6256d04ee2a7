// DCP directories (docs/format.md §12; pytorch/pytorch torch/distributed/checkpoint/metadata.py,
// filesystem.py, format_utils.py, _traverse.py). `.metadata` is read into the unpickler's value
// tree, where every DCP class is an opaque Object whose BUILD state holds its fields; nothing is
// instantiated. Chunks are read through the ordinary torch zip reader on a slice of the mapping.
#include "sharded/dcp.h"

#include "archive/safetensors.h"
#include "archive/zip.h"
#include "archive/zstd.h"
#include "checkpoint/index.h"
#include "checkpoint/loaders.h"
#include "pickle/pickler.h"
#include "pickle/tensor_record.h"
#include "pickle/unpickler.h"
#include "sharded/box_view.h"
#include "sharded/chunks.h"
#include "sharded/set_view.h"
#include "util/budget.h"
#include "util/checked.h"
#include "util/json_text.h"
#include "write/output_file.h"
#include "write/targets.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <regex>
#include <set>
#include <sys/mman.h>
#include <unistd.h>
#include <unordered_map>

namespace ckpt::sharded::dcp {

namespace fs = std::filesystem;
using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

std::uint64_t Item::numel() const
{
    return sharded::detail::numelOf(size);
}

std::uint64_t Location::mostBytes() const
{
    std::uint64_t most = length;
    if (encoding == Encoding::Zstd && !checkedMul(length, archive::kZstdMostInflation, most)) {
        most = UINT64_MAX;
    }
    return most;
}

bool Set::complete() const
{
    return sharded::detail::noErrors(findings);
}

namespace {

constexpr std::string_view kMetadataModule = "torch.distributed.checkpoint.metadata";
constexpr std::string_view kOldPropertiesModule = "torch.distributed._shard.sharded_tensor.metadata";
constexpr std::string_view kPrototypeModule = "torch.distributed._shard.checkpoint.metadata";

Error corrupt(const std::string& what)
{
    return makeError(ErrorCode::Corrupt, ".metadata: " + what);
}

const pickle::ObjectInfo* objectAt(const Arena& a, ValueId id)
{
    return id.valid() && a[id].kind == Kind::Object ? &pickle::objectOf(a, id) : nullptr;
}

bool isClass(const pickle::ObjectInfo* o, std::string_view module, std::string_view name)
{
    return o != nullptr && o->callable.module == module && o->callable.name == name;
}

// A dataclass field: its BUILD state is the instance __dict__.
ValueId field(const Arena& a, const pickle::ObjectInfo& o, std::string_view name)
{
    if (!o.state.valid() || a[o.state].kind != Kind::Dict) {
        return {};
    }
    return pickle::dictGet(a, a[o.state].items, name);
}

bool isNone(const Arena& a, ValueId id)
{
    return !id.valid() || a[id].kind == Kind::None;
}

std::optional<std::vector<std::int64_t>> ints(const Arena& a, ValueId id)
{
    if (!id.valid()) {
        return std::nullopt;
    }
    const auto& v = a[id];
    if (v.kind != Kind::Size && v.kind != Kind::Tuple && v.kind != Kind::List) {
        return std::nullopt;
    }
    std::vector<std::int64_t> out;
    for (const auto i : v.items) {
        if (a[i].kind != Kind::Int) {
            return std::nullopt;
        }
        out.push_back(a[i].i);
    }
    return out;
}

std::optional<std::string> str(const Arena& a, ValueId id)
{
    if (!id.valid() || a[id].kind != Kind::Str) {
        return std::nullopt;
    }
    return a[id].text;
}

// A str's text where it lies in the arena: no copy (a memoized string may be named thousands of
// times).
std::optional<std::string_view> textOf(const Arena& a, ValueId id)
{
    if (!id.valid() || a[id].kind != Kind::Str) {
        return std::nullopt;
    }
    return std::string_view(a[id].text);
}

std::optional<std::int64_t> integer(const Arena& a, ValueId id)
{
    if (!id.valid() || a[id].kind != Kind::Int) {
        return std::nullopt;
    }
    return a[id].i;
}

std::string dims(const std::vector<std::int64_t>& d)
{
    std::string s = "[";
    for (std::size_t i = 0; i < d.size(); ++i) {
        s += (i ? ", " : "") + std::to_string(d[i]);
    }
    return s + "]";
}

// TensorProperties' __getstate__ 5-tuple (dtype, layout, requires_grad, memory-format enum,
// pin_memory), under either module path; a dict state from before the custom __getstate__.
Expected<void> readProperties(const Arena& a, ValueId id, Item& item, bool& old)
{
    const auto* o = objectAt(a, id);
    const bool newPath = isClass(o, kMetadataModule, "TensorProperties");
    if (!newPath && !isClass(o, kOldPropertiesModule, "TensorProperties")) {
        return corrupt("tensor '" + item.fqn + "' has no TensorProperties");
    }
    old = old || !newPath;
    ValueId dtype;
    ValueId grad;
    if (o->state.valid() && a[o->state].kind == Kind::Tuple && a[o->state].items.size() == 5) {
        dtype = a[o->state].items[0];
        grad = a[o->state].items[2];
    } else {
        dtype = field(a, *o, "dtype");
        grad = field(a, *o, "requires_grad");
    }
    if (!dtype.valid() || a[dtype].kind != Kind::DType) {
        return corrupt("tensor '" + item.fqn + "' has no dtype in its TensorProperties");
    }
    item.dtype = static_cast<DType>(a[dtype].i);
    item.requiresGrad = grad.valid() && a[grad].kind == Kind::Bool && a[grad].flag;
    if (elementSize(item.dtype) == 0) {
        return makeError(ErrorCode::Unsupported,
                         ".metadata: tensor '" + item.fqn + "' has a dtype ckptscope cannot size");
    }
    return {};
}

Expected<void> readTensor(const Arena& a, const pickle::ObjectInfo& o, Item& item, bool& old)
{
    if (field(a, o, "storage_key").valid()) {
        return makeError(ErrorCode::Unsupported, "");  // the prototype, named by the caller
    }
    if (auto r = readProperties(a, field(a, o, "properties"), item, old); !r) {
        return r;
    }
    auto size = ints(a, field(a, o, "size"));
    const ValueId chunks = field(a, o, "chunks");
    if (!size || !chunks.valid() || a[chunks].kind != Kind::List) {
        return corrupt("tensor '" + item.fqn + "' has no size or chunk list");
    }
    // Sizes are checked here, once, so nothing after (coverage, the assembly buffer, the record
    // size) can wrap: a [2^32, 2^32] tensor counted as 0 elements passed check, and 2^62 float32
    // elements made a 0-byte buffer that the chunks were then copied into.
    const auto numel = checkedNumel(*size);
    if (!numel || !checkedBytes(*numel, elementSize(item.dtype))) {
        return makeError(ErrorCode::Limit, ".metadata: tensor '" + item.fqn + "' of size " + dims(*size) +
                                               " has a negative size or more bytes than a tensor can hold");
    }
    item.size = *size;
    for (const auto c : a[chunks].items) {
        const auto* co = objectAt(a, c);
        if (!isClass(co, kMetadataModule, "ChunkStorageMetadata")) {
            return corrupt("a chunk of '" + item.fqn + "' is no ChunkStorageMetadata");
        }
        auto offsets = ints(a, field(a, *co, "offsets"));
        auto sizes = ints(a, field(a, *co, "sizes"));
        if (!offsets || !sizes) {
            return corrupt("a chunk of '" + item.fqn + "' has no offsets or sizes");
        }
        std::int64_t end = 0;
        const bool wraps = std::any_of(offsets->begin(), offsets->end(), [](auto o) { return o < 0; }) ||
                           !checkedNumel(*sizes) || [&] {
                               for (std::size_t d = 0; d < std::min(offsets->size(), sizes->size()); ++d) {
                                   if (!checkedAdd((*offsets)[d], (*sizes)[d], end)) {
                                       return true;
                                   }
                               }
                               return false;
                           }();
        if (wraps) {
            return corrupt("a chunk of '" + item.fqn + "' at " + dims(*offsets) + " of size " + dims(*sizes) +
                           " has a negative offset or size, or one that overflows");
        }
        item.chunks.push_back({std::move(*offsets), std::move(*sizes), {}});
    }
    return {};
}

// Each distinct FQN text as a small number, for storage_data's keys and the items' lookups. A
// memoized string is one value however often the pickle names it, so its text is hashed once, and
// the texts of distinct values each lie in the pickle: hashing costs at most the pickle's size. A
// key holding the text itself made 4,000 MetadataIndex entries naming one memoized 1 MiB FQN 4 GB
// of copies (and every map comparison a 1 MiB memcmp).
class FqnIds {
public:
    explicit FqnIds(const Arena& a) : a_(a) {}
    // `id` is a str.
    std::uint32_t of(ValueId id)
    {
        if (const auto it = byValue_.find(id.v); it != byValue_.end()) {
            return it->second;
        }
        const std::string_view text = a_[id].text;
        const auto [it, added] = byText_.try_emplace(text, static_cast<std::uint32_t>(byText_.size()));
        byValue_.emplace(id.v, it->second);
        return it->second;
    }

private:
    const Arena& a_;
    std::unordered_map<std::uint32_t, std::uint32_t> byValue_;
    std::unordered_map<std::string_view, std::uint32_t> byText_;
};

struct IndexKey {
    std::uint32_t fqn = 0;  // FqnIds
    bool hasOffset = false;
    std::vector<std::int64_t> offset;
    friend bool operator<(const IndexKey& x, const IndexKey& y)
    {
        return std::tie(x.fqn, x.hasOffset, x.offset) < std::tie(y.fqn, y.hasOffset, y.offset);
    }
};

// A data file name as FileSystemWriter writes it (`__{rank}_{n}.distcp`, filesystem.py's
// _StoragePrefix and DEFAULT_SUFFIX): a plain name inside the folder, nothing else.
bool isDataFileName(std::string_view p)
{
    static const std::regex re(R"(^__[0-9]{1,9}_[0-9]{1,9}\.distcp$)");
    return std::regex_match(p.begin(), p.end(), re);
}

// `_StorageInfo.transform_descriptors`: absent or empty for a plain torch.save item; ["stream.zstd/1"]
// for the ZStandard stream extension. The reader rebuilds each descriptor through its
// ExtensionRegistry (_extension.py: `name/version`, ZStandard.from_descriptor accepting a version
// whose major part is "1"), which knows no other name: dcp.load fails on any other ("Unknown
// extension"), and so does ckptscope, naming it.
Expected<Encoding> readTransforms(const Arena& a, ValueId id, std::string_view fqn)
{
    if (isNone(a, id)) {
        return Encoding::TorchSave;
    }
    if (a[id].kind != Kind::List && a[id].kind != Kind::Tuple) {
        return corrupt("the transform_descriptors of '" + std::string(fqn) + "' are no list");
    }
    if (a[id].items.empty()) {
        return Encoding::TorchSave;
    }
    std::string names;
    for (const auto t : a[id].items) {
        names += (names.empty() ? "" : ", ") + str(a, t).value_or("?");
    }
    const auto only = a[id].items.size() == 1 ? str(a, a[id].items[0]) : std::nullopt;
    if (only && only->rfind("stream.zstd/", 0) == 0) {
        const std::string version = only->substr(std::string_view("stream.zstd/").size());
        if (version.substr(0, version.find('.')) == "1") {
            return Encoding::Zstd;
        }
    }
    return makeError(ErrorCode::Unsupported,
                     "DCP item '" + std::string(fqn) + "' is stored through the transforms [" + names +
                         "] (torch.distributed.checkpoint._extension): ckptscope reads one stream.zstd/1 (the "
                         "ZStandard extension), the only one PyTorch's ExtensionRegistry knows; load it where the "
                         "extension that wrote it is registered");
}

Expected<std::map<IndexKey, Location>> readStorage(const Arena& a, ValueId storage, FqnIds& fqns,
                                                   std::vector<std::string>& files)
{
    std::map<IndexKey, Location> out;
    if (isNone(a, storage)) {
        return out;
    }
    if (a[storage].kind != Kind::Dict) {
        return corrupt("storage_data is not a dict (a storage layer other than FileSystemWriter?)");
    }
    std::map<std::string, std::uint32_t> fileIndex;
    const auto& items = a[storage].items;
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        const auto* key = objectAt(a, items[i]);
        const auto* info = objectAt(a, items[i + 1]);
        if (!isClass(key, kMetadataModule, "MetadataIndex") ||
            !isClass(info, "torch.distributed.checkpoint.filesystem", "_StorageInfo")) {
            return corrupt("storage_data maps something other than MetadataIndex to _StorageInfo");
        }
        const ValueId fqnId = field(a, *key, "fqn");
        const auto fqn = textOf(a, fqnId);
        const ValueId offsetId = field(a, *key, "offset");
        const auto path = textOf(a, field(a, *info, "relative_path"));
        auto offset = integer(a, field(a, *info, "offset"));
        auto length = integer(a, field(a, *info, "length"));
        if (!fqn || !path || !offset || !length || *offset < 0 || *length < 0) {
            return corrupt("a storage_data entry lacks its fqn, relative_path, offset or length");
        }
        if (!isDataFileName(*path)) {
            return corrupt("item '" + std::string(*fqn) + "' names the data file '" + std::string(*path) +
                           "', not a __R_N.distcp file in the folder, which is all a DCP set reads");
        }
        auto encoding = readTransforms(a, field(a, *info, "transform_descriptors"), *fqn);
        if (!encoding) {
            return encoding.error();
        }
        auto [it, added] = fileIndex.emplace(*path, static_cast<std::uint32_t>(files.size()));
        if (added) {
            files.emplace_back(*path);
        }
        IndexKey k{fqns.of(fqnId), !isNone(a, offsetId), {}};
        if (k.hasOffset) {
            auto off = ints(a, offsetId);
            if (!off) {
                return corrupt("the MetadataIndex of '" + std::string(*fqn) + "' has an offset that is no torch.Size");
            }
            k.offset = std::move(*off);
        }
        out[k] = Location{it->second, static_cast<std::uint64_t>(*offset), static_cast<std::uint64_t>(*length), true,
                          *encoding};
    }
    return out;
}

Expected<std::vector<PathElement>> readPath(const Arena& a, ValueId id, const std::string& fqn)
{
    if (!id.valid() || (a[id].kind != Kind::Tuple && a[id].kind != Kind::List) || a[id].items.empty()) {
        return corrupt("planner_data['" + fqn + "'] is not a non-empty path tuple");
    }
    std::vector<PathElement> out;
    for (const auto e : a[id].items) {
        if (a[e].kind == Kind::Str) {
            out.push_back({false, 0, a[e].text});
        } else if (a[e].kind == Kind::Int && a[e].i >= 0 && a[e].i < (1 << 24)) {
            out.push_back({true, a[e].i, {}});
        } else {
            return corrupt("planner_data['" + fqn + "'] holds a path element that is neither str nor a list index");
        }
    }
    if (out.front().isIndex) {
        return corrupt("planner_data['" + fqn + "'] starts with a list index");
    }
    return out;
}

// The memory one item of .metadata takes once read: a path element or key is a copy of a string
// the pickle may store once and reference many times (a memo), so a small .metadata could name
// thousands of items whose paths are the same megabyte-long string.
std::uint64_t itemBytes(const Item& item)
{
    std::uint64_t n = sizeof(Item) + item.fqn.size() + item.size.size() * sizeof(std::int64_t);
    for (const auto& e : item.path) {
        n += sizeof(PathElement) + e.key.size();
    }
    for (const auto& c : item.chunks) {
        n += sizeof(Chunk) + (c.offsets.size() + c.sizes.size()) * sizeof(std::int64_t);
    }
    return n;
}

std::string prototypeMessage()
{
    return "a torch.distributed._shard.checkpoint directory from the PyTorch 1.12 prototype (storage_key "
           "records, ShardedTensorStorageMetadata): ckptscope does not read it; load it with PyTorch 1.12's "
           "torch.distributed._shard.checkpoint.load_state_dict";
}

}  // namespace

Expected<Metadata> parseMetadata(Bytes data, const std::string& name)
{
    // A Checkpoint of its own, so the pickle goes through the single-file safety scan below.
    auto pickled = std::make_shared<Checkpoint>();
    Arena& a = pickled->arena;
    auto r = pickle::unpickle(data, a);
    if (!r) {
        Error e = r.error();
        e.message = ".metadata is not a readable pickle: " + e.message;
        return e;
    }
    const auto* root = objectAt(a, r->root);
    if (root != nullptr && root->callable.module == kPrototypeModule) {
        return makeError(ErrorCode::Unsupported, prototypeMessage());
    }
    Metadata md;
    if (!isClass(root, kMetadataModule, "Metadata")) {
        // A subclass keeps the base's dataclass fields in its __dict__ beside its own: dcp.load uses
        // only those, so ckptscope reads them too and names the class and what it adds.
        if (root == nullptr || !field(a, *root, "state_dict_metadata").valid() ||
            !field(a, *root, "storage_data").valid()) {
            return corrupt("is not a pickled torch.distributed.checkpoint Metadata");
        }
        md.subclass = root->callable.module + "." + root->callable.name;
        static constexpr std::array<std::string_view, 4> kBaseFields{"state_dict_metadata", "planner_data",
                                                                     "storage_data", "storage_meta"};
        const auto& state = a[root->state].items;
        for (std::size_t i = 0; i + 1 < state.size(); i += 2) {
            const auto key = str(a, state[i]);
            if (key && *key != "version" &&
                std::find(kBaseFields.begin(), kBaseFields.end(), *key) == kBaseFields.end()) {
                md.extraFields.push_back(*key);
            }
        }
    }
    if (auto v = str(a, field(a, *root, "version"))) {
        md.version = *v;
    }
    const ValueId sdm = field(a, *root, "state_dict_metadata");
    if (!sdm.valid() || a[sdm].kind != Kind::Dict) {
        return corrupt("state_dict_metadata is not a dict");
    }
    FqnIds fqns(a);
    auto storage = readStorage(a, field(a, *root, "storage_data"), fqns, md.files);
    if (!storage) {
        return storage.error();
    }
    const ValueId planner = field(a, *root, "planner_data");
    md.hasPlannerData = planner.valid() && a[planner].kind == Kind::Dict;
    // By hash: a scan of planner_data per key is quadratic in a 40k-key model.
    std::unordered_map<std::string_view, ValueId> paths;
    if (md.hasPlannerData) {
        const auto& pd = a[planner].items;
        for (std::size_t i = 0; i + 1 < pd.size(); i += 2) {
            if (a[pd[i]].kind == Kind::Str) {
                paths.try_emplace(a[pd[i]].text, pd[i + 1]);
            }
        }
    }
    const auto& entries = a[sdm].items;
    MemoryBudget budget;
    budget.pickleBytes = data.size();
    md.pickleBytes = data.size();
    std::uint64_t built = 0;
    for (std::size_t i = 0; i + 1 < entries.size(); i += 2) {
        Item item;
        auto fqn = str(a, entries[i]);
        if (!fqn) {
            return corrupt("a state_dict_metadata key is not a str");
        }
        item.fqn = *fqn;
        const auto* o = objectAt(a, entries[i + 1]);
        if (o != nullptr &&
            (o->callable.module == kPrototypeModule || o->callable.name == "ShardedTensorStorageMetadata")) {
            return makeError(ErrorCode::Unsupported, prototypeMessage());
        }
        if (isClass(o, kMetadataModule, "TensorStorageMetadata")) {
            item.isTensor = true;
            if (auto t = readTensor(a, *o, item, md.oldTensorProperties); !t) {
                return t.error().message.empty() ? makeError(ErrorCode::Unsupported, prototypeMessage()) : t.error();
            }
            for (auto& c : item.chunks) {
                if (auto it = storage->find(IndexKey{fqns.of(entries[i]), true, c.offsets}); it != storage->end()) {
                    c.at = it->second;
                }
            }
        } else if (isClass(o, kMetadataModule, "BytesStorageMetadata")) {
            if (field(a, *o, "storage_key").valid()) {
                return makeError(ErrorCode::Unsupported, prototypeMessage());
            }
            if (auto it = storage->find(IndexKey{fqns.of(entries[i]), false, {}}); it != storage->end()) {
                item.bytes = it->second;
            }
        } else {
            return corrupt("'" + item.fqn + "' is neither TensorStorageMetadata nor BytesStorageMetadata");
        }
        if (md.hasPlannerData) {
            if (auto found = paths.find(item.fqn); found != paths.end()) {
                const ValueId p = found->second;
                auto path = readPath(a, p, item.fqn);
                if (!path) {
                    return path.error();
                }
                item.path = std::move(*path);
            }
        }
        if (item.path.empty()) {
            item.path.push_back({false, 0, item.fqn});
        }
        // Half the budget: the unpickled values the items are read from take the other half.
        built += itemBytes(item);
        if (built > budget.limit() / 2) {
            Error e = budget.exceeded();
            e.message = name + "'s items " + e.message;
            return e;
        }
        md.items.push_back(std::move(item));
    }
    // torch.distributed.checkpoint.load unpickles .metadata with pickle.load: a global it names
    // anywhere (storage_meta, an extra field) runs.
    pickled->format = Format::TorchLegacy;
    pickled->path = name;
    pickled->root = r->root;
    pickled->opcodesSeen = r->opcodesSeen;
    ckpt::detail::IndexLimits limits;
    limits.budget.pickleBytes = data.size();
    if (auto indexed = ckpt::detail::buildIndex(*pickled, limits); !indexed) {
        Error e = indexed.error();
        e.message = name + ": " + e.message;
        return e;
    }
    sharded::detail::unsafeCodeFindings(*pickled, name, md.findings);
    return md;
}

namespace {

SetFinding finding(std::string code, std::string title, std::string detail, std::vector<std::string> paths = {})
{
    return {{std::move(code), diagnose::Severity::Error, std::move(title), std::move(detail), std::move(paths)}};
}

std::uint64_t volume(const std::vector<std::int64_t>& sizes)
{
    std::uint64_t v = 1;
    for (const auto s : sizes) {
        v *= static_cast<std::uint64_t>(std::max<std::int64_t>(s, 0));
    }
    return v;
}

std::string listed(const std::vector<std::string>& v)
{
    std::string s;
    for (std::size_t i = 0; i < v.size() && i < 5; ++i) {
        s += (i ? "; " : "") + v[i];
    }
    return v.size() > 5 ? s + "; and " + std::to_string(v.size() - 5) + " more" : s;
}

void checkCoverage(const Metadata& md, std::vector<SetFinding>& out)
{
    detail::Coverage cov;
    for (const auto& t : md.items) {
        if (!t.isTensor) {
            continue;
        }
        std::vector<detail::Box> boxes;
        for (const auto& c : t.chunks) {
            boxes.push_back({c.offsets, c.sizes});
        }
        detail::checkBoxes(t.fqn, t.size, boxes, cov);
    }
    detail::coverageFindings(cov,
                             "torch.distributed.checkpoint refuses such a plan (_validate_global_plan: \"Failed to "
                             "validate global plan\"), and dcp_to_torch_save would leave uninitialised or mixed "
                             "values. The set was written by a broken or mixed-up save: take the checkpoint from a "
                             "complete save.",
                             out);
}

// What is read of each item to tell what it is: a zstd frame's or a zip local header's magic (4
// bytes), a safetensors file's header length and its '{' (9).
constexpr std::uint64_t kMagicBytes = 4;
constexpr std::uint64_t kSniffBytes = 16;
// What is asked for ahead of each BYTE_IO value (a step count, an RNG state: a few KiB each).
constexpr std::uint64_t kValueBytes = std::uint64_t{1} << 20;

// The first `bytes` of every item (at most its length) of every present data file, asked of the
// folder together: nothing for a mapped file; for remote ones, merged range requests made several
// at a time across the files (256 items 4 MiB apart: 256 requests, not one after another).
void prefetchItems(const Set& set, std::uint64_t bytes, bool valuesOnly = false)
{
    if (set.data.local()) {
        return;
    }
    std::map<std::uint32_t, std::vector<source::Range>> ranges;
    auto add = [&](const Location& at) {
        if (at.found && at.file < set.data.size() && set.data.present(at.file)) {
            ranges[at.file].push_back({at.offset, std::min(at.length, bytes)});
        }
    };
    for (const auto& t : set.meta.items) {
        if (!t.isTensor) {
            add(t.bytes);
        } else if (!valuesOnly) {
            for (const auto& c : t.chunks) {
                add(c.at);
            }
        }
    }
    std::vector<source::Folder::Wanted> wanted;
    for (auto& [file, rs] : ranges) {
        if (auto src = set.data.source(file)) {
            wanted.push_back({*src, std::move(rs)});
        }
    }
    (void)set.data.folder()->prefetch(wanted);  // a failure shows when the bytes are read
}

// `layout`: what resolveSafetensors found wrong with a safetensors data file's chunks.
void checkFiles(Set& set, const std::vector<std::string>& layout)
{
    std::vector<std::string> missing;
    for (std::size_t i = 0; i < set.meta.files.size(); ++i) {
        if (!set.data.present(i)) {
            missing.push_back(set.meta.files[i]);
        }
    }
    if (!missing.empty()) {
        std::string names;
        for (const auto& m : missing) {
            names += (names.empty() ? "" : ", ") + m;
        }
        set.findings.push_back(finding(
            "shard-missing", "Data files named by .metadata are missing",
            std::to_string(missing.size()) + " of the " + std::to_string(set.meta.files.size()) +
                " data files .metadata names are missing or unreadable: " + names +
                ". torch.distributed.checkpoint.load and dcp_to_torch_save fail opening them (FileNotFoundError). "
                "Copy every rank's __R_N.distcp file into the folder.",
            missing));
    }
    // What openItem refuses when convert reads an item, found here without reading any: a byte
    // range past the end of its data file (a file cut short, or a crafted offset), or one that does
    // not start a torch.save zip (a data file that is no checkpoint: check said "no findings" where
    // convert failed).
    std::vector<std::string> unreadable;
    auto checkRange = [&](const std::string& what, const Location& at) {
        if (!at.found || at.file >= set.data.size() || !set.data.present(at.file)) {
            return;
        }
        auto src = set.data.source(at.file);
        if (!src) {
            unreadable.push_back(what + ": " + src.error().message);
            return;
        }
        const std::uint64_t size = (*src)->size();
        const std::string& file = set.meta.files[at.file];
        std::uint64_t end = 0;
        if (!checkedAdd(at.offset, at.length, end) || end > size) {
            unreadable.push_back(what + ": bytes " + std::to_string(at.offset) + " + " + std::to_string(at.length) +
                                 " lie past the end of " + file + " (" + std::to_string(size) + " bytes)");
            return;
        }
        auto head = (*src)->read(at.offset, std::min(at.length, kMagicBytes));
        if (!head) {
            unreadable.push_back(what + ": " + head.error().message);
            return;
        }
        const Bytes item = head->bytes;
        if (at.encoding == Encoding::Zstd && !archive::looksLikeZstd(item)) {
            unreadable.push_back(what + ": the bytes at " + std::to_string(at.offset) + " of " + file +
                                 " are no zstd frame, which its transform_descriptors say");
        } else if (at.encoding == Encoding::TorchSave &&
                   (at.length < 4 || std::memcmp(item.data(), "PK\x03\x04", 4) != 0)) {
            unreadable.push_back(what + ": the bytes at " + std::to_string(at.offset) + " of " + file +
                                 " are no torch.save record");
        }
    };
    for (const auto& t : set.meta.items) {
        if (t.isTensor) {
            for (const auto& c : t.chunks) {
                checkRange(t.fqn + " chunk at " + dims(c.offsets), c.at);
            }
        } else {
            checkRange(t.fqn, t.bytes);
        }
    }
    unreadable.insert(unreadable.end(), layout.begin(), layout.end());
    if (!unreadable.empty()) {
        set.findings.push_back(
            finding("dcp-item-unreadable", "Items whose bytes are not in their data file",
                    std::to_string(unreadable.size()) +
                        " item(s) of .metadata point at bytes their data file does not hold: " + listed(unreadable) +
                        ". torch.distributed.checkpoint.load and dcp_to_torch_save fail reading "
                        "them. A data file was cut short or replaced: copy it again from the "
                        "save."));
    }
    std::vector<std::string> unlisted;
    for (const auto& t : set.meta.items) {
        bool listed = t.isTensor
                          ? std::all_of(t.chunks.begin(), t.chunks.end(), [](const auto& c) { return c.at.found; })
                          : t.bytes.found;
        if (!listed) {
            unlisted.push_back(t.fqn);
        }
    }
    if (!unlisted.empty()) {
        std::string names;
        for (std::size_t i = 0; i < unlisted.size() && i < 5; ++i) {
            names += (i ? ", " : "") + unlisted[i];
        }
        set.findings.push_back(finding("dcp-storage-missing", "Items without a storage_data entry",
                                       std::to_string(unlisted.size()) +
                                           " item(s) of .metadata have no storage_data entry saying where their bytes "
                                           "are: " +
                                           names +
                                           ". The FileSystemReader fails with a KeyError on MetadataIndex. The "
                                           ".metadata comes from another save than the data files: take both from "
                                           "one save."));
    }
}

}  // namespace

namespace detail {

bool inBounds(const std::vector<std::int64_t>& size, const Box& c)
{
    if (c.offsets.size() != size.size() || c.sizes.size() != size.size()) {
        return false;
    }
    for (std::size_t d = 0; d < size.size(); ++d) {
        if (c.offsets[d] < 0 || c.sizes[d] < 0 || c.offsets[d] > size[d] || c.sizes[d] > size[d] - c.offsets[d]) {
            return false;
        }
    }
    return true;
}

// _check_box_overlap: boxes overlap unless they are apart along some dimension.
bool overlap(const Box& x, const Box& y)
{
    for (std::size_t d = 0; d < x.offsets.size(); ++d) {
        if (x.offsets[d] >= y.offsets[d] + y.sizes[d] || y.offsets[d] >= x.offsets[d] + x.sizes[d]) {
            return false;
        }
    }
    return true;
}

// Pairs are found by a sweep along dimension 0: boxes sorted by their first offset meet only
// while the next starts before this one ends.
void checkBoxes(const std::string& name, const std::vector<std::int64_t>& size, const std::vector<Box>& boxes,
                Coverage& out)
{
    // With the global element count known to fit, an in-bounds box's volume does too, and so does
    // the sum of boxes that do not overlap: no count below can wrap into "no hole".
    if (!checkedNumel(size)) {
        out.outOfBounds.push_back(name + ": a tensor of " + dims(size) + " has a negative size or overflows");
        return;
    }
    for (const auto& c : boxes) {
        if (!inBounds(size, c)) {
            out.outOfBounds.push_back(name + " chunk at " + dims(c.offsets) + " of size " + dims(c.sizes) +
                                      " in a tensor of " + dims(size));
            return;
        }
    }
    std::vector<std::size_t> order(boxes.size());
    std::iota(order.begin(), order.end(), 0);
    const bool scalar = size.empty();
    // A sweep along the dimension the boxes are split on: the one with the most distinct offsets.
    // Along dim 0 alone, 120k chunks of a tensor split on dim 1 (all at row 0) compared every pair.
    std::size_t d = 0;
    if (!scalar) {
        std::size_t most = 0;
        std::vector<std::int64_t> starts(boxes.size());
        for (std::size_t k = 0; k < size.size(); ++k) {
            for (std::size_t b = 0; b < boxes.size(); ++b) {
                starts[b] = boxes[b].offsets[k];
            }
            std::sort(starts.begin(), starts.end());
            const auto distinct = static_cast<std::size_t>(std::unique(starts.begin(), starts.end()) - starts.begin());
            if (distinct > most) {
                most = distinct;
                d = k;
            }
        }
        std::sort(order.begin(), order.end(),
                  [&](auto x, auto y) { return boxes[x].offsets[d] < boxes[y].offsets[d]; });
    }
    for (std::size_t i = 0; i < order.size(); ++i) {
        const auto& x = boxes[order[i]];
        for (std::size_t j = i + 1; j < order.size(); ++j) {
            const auto& y = boxes[order[j]];
            if (!scalar && y.offsets[d] >= x.offsets[d] + x.sizes[d]) {
                break;
            }
            if (volume(x.sizes) > 0 && volume(y.sizes) > 0 && overlap(x, y)) {
                out.overlaps.push_back(name + " chunks at " + dims(x.offsets) + " and " + dims(y.offsets));
                return;
            }
        }
    }
    std::uint64_t covered = 0;
    for (const auto& c : boxes) {
        if (!checkedAdd(covered, volume(c.sizes), covered)) {
            covered = UINT64_MAX;
        }
    }
    if (covered != volume(size)) {
        out.holes.push_back(name + " (" + std::to_string(covered) + " of " + std::to_string(volume(size)) +
                            " elements covered)");
    }
}

void coverageFindings(const Coverage& c, const std::string& consequence, std::vector<SetFinding>& out)
{
    if (!c.outOfBounds.empty()) {
        out.push_back(finding("chunk-out-of-bounds", "Chunks reach outside their tensor",
                              std::to_string(c.outOfBounds.size()) + " chunk(s) lie outside the global tensor: " +
                                  listed(c.outOfBounds) + ". " + consequence));
    }
    if (!c.overlaps.empty()) {
        out.push_back(finding("chunk-overlap", "Chunks of one tensor overlap",
                              std::to_string(c.overlaps.size()) +
                                  " tensor(s) have overlapping chunks: " + listed(c.overlaps) + ". " + consequence));
    }
    if (!c.holes.empty()) {
        out.push_back(finding("chunk-hole", "Chunks leave part of a tensor uncovered",
                              std::to_string(c.holes.size()) + " tensor(s) are not covered by their chunks: " +
                                  listed(c.holes) + ". " + consequence));
    }
}

void releasePages(Bytes mapped)
{
    static const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<std::uintptr_t>(mapped.data());
    const std::uintptr_t first = (begin + page - 1) / page * page;
    const std::uintptr_t last = (begin + mapped.size()) / page * page;
    if (last > first) {
        // Advisory: a failure only leaves the pages resident.
        // NOLINTNEXTLINE(performance-no-int-to-ptr)
        (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
    }
}

}  // namespace detail

namespace {

// Ranks that wrote data files (`__R_N.distcp`).
std::set<int> dataRanks(const std::vector<std::string>& names)
{
    std::set<int> out;
    for (const auto& n : names) {
        const auto us = n.find('_', 2);
        if (n.rfind("__", 0) == 0 && us != std::string::npos && n.size() > 7 &&
            n.compare(n.size() - 7, 7, ".distcp") == 0) {
            const std::string digits = n.substr(2, us - 2);
            if (!digits.empty() && digits.size() <= 6 && std::all_of(digits.begin(), digits.end(), ::isdigit)) {
                out.insert(std::stoi(digits));
            }
        }
    }
    return out;
}

// Each rank's metadata describes only the chunks that rank wrote, under the global sizes
// (state_dict_saver.py: global_step([local_plan]) on one plan). Their union is the set's plan;
// a replicated tensor is listed by every rank with the same box and kept once.
// The lookups (items by name, files by name, each tensor's known boxes) live as long as the merge:
// rebuilt for every rank's file, they made merging R ranks of one sharded tensor O(R^2) (5,000 ranks
// each holding one chunk of every tensor rebuilt 5,000-chunk sets 5,000 times).
class RankMerger {
public:
    explicit RankMerger(Metadata& into) : into_(into)
    {
        for (std::size_t i = 0; i < into_.items.size(); ++i) {
            at_.emplace(into_.items[i].fqn, i);
        }
        for (std::uint32_t i = 0; i < into_.files.size(); ++i) {
            fileAt_.emplace(into_.files[i], i);
        }
    }

    Expected<void> merge(Metadata&& part, const std::string& name)
    {
        const auto fileOf = addFiles(part.files);
        auto remap = [&](Location& l) {
            if (l.found && l.file < fileOf.size()) {
                l.file = fileOf[l.file];
            }
        };
        into_.hasPlannerData = into_.hasPlannerData || part.hasPlannerData;
        into_.pickleBytes += part.pickleBytes;
        std::move(part.findings.begin(), part.findings.end(), std::back_inserter(into_.findings));
        for (auto& item : part.items) {
            for (auto& c : item.chunks) {
                remap(c.at);
            }
            remap(item.bytes);
            auto found = at_.find(item.fqn);
            if (found == at_.end()) {
                at_.emplace(item.fqn, into_.items.size());
                into_.items.push_back(std::move(item));
                continue;
            }
            if (auto r = mergeItem(found->second, std::move(item), name); !r) {
                return r;
            }
        }
        return {};
    }

private:
    using BoxKey = std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>;

    // Indices in into_.files of `files`, adding the new ones.
    std::vector<std::uint32_t> addFiles(const std::vector<std::string>& files)
    {
        std::vector<std::uint32_t> fileOf;
        for (const auto& f : files) {
            auto [it, added] = fileAt_.try_emplace(f, static_cast<std::uint32_t>(into_.files.size()));
            fileOf.push_back(it->second);
            if (added) {
                into_.files.push_back(f);
            }
        }
        return fileOf;
    }

    // Another rank's listing of into_.items[index]: its chunks not listed yet are added.
    Expected<void> mergeItem(std::size_t index, Item&& item, const std::string& name)
    {
        Item& have = into_.items[index];
        if (have.isTensor != item.isTensor || have.dtype != item.dtype || have.size != item.size) {
            return makeError(ErrorCode::Corrupt, name + " and the other ranks' metadata disagree on '" + item.fqn +
                                                     "' (kind, dtype or global size): they come from different saves");
        }
        auto [knownIt, first] = known_.try_emplace(index);
        auto& known = knownIt->second;
        if (first) {
            for (const auto& h : have.chunks) {
                known.emplace(h.offsets, h.sizes);
            }
        }
        for (auto& c : item.chunks) {
            if (known.emplace(c.offsets, c.sizes).second) {
                have.chunks.push_back(std::move(c));
            }
        }
        if (!have.bytes.found && item.bytes.found) {
            have.bytes = item.bytes;
        }
        return {};
    }

    Metadata& into_;
    std::unordered_map<std::string, std::size_t> at_;
    std::unordered_map<std::string, std::uint32_t> fileAt_;
    std::unordered_map<std::size_t, std::set<BoxKey>> known_;  // by item, once a second rank lists it
};

struct RankMetadata {
    Metadata meta;
    std::vector<int> ranks;    // whose __R.metadata was read
    std::vector<int> missing;  // wrote data files but left no __R.metadata
};

// A small member read whole (a metadata pickle: the unpickler reads one span), at most `maxBytes`.
struct WholeMember {
    source::SourcePtr src;
    source::Held bytes;
};
Expected<WholeMember> readWhole(const source::Folder& dir, const std::string& name, std::uint64_t maxBytes)
{
    auto src = dir.open(name, "the folder");
    if (!src) {
        return src.error();
    }
    if ((*src)->size() > maxBytes) {
        Error e = makeError(ErrorCode::Limit, "is " + humanBytes((*src)->size()) + ", more than the " +
                                                  humanBytes(maxBytes) + " such a file is read up to");
        e.path = dir.pathOf(name);
        return e;
    }
    auto held = (*src)->read(0, (*src)->size());
    if (!held) {
        return held.error();
    }
    return WholeMember{*src, std::move(*held)};
}

// What a metadata pickle is read up to: MemoryBudget's pickles are held to far less once parsed.
constexpr std::uint64_t kMetadataLimit = std::uint64_t{16} << 30;

// Without a listing (plain HTTP) no __R.metadata can be found: nothing is read.
Expected<RankMetadata> readRankMetadata(const source::Folder& dir)
{
    std::vector<std::pair<int, std::string>> files;
    auto listed = dir.list();
    if (!listed) {
        return listed.error();
    }
    const std::vector<std::string> names = listed->value_or(std::vector<std::string>());
    for (const auto& n : names) {
        if (auto r = rankOfMetadata(n)) {
            files.emplace_back(*r, n);
        }
    }
    std::sort(files.begin(), files.end());
    RankMetadata out;
    std::optional<RankMerger> merger;  // over out.meta, once rank 0's (the first) is read
    for (auto& [rank, name] : files) {
        auto whole = readWhole(dir, name, kMetadataLimit);
        if (!whole) {
            return whole.error();
        }
        auto md = parseMetadata(whole->bytes.bytes, name);
        if (!md) {
            Error e = md.error();
            e.message = name + ": " + e.message;
            return e;
        }
        if (out.ranks.empty()) {
            out.meta = std::move(*md);
            merger.emplace(out.meta);
        } else if (auto merged = merger->merge(std::move(*md), name); !merged) {
            return merged.error();
        }
        out.ranks.push_back(rank);
    }
    for (const int r : dataRanks(names)) {
        if (!std::binary_search(out.ranks.begin(), out.ranks.end(), r)) {
            out.missing.push_back(r);
        }
    }
    return out;
}

std::string rankList(const std::vector<int>& ranks)
{
    std::string s;
    for (std::size_t i = 0; i < ranks.size() && i < 8; ++i) {
        s += (i ? ", " : "") + std::string("__") + std::to_string(ranks[i]) + ".metadata";
    }
    return ranks.size() > 8 ? s + " and " + std::to_string(ranks.size() - 8) + " more" : s;
}

void rankLocalFindings(const RankMetadata& rm, std::vector<SetFinding>& out)
{
    out.push_back(
        {{"dcp-rank-local-metadata",
          diagnose::Severity::Warning,
          "Per-rank metadata: dcp_to_torch_save reads rank 0's only",
          "The set was saved with use_collectives=False: each rank wrote its own __R.metadata (" + rankList(rm.ranks) +
              ") naming only its own chunks, and there is no .metadata. "
              "torch.distributed.checkpoint.load falls back to the loading rank's file, so "
              "dcp_to_torch_save and any load with no_dist=True or another world size read __0.metadata "
              "alone and return the other ranks' pieces as uninitialised memory, without an error. "
              "ckptscope merges every rank's metadata: consolidate with `ckptscope convert DIR -o model.pt "
              "--single-card`, or load with the world size that saved it.",
          {}}});
    if (!rm.missing.empty()) {
        std::vector<std::string> names;
        for (const int r : rm.missing) {
            names.push_back("__" + std::to_string(r) + ".metadata");
        }
        out.push_back({{"shard-missing", diagnose::Severity::Error, "A rank's metadata file is missing",
                        std::to_string(names.size()) + " rank(s) wrote __R_N.distcp data files but left no metadata (" +
                            listed(names) +
                            " missing), so nothing says where their chunks go: torch.distributed.checkpoint.load on "
                            "such a rank fails (\"metadata is None\"), and their pieces show as holes. Copy every "
                            "__R.metadata file of the save into the folder.",
                        names}});
    }
}

// Every pickle the set is read from through the safety scan: the metadata files' (parseMetadata)
// and each BYTE_IO value's, which dcp.load hands to torch.load. Unreadable values are checkFiles'.
void pickleFindings(Set& set)
{
    std::move(set.meta.findings.begin(), set.meta.findings.end(), std::back_inserter(set.findings));
    set.meta.findings.clear();
    for (const auto& t : set.meta.items) {
        if (t.isTensor || !t.bytes.found) {
            continue;
        }
        if (auto c = openItem(set, t.bytes, "value '" + t.fqn + "'")) {
            const std::size_t before = set.findings.size();
            sharded::detail::unsafeCodeFindings(**c, set.meta.files[t.bytes.file] + " (value '" + t.fqn + "')",
                                                set.findings);
            if (set.findings.size() > before) {
                set.valuesCallingCode.push_back(t.fqn);
            }
            for (std::size_t i = before; i < set.findings.size(); ++i) {
                set.findings[i].inView = true;
            }
        }
    }
}

// A small member's text, at most `maxBytes` of it.
Expected<std::string> readText(const source::Folder& dir, const std::string& name, std::uint64_t maxBytes)
{
    auto whole = readWhole(dir, name, maxBytes);
    if (!whole) {
        return whole.error();
    }
    const Bytes b = whole->bytes.bytes;
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Megatron-LM's torch_dist save (megatron/core/dist_checkpointing): a DCP folder whose .metadata may
// be MCoreMetadata, beside common.pt (torch.save of what every rank shares: args, iteration, RNG
// and optimizer scalars) and metadata.json (the backend and its version). The tensors are the
// DCP's; the two files are named, with the backend metadata.json records, so a user sees where the
// rest of the run's state is. Nothing in them is read but metadata.json's two backend fields.
void megatronFindings(Set& set)
{
    const source::Folder& dir = *set.data.folder();
    auto has = [&](const std::string& name) {
        auto there = dir.exists(name);
        return there && *there;  // a probe that fails reads as absent: the finding only names files
    };
    const bool common = has("common.pt");
    const bool metaJson = has("metadata.json");
    if (!common && !metaJson && set.meta.subclass.empty()) {
        return;
    }
    SetFinding f;
    f.code = "megatron-torch-dist";
    f.severity = diagnose::Severity::Info;
    f.title = "A Megatron-LM torch_dist checkpoint: the tensors are its DCP files";
    std::string backend;
    if (metaJson) {
        if (auto text = readText(dir, "metadata.json", 1U << 20)) {
            const auto j = nlohmann::json::parse(*text, nullptr, false);
            if (j.is_object() && j.contains("sharded_backend") && j["sharded_backend"].is_string()) {
                backend = j["sharded_backend"].get<std::string>();
                if (j.contains("sharded_backend_version") && j["sharded_backend_version"].is_number_integer()) {
                    backend += " version " + std::to_string(j["sharded_backend_version"].get<long long>());
                }
            }
        }
    }
    f.detail = ".metadata is " + (set.meta.subclass.empty() ? std::string("DCP's Metadata") : set.meta.subclass);
    if (!set.meta.extraFields.empty()) {
        std::string extra;
        for (const auto& x : set.meta.extraFields) {
            extra += (extra.empty() ? "" : ", ") + x;
        }
        f.detail += " (it adds " + extra + ", which dcp.load does not use)";
    }
    f.detail += ".";
    if (common) {
        f.detail += " common.pt holds the state every rank shares (args, iteration, RNG): a torch.save file "
                    "of its own, inspect it by name.";
        f.paths.push_back(dir.pathOf("common.pt"));
    }
    if (metaJson) {
        f.detail += " metadata.json names the backend" + (backend.empty() ? std::string() : " (" + backend + ")") + ".";
        f.paths.push_back(dir.pathOf("metadata.json"));
    }
    set.findings.push_back(std::move(f));
}

// FileSystemWriter(serialization_format=SAFETENSORS) (filesystem.py `_write_files_from_queue`): a
// rank's data file holds its BYTE_IO items as torch.save records first, then one safetensors file
// (`safetensors.torch.save`) of its tensor chunks under their fqns, whose `__metadata__` holds
// DCP_SHARDING_INFO (json {fqn: {"saved_offsets": the chunk's offsets}}), DCP_VERSION "1.0" and
// format "pt" (_hf_utils.py). `_write_item` writes nothing for such a chunk, so .metadata gives each
// the offset where that safetensors file starts and its byte count as length. Each chunk found
// there is pointed at its own bytes in the safetensors data buffer (Encoding::Raw), checked against
// .metadata: dtype, shape, saved offsets and size; what does not match goes to `problems`.
Expected<void> resolveSafetensors(Set& set, std::vector<std::string>& problems)
{
    std::map<std::pair<std::uint32_t, std::uint64_t>, std::vector<std::pair<const Item*, Chunk*>>> byStart;
    std::map<std::uint32_t, std::vector<std::pair<const Item*, Chunk*>>> zstdChunks;
    for (auto& t : set.meta.items) {
        for (auto& c : t.chunks) {
            if (!c.at.found || c.at.file >= set.data.size() || !set.data.present(c.at.file)) {
                continue;
            }
            if (c.at.encoding == Encoding::TorchSave) {
                byStart[{c.at.file, c.at.offset}].emplace_back(&t, &c);
            } else if (c.at.encoding == Encoding::Zstd) {
                zstdChunks[c.at.file].emplace_back(&t, &c);
            }
        }
    }
    // With the ZStandard extension as well, `_write_item` wraps the nothing it writes for each chunk
    // in a zstd frame of its own, an empty one (its header records 0 bytes), and the safetensors file
    // follows the last of them: its chunks are read from there as without the extension.
    for (auto& [file, chunks] : zstdChunks) {
        auto src = set.data.source(file);
        if (!src) {
            return src.error();
        }
        const std::uint64_t size = (*src)->size();
        std::uint64_t end = 0;
        bool empty = true;
        for (const auto& tc : chunks) {
            const Chunk& c = *tc.second;
            // An empty frame is its header, one empty block and a checksum: far less than this.
            constexpr std::uint64_t kEmptyFrameBytes = 256;
            auto head = c.at.offset < size ? (*src)->read(c.at.offset, std::min(size - c.at.offset, kEmptyFrameBytes))
                                           : Expected<source::Held>(source::Held{});
            const auto frame = head && !head->bytes.empty() ? archive::zstdFrameInfo(head->bytes) : std::nullopt;
            end = frame ? std::max(end, c.at.offset + frame->stored) : end;
            if (!frame || frame->content != std::uint64_t{0}) {
                empty = false;
                break;
            }
        }
        if (empty && end < size) {
            auto header = ckpt::detail::safetensorsHeaderAt(**src, end, kSniffBytes);
            if (!header) {
                return header.error();
            }
            if (*header) {
                auto& into = byStart[{file, end}];
                into.insert(into.end(), chunks.begin(), chunks.end());
            }
        }
    }
    for (auto& entry : byStart) {
        // Named, not a structured binding: clang 14 (clang-tidy's) refuses a lambda capturing one.
        const auto& start = entry.first;
        auto& chunks = entry.second;
        auto src = set.data.source(start.first);
        if (!src) {
            return src.error();
        }
        const std::uint64_t size = (*src)->size();
        auto header = start.second < size ? ckpt::detail::safetensorsHeaderAt(**src, start.second, kSniffBytes)
                                          : Expected<std::optional<source::Held>>(std::nullopt);
        if (!header) {
            return header.error();
        }
        if (!*header) {
            continue;  // a torch.save record, or bytes that are none: checkFiles says which
        }
        const std::string& file = set.meta.files[start.first];
        const std::string where = file + " @ " + std::to_string(start.second);
        auto refuse = [&](const std::string& why) {
            for (auto& [t, c] : chunks) {
                c->at.encoding = Encoding::Raw;  // reported here, not again as "no torch.save record"
            }
            problems.push_back(where + ": " + why);
        };
        auto st = archive::parseSafetensors((**header).bytes, size - start.second);
        if (!st) {
            refuse("a safetensors file that cannot be read (" + st.error().message + ")");
            continue;
        }
        const auto info = std::find_if(st->metadata.begin(), st->metadata.end(),
                                       [](const auto& kv) { return kv.first == "DCP_SHARDING_INFO"; });
        auto sharding = info == st->metadata.end() ? Expected<nlohmann::json>(makeError(ErrorCode::Corrupt, "absent"))
                                                   : parseJsonText<nlohmann::json>(info->second, "DCP_SHARDING_INFO");
        if (!sharding || !sharding->is_object()) {
            refuse("a safetensors file without a readable DCP_SHARDING_INFO in its __metadata__, so nothing says "
                   "which box of each tensor it holds");
            continue;
        }
        if (std::find(set.safetensorsFiles.begin(), set.safetensorsFiles.end(), file) == set.safetensorsFiles.end()) {
            set.safetensorsFiles.push_back(file);
        }
        std::unordered_map<std::string_view, const archive::SafetensorsEntry*> byName;
        for (const auto& e : st->tensors) {
            byName.emplace(e.name, &e);
        }
        for (auto& [t, c] : chunks) {
            const std::string what = t->fqn + " chunk at " + dims(c->offsets);
            const auto found = byName.find(t->fqn);
            const auto saved = sharding->find(t->fqn);
            std::optional<std::vector<std::int64_t>> offsets;
            if (saved != sharding->end() && saved->is_object() && saved->contains("saved_offsets") &&
                (*saved)["saved_offsets"].is_array()) {
                offsets.emplace();
                for (const auto& o : (*saved)["saved_offsets"]) {
                    offsets->push_back(o.is_number_integer() ? o.get<std::int64_t>() : -1);
                }
            }
            c->at.encoding = Encoding::Raw;
            if (found == byName.end()) {
                problems.push_back(what + ": " + where + " holds no tensor of that name");
                continue;
            }
            const archive::SafetensorsEntry& e = *found->second;
            const std::uint64_t nbytes = sharded::detail::numelOf(c->sizes) * elementSize(t->dtype);
            if (e.dtype != t->dtype || e.shape != c->sizes || e.end - e.begin != nbytes) {
                problems.push_back(what + ": " + where + " holds it as " + e.dtypeCode + " " + dims(e.shape) +
                                   " where .metadata says " + std::string(dtypeName(t->dtype)) + " " + dims(c->sizes));
                continue;
            }
            if (offsets != c->offsets) {
                problems.push_back(what + ": DCP_SHARDING_INFO of " + where + " places it at " +
                                   (offsets ? dims(*offsets) : std::string("no saved_offsets")));
                continue;
            }
            c->at.offset = start.second + st->dataStart + e.begin;
            c->at.length = nbytes;
        }
    }
    return {};
}

// TransformerEngine modules keep their FP8 scaling state as `_extra_state` (nn.Module's extra-state
// hook); Megatron-LM saves it per layer as a ShardedObject, `torch.save([state])` written as a
// BYTE_IO item under `..._extra_state/shard_<offset>_<shape>` (MCoreSavePlanner.transform_object
// writes the bytes as they are), where `state` is None, an io.BytesIO or a uint8 tensor by TE
// version. dcp_to_torch_save writes each as torch.load gives it; so does convert, unless
// --drop-extra-state leaves them out: the finding says which, and carries that option as its fix.
void extraStateFindings(Set& set)
{
    for (const auto& t : set.meta.items) {
        if (!t.isTensor &&
            (transform::isExtraStateKey(t.fqn) || (!t.path.empty() && transform::isExtraStateKey(t.path.back().key)))) {
            set.extraState.push_back(t.fqn);
        }
    }
    if (set.extraState.empty()) {
        return;
    }
    SetFinding f;
    f.code = "extra-state";
    f.severity = diagnose::Severity::Info;
    f.title = "Module _extra_state values (TransformerEngine FP8 state): convert keeps them";
    f.detail = std::to_string(set.extraState.size()) +
               " value(s) hold a module's _extra_state, the FP8 scaling state TransformerEngine layers keep "
               "(Megatron-LM saves it per layer as a ShardedObject, torch.save([state])): " +
               listed(set.extraState) +
               ". convert writes them as dcp_to_torch_save does, a uint8 tensor inside one as a tensor; a "
               "model with TransformerEngine layers loads them with load_state_dict, any other needs "
               "strict=False. To leave them out, convert with --drop-extra-state (the window: Drop "
               "_extra_state under Export).";
    f.paths = set.extraState;
    transform::Options fix;
    fix.dropExtraState = true;
    f.fix = fix;
    set.findings.push_back(std::move(f));
}

// PyTorch's own FileSystemReader (dcp.load, dcp_to_torch_save; filesystem.py read_data) reads every
// tensor item as torch.load of the byte range .metadata gives, which for this layout is the start
// of the safetensors file: PyTorch 2.14 fails there ("Weights only load failed ... Unsupported
// operand 112", the header length's first byte), and HuggingFaceStorageReader reads only files named
// *.safetensors. Said as a warning: the set is whole, and ckptscope reads and converts it.
void safetensorsFindings(Set& set)
{
    if (set.safetensorsFiles.empty()) {
        return;
    }
    set.findings.push_back(
        {{"dcp-safetensors-format", diagnose::Severity::Warning,
          "Safetensors data files: PyTorch's own DCP reader cannot load this set",
          std::to_string(set.safetensorsFiles.size()) + " data file(s) (" + listed(set.safetensorsFiles) +
              ") were written with FileSystemWriter(serialization_format=SAFETENSORS): each ends in a safetensors "
              "file of its rank's tensor chunks. torch.distributed.checkpoint.load and dcp_to_torch_save read each "
              "tensor with torch.load at the byte range .metadata gives, which is that safetensors header, and fail "
              "(PyTorch 2.14: \"Weights only load failed ... Unsupported operand 112\"); "
              "HuggingFaceStorageReader reads only files named *.safetensors. ckptscope reads the chunks from the "
              "safetensors files: `ckptscope convert DIR -o model.pt` writes the state dict as one file torch.load "
              "reads.",
          set.safetensorsFiles, std::nullopt}});
}

template <typename Fail> Expected<Set> finishOpen(Set set, source::FolderPtr folder, const Fail& fail)
{
    folder->willOpen(set.meta.files);  // a remote folder's data files: their first requests together
    set.data = MemberFiles(std::move(folder));
    for (const auto& f : set.meta.files) {
        if (auto added = set.data.add(f, ".metadata's storage_data"); !added) {
            return fail(added.error());
        }
    }
    // The first bytes of every item, asked for at once: over HTTP close ones share a request.
    prefetchItems(set, kSniffBytes);
    std::vector<std::string> layout;
    if (auto r = resolveSafetensors(set, layout); !r) {
        return fail(r.error());
    }
    for (const auto& t : set.meta.items) {
        for (const auto& c : t.chunks) {
            set.zstdItems += c.at.encoding == Encoding::Zstd ? 1 : 0;
        }
        set.zstdItems += !t.isTensor && t.bytes.encoding == Encoding::Zstd ? 1 : 0;
    }
    checkFiles(set, layout);
    checkCoverage(set.meta, set.findings);
    // The values' pickles are read whole (pickleFindings): close ones in one request.
    prefetchItems(set, kValueBytes, true);
    pickleFindings(set);
    megatronFindings(set);
    extraStateFindings(set);
    safetensorsFindings(set);
    return set;
}

}  // namespace

std::optional<int> rankOfMetadata(const std::string& name)
{
    constexpr std::string_view suffix = ".metadata";
    if (name.size() <= 2 + suffix.size() || name.rfind("__", 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        return std::nullopt;
    }
    const std::string digits = name.substr(2, name.size() - 2 - suffix.size());
    if (digits.empty() || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) {
        return std::nullopt;
    }
    return std::stoi(digits);
}

Expected<Set> open(const SetLocation& loc)
{
    return open(std::make_shared<const source::LocalFolder>(loc.dir), loc);
}

Expected<Set> open(const source::FolderPtr& folder, const SetLocation& loc)
{
    auto fail = [&](Error e) {
        if (e.message.rfind(loc.what, 0) != 0) {
            e.message = loc.what + ": " + e.message;
        }
        e.path = loc.index;
        return e;
    };
    auto whole = readWhole(*folder, ".metadata", kMetadataLimit);
    auto there = whole || whole.error().code != ErrorCode::Io ? Expected<bool>(true) : folder->exists(".metadata");
    if (there && !*there) {
        auto rm = readRankMetadata(*folder);
        if (!rm) {
            return fail(rm.error());
        }
        if (!rm->ranks.empty()) {
            Set set;
            set.loc = loc;
            set.meta = std::move(rm->meta);
            rankLocalFindings(*rm, set.findings);
            return finishOpen(std::move(set), folder, fail);
        }
    }
    if (!whole && whole.error().code == ErrorCode::Corrupt) {
        return fail(whole.error());  // the member rule: .metadata leads outside the folder
    }
    if (!whole) {
        Error e = whole.error();
        e.message = "no readable .metadata (" + e.message +
                    "); the save did not finish (FileSystemWriter writes "
                    "it last), or only some ranks' files were copied";
        return fail(e);
    }
    auto md = parseMetadata(whole->bytes.bytes);
    if (auto same = whole->src->checkUnchanged(); !same) {
        return fail(same.error());
    }
    if (!md) {
        return fail(md.error());
    }
    Set set;
    set.loc = loc;
    set.meta = std::move(*md);
    return finishOpen(std::move(set), folder, fail);
}

namespace {

// An item's bytes, checked to lie inside its data file: a source of its own over that range of
// the member's (SliceSource), whose span is the mapping's where the member is mapped.
struct ItemBytes {
    source::SourcePtr file;  // the member
    source::SourcePtr item;
    std::string name;  // "__0_0.distcp @ 1234", for messages and the item's path
};

Expected<ItemBytes> itemBytes(const Set& set, const Location& at, const std::string& what)
{
    if (!at.found || at.file >= set.data.size() || !set.data.present(at.file)) {
        return makeError(ErrorCode::Corrupt, what + ": its data file is missing");
    }
    auto src = set.data.source(at.file);
    if (!src) {
        return src.error();
    }
    const std::uint64_t size = (*src)->size();
    if (at.offset > size || at.length > size - at.offset) {
        Error e = makeError(ErrorCode::Truncated, what + ": bytes " + std::to_string(at.offset) + ".." +
                                                      std::to_string(at.offset + at.length) + " lie past the end of " +
                                                      set.meta.files[at.file] + " (" + std::to_string(size) +
                                                      " bytes): the file was cut short");
        e.path = set.data.folder()->pathOf(set.meta.files[at.file]);
        return e;
    }
    return ItemBytes{*src, std::make_shared<const source::SliceSource>(*src, at.offset, at.length),
                     set.meta.files[at.file] + " @ " + std::to_string(at.offset)};
}

// An item read as the torch.save zip it holds: over the mapping, which the Checkpoint keeps; by
// range from a remote member (readSource: its directory and pickle, storages when read); or over
// its zstd frame inflated (at most `zstdLimit` bytes) into memory the Checkpoint owns.
Expected<CheckpointPtr> readItem(const Set& set, const Location& at, const std::string& what, std::uint64_t zstdLimit)
{
    auto bytes = itemBytes(set, at, what);
    if (!bytes) {
        return bytes.error();
    }
    auto named = [&](Error e) {
        e.message = what + " (" + bytes->name + "): " + e.message;
        e.path = set.data.folder()->pathOf(set.meta.files[at.file]);
        return e;
    };
    const auto span = bytes->item->span();
    if (!span && at.encoding != Encoding::Zstd) {
        auto c = readSource(bytes->item, bytes->name);
        if (!c) {
            Error e = c.error();
            e.message = what + " (" + bytes->name + "): " + e.message;
            return e;
        }
        return c;
    }
    source::Held whole;  // a remote zstd item's frame, fetched
    if (!span) {
        auto got = bytes->item->read(0, at.length);
        if (!got) {
            return named(got.error());
        }
        whole = std::move(*got);
    }
    const Bytes item = span ? *span : whole.bytes;
    // A mapping's SIGBUS guard; fetched bytes were checked against the first reply's ETag as they came.
    auto unchanged = [&]() { return span ? bytes->file->checkUnchanged() : Expected<void>(); };
    std::shared_ptr<const std::vector<std::byte>> inflated;
    Bytes zip = item;
    if (at.encoding == Encoding::Zstd) {
        auto out = archive::unzstdFrame(item, zstdLimit);
        if (auto same = unchanged(); !same) {
            return same.error();
        }
        if (!out) {
            return named(out.error());
        }
        inflated = std::make_shared<const std::vector<std::byte>>(std::move(*out));
        zip = *inflated;
    }
    auto c = readCheckpoint(zip, bytes->name);
    if (auto same = unchanged(); !same) {
        return same.error();
    }
    if (!c) {
        Error e = c.error();
        e.message = what + " (" + bytes->name + (inflated ? ", inflated" : "") + "): " + e.message;
        return e;
    }
    if (inflated) {
        auto owner = std::const_pointer_cast<Checkpoint>(*c);  // built for this call alone
        owner->inflated = std::move(inflated);
        return CheckpointPtr(std::move(owner));
    }
    // The item views the mapping, which the set's cache may close at any time: the item owns it too
    // (shared_ptr's aliasing constructor: one control block for both, the checkpoint's pointer).
    struct Owned {
        CheckpointPtr item;
        source::SourcePtr file;
    };
    auto owned = std::make_shared<const Owned>(Owned{*c, bytes->file});
    return CheckpointPtr(owned, owned->item.get());
}

// A safetensors chunk (Encoding::Raw) as a Checkpoint of the one C-contiguous tensor .metadata says
// it is, its storage the chunk's bytes in the data file's mapping (which it keeps).
Expected<CheckpointPtr> rawChunk(const Set& set, const Item& t, const Chunk& chunk, const std::string& what)
{
    auto bytes = itemBytes(set, chunk.at, what);
    if (!bytes) {
        return bytes.error();
    }
    auto c = std::make_shared<Checkpoint>();
    pickle::StorageRef ref;
    ref.key = "0";
    ref.location = "cpu";
    ref.dtype = t.dtype;
    ref.numel = sharded::detail::numelOf(chunk.sizes);
    c->arena.storages.push_back(std::move(ref));
    c->root = pickle::contiguousTensor(c->arena, 0, t.dtype, chunk.sizes);
    c->format = Format::Safetensors;
    c->path = bytes->name;
    const auto* mapped = dynamic_cast<const source::MappedSource*>(bytes->file.get());
    if (mapped != nullptr) {
        c->file = mapped->file();
        c->bytes = c->file->bytes();
    }
    c->input = bytes->file;
    c->fileSize = bytes->file->size();
    if (auto r = ckpt::detail::adoptStorages(*c); !r) {
        return r.error();
    }
    auto& st = c->storages[StorageIndex{0}];
    if (st.nbytes != chunk.at.length) {
        return makeError(ErrorCode::Corrupt, what + " (" + bytes->name + "): " + std::to_string(chunk.at.length) +
                                                 " bytes where its chunk needs " + std::to_string(st.nbytes));
    }
    st.fileOffset = chunk.at.offset;
    st.storedBytes = chunk.at.length;
    st.present = true;
    if (mapped == nullptr) {  // a remote member: the chunk's bytes are read by range when read
        ckpt::detail::readThroughSource(*c, std::vector<SourceStorages::Entry>(1));
    }
    if (auto r = ckpt::detail::buildIndex(*c); !r) {
        return r.error();
    }
    return CheckpointPtr(std::move(c));
}

// Room around a chunk's bytes in its torch.save zip (data.pkl, the small records, the central
// directory, 64-byte alignment): a zstd chunk may inflate to its bytes and this much, no more.
constexpr std::uint64_t kChunkZipRoom = 1ULL << 20;

}  // namespace

Expected<CheckpointPtr> openItem(const Set& set, const Location& at, const std::string& what)
{
    // A BYTE_IO value inflates at most as a gzip-wrapped file may (compressed.h): the read budget's
    // base and 64 times its stored bytes.
    std::uint64_t limit = 0;
    if (!checkedMul(at.length, std::uint64_t{64}, limit) || !checkedAdd(limit, MemoryBudget::kBase, limit)) {
        limit = UINT64_MAX;
    }
    return readItem(set, at, what, limit);
}

namespace {

// One tensor chunk, opened by its encoding. A zstd chunk may inflate to its own bytes (what
// .metadata says it holds: the writer clones a view before saving it) and the zip around them.
Expected<CheckpointPtr> openChunk(const Set& set, const Item& t, const Chunk& chunk)
{
    const std::string what = "tensor '" + t.fqn + "'";
    if (chunk.at.encoding == Encoding::Raw) {
        return rawChunk(set, t, chunk, what);
    }
    std::uint64_t limit = 0;
    if (!checkedMul(sharded::detail::numelOf(chunk.sizes), elementSize(t.dtype), limit) ||
        !checkedAdd(limit, kChunkZipRoom, limit)) {
        limit = UINT64_MAX;
    }
    return readItem(set, chunk.at, what, limit);
}

// The pages a chunk's read brought into this process's resident set, dropped (they stay cached): a
// torch.save item's own range of the mapping, a safetensors chunk's bytes; an inflated item is
// memory of its own, which freeing it gives back.
void releaseChunk(const Set& set, const Checkpoint& c, const Chunk& chunk)
{
    if (!set.data.local()) {
        return;  // nothing of a remote member is mapped; its bytes may be memory of the reader's
    }
    if (chunk.at.encoding == Encoding::TorchSave) {
        detail::releasePages(c.bytes);
    } else if (chunk.at.encoding == Encoding::Raw && c.bytes.size() >= chunk.at.offset + chunk.at.length) {
        detail::releasePages(c.bytes.subspan(chunk.at.offset, chunk.at.length));
    }
}

}  // namespace

std::string valueText(const Set& set, const Item& item)
{
    auto c = openItem(set, item.bytes, "value '" + item.fqn + "'");
    if (!c) {
        return "<unreadable: " + c.error().message + ">";
    }
    return pickle::shortRepr((*c)->arena, (*c)->root);
}

namespace {

// Copies a value read from a BYTE_IO item into the output arena; the memo keeps shared values
// shared (and stops on cycles). DCP's planner writes tensors as items of their own, but a value may
// still hold one: Megatron-LM's ShardedObjects are `torch.save([obj])` written as they are
// (MCoreSavePlanner.transform_object), and TransformerEngine's `_extra_state` obj is a uint8 tensor.
// A plain strided tensor is copied with its storage, which `storageOf` (the item storage's index)
// makes a storage of the output; any other tensor is refused.
class ValueCopier {
public:
    using StorageOf = std::function<Expected<std::uint32_t>(std::uint32_t)>;
    ValueCopier(const Arena& from, Arena& to, StorageOf storageOf = nullptr)
        : from_(from), to_(to), storageOf_(std::move(storageOf))
    {
    }

    Expected<ValueId> copy(ValueId id, int depth = 0)
    {
        if (depth > 200) {
            return makeError(ErrorCode::Limit, "a value nests more than 200 levels deep");
        }
        if (auto it = memo_.find(id.v); it != memo_.end()) {
            return it->second;
        }
        const pickle::Value& v = from_[id];
        switch (v.kind) {
        case Kind::Tensor:
            return copyTensor(id, depth);
        case Kind::Storage: {
            if (!storageOf_ || v.i < 0 || static_cast<std::size_t>(v.i) >= from_.storages.size()) {
                return makeError(ErrorCode::Unsupported, "a bytes item holds a storage, which is not written");
            }
            auto s = storageOf_(static_cast<std::uint32_t>(v.i));
            if (!s) {
                return s.error();
            }
            return remember(id, to_.storage(*s));
        }
        case Kind::PersistentId:
            return makeError(ErrorCode::Unsupported, "a bytes item holds a persistent id, which is not written");
        case Kind::Global:
            return remember(id, to_.global(pickle::globalOf(from_, id)));
        case Kind::Object: {
            const auto& o = pickle::objectOf(from_, id);
            pickle::ObjectInfo copyInfo;
            copyInfo.callable = o.callable;
            copyInfo.form = o.form;
            const ValueId out = remember(id, to_.object(copyInfo));
            pickle::ObjectInfo filled = copyInfo;
            for (auto [src, dst] : {std::pair{o.args, &filled.args}, std::pair{o.kwargs, &filled.kwargs},
                                    std::pair{o.state, &filled.state}}) {
                if (src.valid()) {
                    auto c = copy(src, depth + 1);
                    if (!c) {
                        return c;
                    }
                    *dst = *c;
                }
            }
            for (auto [src, dst] :
                 {std::pair{&o.listItems, &filled.listItems}, std::pair{&o.dictItems, &filled.dictItems}}) {
                for (const auto i : *src) {
                    auto c = copy(i, depth + 1);
                    if (!c) {
                        return c;
                    }
                    dst->push_back(*c);
                }
            }
            to_.objects[static_cast<std::size_t>(to_[out].i)] = std::move(filled);
            return out;
        }
        default:
            break;
        }
        pickle::Value shell;
        shell.kind = v.kind;
        shell.flag = v.flag;
        shell.text = v.text;
        if (v.kind == Kind::Float) {
            shell.f = v.f;
        } else {
            shell.i = v.i;
        }
        const ValueId out = remember(id, to_.add(std::move(shell)));
        std::vector<ValueId> items;
        for (const auto i : v.items) {
            auto c = copy(i, depth + 1);
            if (!c) {
                return c;
            }
            items.push_back(*c);
        }
        to_[out].items = items;
        if (v.attrs.valid()) {
            auto c = copy(v.attrs, depth + 1);
            if (!c) {
                return c;
            }
            to_[out].attrs = *c;
        }
        return out;
    }

private:
    Expected<ValueId> copyTensor(ValueId id, int depth)
    {
        const pickle::TensorInfo& t = pickle::tensorOf(from_, id);
        if (t.form != pickle::TensorForm::Strided || !t.storage.valid() || t.subclassType.valid()) {
            return makeError(ErrorCode::Unsupported,
                             "a bytes item holds a tensor that is no plain strided one, which is not written");
        }
        pickle::TensorInfo out = t;
        for (ValueId* field : {&out.rawArgs, &out.storage, &out.backwardHooks, &out.metadata, &out.parameterHooks,
                               &out.parameterState}) {
            if (field->valid()) {
                auto c = copy(*field, depth + 1);
                if (!c) {
                    return c;
                }
                *field = *c;
            }
        }
        return remember(id, to_.tensor(std::move(out)));
    }
    ValueId remember(ValueId from, ValueId to)
    {
        memo_[from.v] = to;
        return to;
    }
    const Arena& from_;
    Arena& to_;
    StorageOf storageOf_;
    std::unordered_map<std::uint32_t, ValueId> memo_;
};

// The nested state dict _traverse.set_element builds from planner_data paths.
struct TreeNode {
    enum class Type : std::uint8_t { Dict, List, Leaf, Empty } type = Type::Empty;
    std::vector<std::pair<PathElement, std::size_t>> dictItems;  // key, node
    std::vector<std::size_t> listItems;                          // node; Empty = None
    std::size_t item = 0;                                        // Leaf
};

class Tree {
public:
    // At most `maxNodes` nodes: a list index pads the list with None up to it, as set_element
    // does, so one index of 2^24 in a small .metadata made 16 million nodes per list.
    explicit Tree(std::uint64_t maxNodes) : maxNodes_(maxNodes) { nodes_.push_back({TreeNode::Type::Dict, {}, {}, 0}); }

    Expected<void> set(const Item& item, std::size_t itemIndex)
    {
        std::size_t cur = 0;
        for (std::size_t i = 0; i < item.path.size(); ++i) {
            const bool last = i + 1 == item.path.size();
            const auto type =
                last ? TreeNode::Type::Leaf : (item.path[i + 1].isIndex ? TreeNode::Type::List : TreeNode::Type::Dict);
            auto next = slot(cur, item.path[i], type, item.fqn);
            if (!next) {
                return next.error();
            }
            if (last) {
                nodes_[*next].type = TreeNode::Type::Leaf;
                nodes_[*next].item = itemIndex;
            }
            cur = *next;
        }
        return {};
    }
    [[nodiscard]] const TreeNode& node(std::size_t i) const { return nodes_[i]; }

private:
    // The child of `parent` at `key`: dict.setdefault / list padded with None, as set_element.
    Expected<std::size_t> slot(std::size_t parent, const PathElement& key, TreeNode::Type want, const std::string& fqn)
    {
        auto conflict = [&] {
            return makeError(ErrorCode::Corrupt, ".metadata: the planner_data path of '" + fqn +
                                                     "' runs through a value another key put there");
        };
        std::size_t child = 0;
        if (nodes_[parent].type == TreeNode::Type::Dict) {
            // A flat state dict puts every key under one parent: look children up by hash, not by scan.
            const auto [it, added] = children_.try_emplace({parent, key.isIndex, key.index, key.key}, nodes_.size());
            if (added) {
                nodes_.push_back({});
                nodes_[parent].dictItems.emplace_back(key, it->second);
            }
            child = it->second;
        } else if (nodes_[parent].type == TreeNode::Type::List && key.isIndex) {
            // nodes_ grows inside the loop: index it afresh each time, never through a reference.
            while (nodes_[parent].listItems.size() <= static_cast<std::size_t>(key.index)) {
                if (nodes_.size() >= maxNodes_) {
                    return makeError(ErrorCode::Limit,
                                     ".metadata: the planner_data path of '" + fqn + "' indexes a list at " +
                                         std::to_string(key.index) +
                                         ", padding the state dict with more None entries than the memory budget "
                                         "of a .metadata this size allows: a crafted path, not a checkpoint");
                }
                const std::size_t added = nodes_.size();
                nodes_.push_back({});
                nodes_[parent].listItems.push_back(added);
            }
            child = nodes_[parent].listItems[static_cast<std::size_t>(key.index)];
        } else {
            return conflict();
        }
        auto& c = nodes_[child];
        if (want == TreeNode::Type::Leaf) {
            if (c.type != TreeNode::Type::Empty && c.type != TreeNode::Type::Leaf) {
                return conflict();
            }
            c = TreeNode{};  // a later key replaces the value, as `cur_container[key] = value`
            return child;
        }
        if (c.type == TreeNode::Type::Empty) {
            c.type = want;
        } else if (c.type == TreeNode::Type::Leaf) {
            return conflict();
        }
        return child;
    }
    struct ChildKey {
        std::size_t parent = 0;
        bool isIndex = false;  // a list index used as a dict key (set_element allows it)
        std::int64_t index = 0;
        std::string key;
        bool operator==(const ChildKey&) const = default;
    };
    struct ChildHash {
        std::size_t operator()(const ChildKey& k) const
        {
            const std::size_t h = k.isIndex ? std::hash<std::int64_t>{}(k.index) : std::hash<std::string>{}(k.key);
            return h ^ (k.parent * 0x9e3779b97f4a7c15ULL);
        }
    };
    std::vector<TreeNode> nodes_;
    std::uint64_t maxNodes_ = 0;
    std::unordered_map<ChildKey, std::size_t, ChildHash> children_;
};

// A storage of a tensor inside a BYTE_IO value: storage `storage` of item `item`'s torch.save.
struct Embedded {
    std::size_t item = 0;
    std::uint32_t storage = 0;
    std::uint64_t nbytes = 0;
};

struct Output {
    Arena arena;
    std::vector<std::size_t> tensorItems;  // storage i holds items[tensorItems[i]]
    // Storage tensorItems.size() + k is embedded[k].
    std::vector<Embedded> embedded;
};

Expected<ValueId> buildValue(const Set& set, const Tree& tree, std::size_t n, Output& out,
                             const std::vector<std::uint32_t>& storageOf, int depth)
{
    const TreeNode& node = tree.node(n);
    Arena& a = out.arena;
    if (depth > 1000) {
        return makeError(ErrorCode::Limit, ".metadata: planner_data nests more than 1000 levels deep");
    }
    switch (node.type) {
    case TreeNode::Type::Empty:
        return a.none();
    case TreeNode::Type::Dict: {
        std::vector<ValueId> items;
        for (const auto& [k, child] : node.dictItems) {
            items.push_back(k.isIndex ? a.integer(k.index) : a.str(k.key));
            auto v = buildValue(set, tree, child, out, storageOf, depth + 1);
            if (!v) {
                return v;
            }
            items.push_back(*v);
        }
        return a.dict(std::move(items), false);
    }
    case TreeNode::Type::List: {
        std::vector<ValueId> items;
        for (const auto child : node.listItems) {
            auto v = buildValue(set, tree, child, out, storageOf, depth + 1);
            if (!v) {
                return v;
            }
            items.push_back(*v);
        }
        return a.list(std::move(items));
    }
    case TreeNode::Type::Leaf:
        break;
    }
    const Item& item = set.meta.items[node.item];
    if (!item.isTensor) {
        auto c = openItem(set, item.bytes, "value '" + item.fqn + "'");
        if (!c) {
            return c.error();
        }
        const Checkpoint& held = **c;
        std::unordered_map<std::uint32_t, std::uint32_t> copied;  // the item's storage -> the output's
        ValueCopier copier(held.arena, a, [&](std::uint32_t from) -> Expected<std::uint32_t> {
            if (auto it = copied.find(from); it != copied.end()) {
                return it->second;
            }
            const StorageEntry& st = held.storages[StorageIndex{from}];
            if (!st.present) {
                return makeError(ErrorCode::Corrupt, "a tensor's storage is not in its torch.save");
            }
            pickle::StorageRef ref = held.arena.storages[from];
            const auto index = static_cast<std::uint32_t>(a.storages.size());
            ref.key = std::to_string(index);  // its saved location kept: load_bytes maps nothing
            a.storages.push_back(std::move(ref));
            out.embedded.push_back({node.item, from, st.nbytes});
            copied.emplace(from, index);
            return index;
        });
        auto v = copier.copy(held.root);
        if (!v) {
            Error e = v.error();
            e.message = "value '" + item.fqn + "': " + e.message;
            return e;
        }
        return v;
    }
    pickle::StorageRef ref;
    const std::uint32_t s = storageOf[node.item];
    ref.key = std::to_string(s);
    ref.location = "cpu";
    ref.dtype = item.dtype;
    ref.numel = item.numel();
    a.storages[s] = std::move(ref);
    return pickle::contiguousTensor(a, s, item.dtype, item.size);
}

}  // namespace

// A row run at a time where the source's rows are contiguous.
Expected<void> detail::placeBox(const std::string& name, DType dtype, const std::vector<std::int64_t>& size,
                                const Box& box, const TensorEntry& src, Bytes storage, std::vector<std::byte>& dst)
{
    const std::size_t nd = size.size();
    const std::uint64_t es = elementSize(dtype);
    if (src.shape != box.sizes || src.stride.size() != nd) {
        return makeError(ErrorCode::Corrupt, "a chunk of '" + name + "' has shape " + dims(src.shape) +
                                                 " where its box is " + dims(box.sizes));
    }
    // Every product below is checked: sizes come from the file, and a wrapped one would place
    // bytes outside `dst` (a heap overflow with 2^62 elements from stride-0 chunks).
    const auto numel = checkedNumel(size);
    const auto totalBytes = numel ? checkedBytes(*numel, es) : std::nullopt;
    if (!inBounds(size, box) || !totalBytes || dst.size() < *totalBytes) {
        return makeError(ErrorCode::Corrupt, "a chunk of '" + name + "' lies outside its tensor");
    }
    std::vector<std::uint64_t> gstride(nd, 1);
    for (std::size_t d = nd; d-- > 1;) {
        gstride[d - 1] = gstride[d] * static_cast<std::uint64_t>(size[d]);  // within numel, checked above
    }
    if (volume(box.sizes) == 0) {
        return {};
    }
    if (src.storageOffset < 0) {
        return makeError(ErrorCode::Corrupt, "a chunk of '" + name + "' has a negative storage offset");
    }
    auto reach = static_cast<std::uint64_t>(src.storageOffset);
    for (std::size_t d = 0; d < nd; ++d) {
        std::uint64_t span = 0;
        if (src.stride[d] < 0 ||
            !checkedMul(static_cast<std::uint64_t>(box.sizes[d] - 1), static_cast<std::uint64_t>(src.stride[d]),
                        span) ||
            !checkedAdd(reach, span, reach)) {
            return makeError(ErrorCode::Corrupt, "a chunk of '" + name + "' has a negative or overflowing stride");
        }
    }
    const auto reachBytes = checkedAdd(reach, std::uint64_t{1}, reach) ? checkedBytes(reach, es) : std::nullopt;
    if (!reachBytes || *reachBytes > storage.size()) {
        return makeError(ErrorCode::Corrupt, "a chunk of '" + name + "' reaches past its storage");
    }
    const std::uint64_t run = nd == 0 ? 1 : static_cast<std::uint64_t>(box.sizes[nd - 1]);
    const bool contiguousRows = nd == 0 || src.stride[nd - 1] == 1;
    std::vector<std::int64_t> idx(nd == 0 ? 0 : nd - 1, 0);
    while (true) {
        auto s = static_cast<std::uint64_t>(src.storageOffset);
        std::uint64_t g = 0;
        for (std::size_t d = 0; d + 1 < nd; ++d) {
            s += static_cast<std::uint64_t>(idx[d]) * static_cast<std::uint64_t>(src.stride[d]);
            g += static_cast<std::uint64_t>(box.offsets[d] + idx[d]) * gstride[d];
        }
        if (nd > 0) {
            g += static_cast<std::uint64_t>(box.offsets[nd - 1]);
        }
        if (contiguousRows) {
            std::memcpy(dst.data() + g * es, storage.data() + s * es, run * es);
        } else {
            const auto step = static_cast<std::uint64_t>(src.stride[nd - 1]);
            for (std::uint64_t k = 0; k < run; ++k) {
                std::memcpy(dst.data() + (g + k) * es, storage.data() + (s + k * step) * es, es);
            }
        }
        std::size_t d = idx.size();
        while (d > 0) {
            --d;
            if (++idx[d] < box.sizes[d]) {
                break;
            }
            idx[d] = 0;
            if (d == 0) {
                return {};
            }
        }
        if (idx.empty()) {
            return {};
        }
    }
}

namespace {

Expected<const TensorEntry*> chunkTensor(const Checkpoint& c, const Item& t, const Chunk& chunk)
{
    const pickle::Value& root = c.arena[c.root];
    if (root.kind != Kind::Tensor || c.tensors.size() != 1) {
        return makeError(ErrorCode::Corrupt,
                         "the chunk of '" + t.fqn + "' at " + dims(chunk.offsets) + " holds no single tensor");
    }
    const TensorEntry& e = c.tensors[TensorIndex{0}];
    if (e.form != pickle::TensorForm::Strided || !e.storage.valid() || e.dtype != t.dtype || e.shape != chunk.sizes) {
        return makeError(ErrorCode::Corrupt, "the chunk of '" + t.fqn + "' at " + dims(chunk.offsets) + " holds a " +
                                                 std::string(dtypeName(e.dtype)) + " tensor of " + dims(e.shape) +
                                                 " where .metadata says " + std::string(dtypeName(t.dtype)) + " " +
                                                 dims(chunk.sizes));
    }
    return &e;
}

// Whether `chunk` of `t` is stored as a contiguous tensor (streamSlabs copies those as they lie).
Expected<bool> chunkIsContiguous(const Set& set, const Item& t, const Chunk& chunk)
{
    auto ckpt = openChunk(set, t, chunk);
    if (!ckpt) {
        return ckpt.error();
    }
    auto e = chunkTensor(**ckpt, t, chunk);
    if (!e) {
        return e.error();
    }
    return (*e)->contiguous;
}

// One contiguous chunk appended to the record being written. A chunk that is its item's whole
// stored record (what _write_item's torch.save of a contiguous chunk leaves) goes file to file
// with the record's own CRC.
Expected<void> streamSlab(const Set& set, const Item& t, const Chunk& chunk, archive::ZipWriter& zw)
{
    auto ckpt = openChunk(set, t, chunk);
    if (!ckpt) {
        return ckpt.error();
    }
    auto entry = chunkTensor(**ckpt, t, chunk);
    if (!entry) {
        return entry.error();
    }
    const TensorEntry* e = *entry;
    const std::uint64_t es = elementSize(t.dtype);
    const std::uint64_t bytes = e->numel * es;
    const std::uint64_t offset = static_cast<std::uint64_t>(e->storageOffset) * es;
    // Only a torch.save item's record lies in the data file as it is: file to file.
    const auto crc =
        chunk.at.encoding == Encoding::TorchSave ? wholeRecordCrc(**ckpt, e->storage, offset, bytes) : std::nullopt;
    Expected<void> r;
    auto member = crc ? set.data.source(chunk.at.file) : Expected<source::SourcePtr>(source::SourcePtr());
    if (!member) {
        return member.error();
    }
    if (crc && (*member)->fd() >= 0) {  // the one openItem holds: cached, or still owned by it
        r = zw.writeChunkFromFile((*member)->fd(), chunk.at.offset + (*ckpt)->storages[e->storage].fileOffset, bytes,
                                  *crc);
    } else {
        r = sharded::detail::streamInto(zw, **ckpt, e->storage, offset, bytes);
    }
    // What was read, and on the copy path the item's headers and what fault-around mapped beside them.
    releaseChunk(set, **ckpt, chunk);
    return r;
}

// Whole-row slabs (each chunk spans every dimension but the first: FSDP's and Shard(0)'s layout,
// and any single whole chunk) tile a validated tensor in the order of their first offset, so
// contiguous ones stream one after another straight from their files, with no buffer. False,
// with nothing written, when the chunks are not such slabs.
Expected<bool> streamSlabs(const Set& set, const Item& t, archive::ZipWriter& zw)
{
    for (const auto& c : t.chunks) {
        for (std::size_t d = 1; d < t.size.size(); ++d) {
            if (c.offsets[d] != 0 || c.sizes[d] != t.size[d]) {
                return false;
            }
        }
    }
    std::vector<const Chunk*> order;
    for (const auto& c : t.chunks) {
        if (volume(c.sizes) > 0) {
            order.push_back(&c);
        }
    }
    if (t.size.empty() && order.size() != 1) {
        return false;
    }
    std::sort(order.begin(), order.end(),
              [](const Chunk* x, const Chunk* y) { return !x->offsets.empty() && x->offsets[0] < y->offsets[0]; });
    // Every chunk is checked before the first byte is written (false must leave nothing), and each
    // is read again to be written: holding them all open between the passes held one data file per
    // chunk, and a tensor sharded over 5,000 ranks ran out of descriptors.
    for (const Chunk* c : order) {
        auto contiguous = chunkIsContiguous(set, t, *c);
        if (!contiguous || !*contiguous) {
            return contiguous;
        }
    }
    for (const Chunk* c : order) {
        if (auto r = streamSlab(set, t, *c, zw); !r) {
            return r.error();
        }
    }
    return true;
}

// Every chunk placed into the whole tensor's `buffer`.
Expected<void> placeChunks(const Set& set, const Item& t, std::vector<std::byte>& buffer)
{
    std::vector<std::byte> scratch;
    for (const auto& chunk : t.chunks) {
        auto c = openChunk(set, t, chunk);
        if (!c) {
            return c.error();
        }
        auto e = chunkTensor(**c, t, chunk);
        if (!e) {
            return e.error();
        }
        auto bytes = (*c)->storageData((*e)->storage, scratch);
        if (!bytes) {
            return bytes.error();
        }
        if (auto r = detail::placeBox(t.fqn, t.dtype, t.size, {chunk.offsets, chunk.sizes}, **e, *bytes, buffer); !r) {
            return r;
        }
        releaseChunk(set, **c, chunk);
    }
    return {};
}

Expected<void> writeTensor(const Set& set, const Item& t, archive::ZipWriter& zw, const std::string& record)
{
    // A tensor is assembled from the bytes its chunks store; chunks that repeat elements (stride-0
    // views, which no DCP writer makes) could make a 3 KB folder ask for terabytes. As convert's
    // safetensors output, a tensor may be at most 4x the bytes behind it (plus a floor for tiny ones).
    const std::uint64_t nbytes = t.numel() * elementSize(t.dtype);  // checked when .metadata was read
    std::uint64_t stored = 0;
    for (const auto& c : t.chunks) {
        stored = checkedAdd(stored, c.at.mostBytes(), stored) ? stored : UINT64_MAX;
    }
    if (nbytes / 4 > stored && nbytes > (64ULL << 20)) {
        return makeError(ErrorCode::Limit, "tensor '" + t.fqn + "' is " + humanBytes(nbytes) +
                                               " but its chunks store " + humanBytes(stored) +
                                               ": its chunks repeat elements, which no DCP writer does; not assembled");
    }
    return sharded::detail::writeRecord(
        zw, record, nbytes, [&] { return streamSlabs(set, t, zw); },
        [&](std::vector<std::byte>& buffer) { return placeChunks(set, t, buffer); });
}

}  // namespace

namespace {

// Storage `e.storage` of a BYTE_IO item's torch.save, streamed from that item into the record.
Expected<void> streamEmbedded(const Set& set, const Embedded& e, std::uint64_t offset, std::uint64_t length,
                              const std::function<bool(Bytes)>& sink, std::size_t chunk)
{
    const Item& item = set.meta.items[e.item];
    auto c = openItem(set, item.bytes, "value '" + item.fqn + "'");
    if (!c) {
        return c.error();
    }
    return (*c)->streamStorage(StorageIndex{e.storage}, offset, length, sink, chunk);
}

Expected<void> writeEmbedded(const Set& set, const Embedded& e, archive::ZipWriter& zw, const std::string& record)
{
    if (auto r = zw.beginRecord(record, e.nbytes); !r) {
        return r;
    }
    std::optional<Error> failed;
    auto streamed = streamEmbedded(
        set, e, 0, e.nbytes,
        [&](Bytes piece) {
            if (auto w = zw.writeChunk(piece); !w) {
                failed = w.error();
            }
            return !failed;
        },
        4U << 20);
    if (failed) {
        return *failed;
    }
    if (!streamed) {
        return streamed;
    }
    return zw.endRecord();
}

// The view's storages: each tensor item's from its chunks (box_view.h), then each storage of a tensor
// inside a BYTE_IO value from that value's item.
class DcpStorages final : public StorageSource {
public:
    DcpStorages(std::shared_ptr<const Set> set, std::shared_ptr<const StorageSource> boxes, std::size_t tensors,
                std::vector<Embedded> embedded)
        : set_(std::move(set)), boxes_(std::move(boxes)), tensors_(tensors), embedded_(std::move(embedded))
    {
    }
    Expected<void> stream(StorageIndex storage, std::uint64_t offset, std::uint64_t length,
                          const std::function<bool(Bytes)>& sink, std::size_t chunk) const override
    {
        if (storage.value() < tensors_) {
            return boxes_->stream(storage, offset, length, sink, chunk);
        }
        return streamEmbedded(*set_, embedded_.at(storage.value() - tensors_), offset, length, sink, chunk);
    }
    [[nodiscard]] Expected<void> checkUnchanged() const override { return set_->data.checkUnchanged(); }

private:
    std::shared_ptr<const Set> set_;
    std::shared_ptr<const StorageSource> boxes_;
    std::size_t tensors_ = 0;
    std::vector<Embedded> embedded_;
};

// Whether the set makes one state dict (what the view and consolidate refuse otherwise).
Expected<void> checkWhole(const Set& set)
{
    if (!set.complete()) {
        return sharded::detail::incomplete("the DCP set is incomplete", set.findings, set.loc.dir);
    }
    return {};
}

// The state dict dcp_to_torch_save writes: `out.arena` and its root, storage i holding tensor
// item out.tensorItems[i] (C-contiguous, on the CPU).
Expected<ValueId> statePickle(const Set& set, Output& out)
{
    MemoryBudget budget;
    budget.pickleBytes = set.meta.pickleBytes;
    // A node costs itself, its slot in its parent's list, and as much again while a vector doubles.
    Tree tree(budget.limit() / (2 * (sizeof(TreeNode) + sizeof(std::size_t))));
    std::vector<std::uint32_t> storageOf(set.meta.items.size(), 0);
    for (std::size_t i = 0; i < set.meta.items.size(); ++i) {
        if (set.meta.items[i].isTensor) {
            storageOf[i] = static_cast<std::uint32_t>(out.tensorItems.size());
            out.tensorItems.push_back(i);
        }
        if (auto r = tree.set(set.meta.items[i], i); !r) {
            return r.error();
        }
    }
    out.arena.storages.resize(out.tensorItems.size());
    return buildValue(set, tree, 0, out, storageOf, 0);
}

// A tensor item's chunks, opened one at a time for the view.
class ChunkFiles final : public sharded::detail::BoxFiles {
public:
    ChunkFiles(std::shared_ptr<const Set> set, std::vector<std::size_t> items)
        : set_(std::move(set)), items_(std::move(items))
    {
    }
    [[nodiscard]] Expected<sharded::detail::OpenedBox> open(std::size_t tensor, std::size_t box) const override
    {
        const Item& t = set_->meta.items.at(items_.at(tensor));
        const Chunk& chunk = t.chunks.at(box);
        auto c = openChunk(*set_, t, chunk);
        if (!c) {
            return c.error();
        }
        auto e = chunkTensor(**c, t, chunk);
        if (!e) {
            return e.error();
        }
        // A torch.save or safetensors item of a local file is a range of its mapping; an inflated or
        // remote one is not.
        return sharded::detail::OpenedBox{*c, *e, set_->data.local() && chunk.at.encoding != Encoding::Zstd};
    }
    [[nodiscard]] Expected<void> checkUnchanged() const override { return set_->data.checkUnchanged(); }

private:
    std::shared_ptr<const Set> set_;
    std::vector<std::size_t> items_;
};

}  // namespace

Expected<CheckpointPtr> view(const Set& set)
{
    if (auto whole = checkWhole(set); !whole) {
        return whole.error();
    }
    Output out;
    auto root = statePickle(set, out);
    if (!root) {
        return root.error();
    }
    auto c = std::make_shared<Checkpoint>();
    c->arena = std::move(out.arena);
    c->root = *root;
    c->path = set.loc.dir;
    std::vector<sharded::detail::BoxedTensor> tensors;
    std::vector<std::uint64_t> nbytes;
    for (const auto i : out.tensorItems) {
        const Item& t = set.meta.items[i];
        sharded::detail::BoxedTensor b{t.fqn, t.dtype, t.size, {}, 0};
        for (const auto& chunk : t.chunks) {
            b.boxes.push_back({chunk.offsets, chunk.sizes});
            b.storedBytes = checkedAdd(b.storedBytes, chunk.at.mostBytes(), b.storedBytes) ? b.storedBytes : UINT64_MAX;
        }
        nbytes.push_back(b.nbytes());
        c->fileSize += nbytes.back();
        tensors.push_back(std::move(b));
    }
    for (const auto& e : out.embedded) {
        nbytes.push_back(e.nbytes);
        c->fileSize += e.nbytes;
    }
    for (const auto& f : set.meta.files) {
        c->setFiles.push_back(set.data.folder()->pathOf(f));
    }
    c->setMembers = sharded::memberFiles(set.loc);
    auto shared = std::make_shared<const Set>(set);
    const std::size_t tensorCount = out.tensorItems.size();
    auto boxes = sharded::detail::boxStorages(std::move(tensors),
                                              std::make_shared<const ChunkFiles>(shared, std::move(out.tensorItems)));
    return sharded::detail::finishView(
        std::move(c), nbytes,
        std::make_shared<const DcpStorages>(shared, std::move(boxes), tensorCount, std::move(out.embedded)));
}

Expected<ConsolidateResult> consolidate(const Set& set, const std::string& outPath)
{
    if (auto whole = checkWhole(set); !whole) {
        return whole.error();
    }
    if (!set.valuesCallingCode.empty()) {
        return sharded::detail::copiesCode("value '" + set.valuesCallingCode.front() + "'", set.loc.dir);
    }
    auto target = write::resolveTarget(outPath);
    if (!target) {
        return target.error();
    }
    std::error_code ec;
    for (const auto& f : set.meta.files) {
        if (fs::equivalent(fs::path(set.loc.dir) / f, *target, ec) || fs::equivalent(set.loc.index, *target, ec)) {
            return makeError(ErrorCode::Usage, "the output would overwrite a file of the set it is read from");
        }
    }
    Output out;
    auto root = statePickle(set, out);
    if (!root) {
        return root.error();
    }
    auto pickled = pickle::picklePersistent(out.arena, *root);
    if (!pickled) {
        return pickled.error();
    }
    auto size = sharded::detail::writeTorchArchive(
        *target, *pickled, out.tensorItems.size() + out.embedded.size(), sharded::detail::storageBytes(out.arena),
        [&](archive::ZipWriter& zw, std::size_t i, const std::string& record) {
            if (i >= out.tensorItems.size()) {
                return writeEmbedded(set, out.embedded[i - out.tensorItems.size()], zw, record);
            }
            return writeTensor(set, set.meta.items[out.tensorItems[i]], zw, record);
        },
        [&]() -> Expected<void> { return set.data.checkUnchanged(); });
    if (!size) {
        return size.error();
    }
    std::string note;
    if (!set.extraState.empty()) {
        note = std::to_string(set.extraState.size()) +
               " _extra_state values kept, as dcp_to_torch_save writes them (--drop-extra-state leaves them out)";
    }
    return ConsolidateResult{*target, *size, out.tensorItems.size() + out.embedded.size(), set.meta.files.size(), note};
}

}  // namespace ckpt::sharded::dcp
