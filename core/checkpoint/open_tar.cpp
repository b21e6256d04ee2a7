// The tar-format checkpoint (PyTorch < 0.1.10), member by member as torch/serialization.py's
// `legacy_load` reads it (docs/format.md §3.3):
//   storages: pickle N; N x [pickle (key, location, storage class), int64 count, count x element
//             bytes]; pickle [(view_key, root_key, offset, numel), ...]
//   tensors:  pickle M; M x [pickle (key, storage_key, tensor class), int32 ndim, 4 bytes, ndim x
//             int64 sizes, ndim x int64 strides, int64 storage offset]
//   pickle:   the object; a persistent id is a tensor's or storage's key as a decimal string
//             (`deserialized_objects[int(saved_id)]`), or a ('module', class, file, source) tuple.
// Storages and tensors share one key space. Nothing is executed: the small pickles are read by the
// same restricted unpickler as the object.
#include "archive/tar.h"
#include "checkpoint/loaders.h"
#include "pickle/unpickler.h"

#include <charconv>
#include <cstring>
#include <unordered_map>

namespace ckpt::detail {
namespace {

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

Error fail(ErrorCode code, const std::string& member, const std::string& message, std::uint64_t offset)
{
    return makeError(code, "tar member '" + member + "': " + message, offset);
}

// Reads consecutive pickles and raw numbers from one member; offsets reported are the file's.
class MemberReader {
public:
    MemberReader(Checkpoint& c, const archive::TarMember& m, const MemoryBudget& budget)
        : c_(c), name_(m.name), base_(m.offset), rest_(c.bytes.subspan(m.offset, m.size)), budget_(budget)
    {
    }

    [[nodiscard]] const MemoryBudget& budget() const { return budget_; }

    // `resolve`: the persistent ids of objects read before (UnpickleOptions::resolvePersistentId).
    Expected<ValueId> pickle(std::function<std::optional<ValueId>(ValueId)> resolve = nullptr)
    {
        pickle::UnpickleOptions opts;
        opts.legacyPersistentIds = true;
        opts.budget = budget_;
        opts.resolvePersistentId = std::move(resolve);
        auto r = pickle::unpickle(rest_, c_.arena, opts);
        if (!r) {
            Error e = r.error();
            e.message = "tar member '" + name_ + "': " + e.message;
            e.offset = base_ + used_ + e.offset.value_or(0);
            return e;
        }
        c_.opcodesSeen |= r->opcodesSeen;
        c_.pickleProtocol = r->protocol;  // the object's pickle is read last
        advance(r->consumed);
        return r->root;
    }

    Expected<std::int64_t> integer(std::size_t width)
    {
        if (rest_.size() < width) {
            return fail(ErrorCode::Truncated, name_, "ends early: the file is truncated", here());
        }
        std::uint64_t v = loadLE(rest_, 0, width);
        if (width == 4 && (v & 0x80000000ULL) != 0) {
            v |= ~0xFFFFFFFFULL;  // sign-extend
        }
        advance(width);
        return static_cast<std::int64_t>(v);
    }

    // Skips `n` bytes and says where they began in the file.
    Expected<std::uint64_t> skip(std::uint64_t n)
    {
        if (rest_.size() < n) {
            return fail(ErrorCode::Truncated, name_, "ends early: the file is truncated", here());
        }
        const std::uint64_t at = here();
        advance(n);
        return at;
    }

    [[nodiscard]] std::uint64_t here() const { return base_ + used_; }
    [[nodiscard]] const std::string& name() const { return name_; }

private:
    void advance(std::size_t n)
    {
        rest_ = rest_.subspan(n);
        used_ += n;
    }

    Checkpoint& c_;
    std::string name_;
    std::uint64_t base_;
    Bytes rest_;
    std::uint64_t used_ = 0;
    const MemoryBudget& budget_;
};

std::optional<std::int64_t> intValue(const Arena& a, ValueId v)
{
    if (!v.valid()) {
        return std::nullopt;
    }
    if (a[v].kind == Kind::Int) {
        return a[v].i;
    }
    if (a[v].kind == Kind::Str || a[v].kind == Kind::Bytes) {  // int(saved_id) of a string key
        std::int64_t out = 0;
        const auto& t = a[v].text;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
        if (ec == std::errc() && end == t.data() + t.size()) {
            return out;
        }
    }
    return std::nullopt;
}

const pickle::IdList* tupleItems(const Arena& a, ValueId v, std::size_t n)
{
    if (!v.valid() || (a[v].kind != Kind::Tuple && a[v].kind != Kind::List) || a[v].items.size() != n) {
        return nullptr;
    }
    return &a[v].items;
}

// Each section of the legacy tar format opens with its record count, pickled on its own.
Expected<std::int64_t> readCount(const Arena& a, MemberReader& r, const std::string& what)
{
    auto count = r.pickle();
    if (!count) {
        return count.error();
    }
    const auto n = intValue(a, *count);
    if (!n || *n < 0) {
        return fail(ErrorCode::Corrupt, r.name(), "the " + what + " count is not a number", r.here());
    }
    return *n;
}

struct Loaded {
    std::unordered_map<std::int64_t, std::uint32_t> storages;  // key -> storage index
    std::unordered_map<std::int64_t, ValueId> tensors;         // key -> tensor value
};

Expected<void> readStorages(Checkpoint& c, MemberReader& r, Loaded& out)
{
    Arena& a = c.arena;
    const auto n = readCount(a, r, "storage");
    if (!n) {
        return n.error();
    }
    for (std::int64_t i = 0; i < *n; ++i) {
        const std::uint64_t recordAt = r.here();
        auto rec = r.pickle();
        if (!rec) {
            return rec.error();
        }
        const auto* items = tupleItems(a, *rec, 3);
        const auto key = items ? intValue(a, (*items)[0]) : std::nullopt;
        if (!key || a[(*items)[1]].kind != Kind::Str || a[(*items)[2]].kind != Kind::Global) {
            return fail(ErrorCode::Corrupt, r.name(), "a storage record is not (key, location, storage class)",
                        recordAt);
        }
        const std::string cls = pickle::globalOf(a, (*items)[2]).name;
        const auto dtype = dtypeFromStorageClass(cls);
        if (!dtype) {
            return fail(ErrorCode::Unsupported, r.name(), "unknown storage class " + cls, recordAt);
        }
        auto numel = r.integer(8);
        if (!numel) {
            return numel.error();
        }
        const std::uint64_t elem = elementSize(*dtype);
        if (*numel < 0 || (elem != 0 && static_cast<std::uint64_t>(*numel) > UINT64_MAX / elem)) {
            return fail(ErrorCode::Corrupt, r.name(),
                        "storage " + std::to_string(*key) + " declares a size of " + std::to_string(*numel) +
                            " elements",
                        recordAt);
        }
        const std::uint64_t nbytes = static_cast<std::uint64_t>(*numel) * elem;
        auto at = r.skip(nbytes);
        if (!at) {
            return at.error();
        }
        pickle::StorageRef ref;
        ref.key = std::to_string(*key);
        ref.location = a[(*items)[1]].text;
        ref.dtype = *dtype;
        ref.numel = static_cast<std::uint64_t>(*numel);
        ref.className = cls;
        a.storages.push_back(ref);
        StorageEntry s;
        s.key = ref.key;
        s.location = ref.location;
        s.dtype = ref.dtype;
        s.numel = ref.numel;
        s.nbytes = nbytes;
        s.fileOffset = *at;
        s.storedBytes = nbytes;
        s.present = true;
        out.storages[*key] = static_cast<std::uint32_t>(c.storages.size());
        c.storages.push_back(std::move(s));
    }
    auto views = r.pickle();
    if (!views) {
        return views.error();
    }
    if (a[*views].kind != Kind::List && a[*views].kind != Kind::Tuple) {
        return fail(ErrorCode::Corrupt, r.name(), "the storage view list is not a list", r.here());
    }
    // A view is a slice of its root storage under a key of its own: here a storage entry over
    // the same bytes of the file. One memoized view tuple repeated costs the pickle a byte or two and
    // a storage entry here hundreds, so the entries are held to the read's budget (1.7 GB before).
    // Four times an entry's size: the two tables double as they grow, holding the old and the new
    // buffer while they copy, and the unpickled view list itself takes its share of the budget.
    const std::uint64_t perView = 4 * (sizeof(StorageEntry) + sizeof(pickle::StorageRef));
    for (ValueId v : a[*views].items.vec()) {
        if ((c.storages.size() + 1) * perView > r.budget().limit()) {
            Error e = r.budget().exceeded();
            return fail(ErrorCode::Limit, r.name(), "its storage views " + e.message, r.here());
        }
        const auto* items = tupleItems(a, v, 4);
        const auto target = items ? intValue(a, (*items)[0]) : std::nullopt;
        const auto root = items ? intValue(a, (*items)[1]) : std::nullopt;
        const auto offset = items ? intValue(a, (*items)[2]) : std::nullopt;
        const auto numel = items ? intValue(a, (*items)[3]) : std::nullopt;
        if (!target || !root || !offset || !numel || !out.storages.contains(*root)) {
            return fail(ErrorCode::Corrupt, r.name(), "a storage view names no stored storage", r.here());
        }
        const StorageEntry rootEntry = c.storages[StorageIndex{out.storages[*root]}];
        if (*offset < 0 || *numel < 0 || static_cast<std::uint64_t>(*offset) > rootEntry.numel ||
            static_cast<std::uint64_t>(*numel) > rootEntry.numel - static_cast<std::uint64_t>(*offset)) {
            return fail(ErrorCode::Corrupt, r.name(),
                        "storage view " + std::to_string(*target) + " reaches past storage " + rootEntry.key, r.here());
        }
        const std::uint64_t elem = elementSize(rootEntry.dtype);
        pickle::StorageRef ref = a.storages[out.storages[*root]];
        ref.key = std::to_string(*target);
        ref.numel = static_cast<std::uint64_t>(*numel);
        a.storages.push_back(ref);
        StorageEntry s = rootEntry;
        s.key = ref.key;
        s.numel = ref.numel;
        s.nbytes = ref.numel * elem;
        s.storedBytes = s.nbytes;
        s.fileOffset = rootEntry.fileOffset + static_cast<std::uint64_t>(*offset) * elem;
        out.storages[*target] = static_cast<std::uint32_t>(c.storages.size());
        c.storages.push_back(std::move(s));
    }
    return {};
}

Expected<void> readTensors(Checkpoint& c, MemberReader& r, Loaded& out)
{
    Arena& a = c.arena;
    const auto n = readCount(a, r, "tensor");
    if (!n) {
        return n.error();
    }
    for (std::int64_t i = 0; i < *n; ++i) {
        const std::uint64_t recordAt = r.here();
        auto rec = r.pickle();
        if (!rec) {
            return rec.error();
        }
        const auto* items = tupleItems(a, *rec, 3);
        const auto key = items ? intValue(a, (*items)[0]) : std::nullopt;
        const auto storageKey = items ? intValue(a, (*items)[1]) : std::nullopt;
        if (!key || !storageKey || !out.storages.contains(*storageKey)) {
            return fail(ErrorCode::Corrupt, r.name(), "a tensor record names no stored storage", recordAt);
        }
        auto ndim = r.integer(4);
        if (!ndim) {
            return ndim.error();
        }
        if (*ndim < 0 || *ndim > 64) {
            return fail(ErrorCode::Corrupt, r.name(), "a tensor with " + std::to_string(*ndim) + " dimensions",
                        recordAt);
        }
        if (auto pad = r.skip(4); !pad) {  // "legacy encoding treated ndim as 8 bytes"
            return pad.error();
        }
        pickle::TensorInfo t;
        t.rebuild = pickle::internGlobal({"torch._utils", "_rebuild_tensor_v2"});
        for (auto* dims : {&t.shape, &t.stride}) {
            for (std::int64_t d = 0; d < *ndim; ++d) {
                auto v = r.integer(8);
                if (!v) {
                    return v.error();
                }
                dims->push_back(*v);
            }
        }
        auto offset = r.integer(8);
        if (!offset) {
            return offset.error();
        }
        const std::uint32_t s = out.storages[*storageKey];
        const StorageEntry& st = c.storages[StorageIndex{s}];
        t.storageOffset = *offset;
        t.dtype = st.dtype;
        t.storage = a.storage(s);
        // The index checks that the view stays inside its storage; negative sizes never load.
        for (std::size_t d = 0; d < t.shape.size(); ++d) {
            if (t.shape[d] < 0 || t.stride[d] < 0 || *offset < 0) {
                return fail(ErrorCode::Corrupt, r.name(), "tensor " + std::to_string(*key) + " has a negative size",
                            recordAt);
            }
        }
        out.tensors[*key] = a.tensor(std::move(t));
    }
    return {};
}

// The main pickle's string ids become the tensors (or storages) they name, in place.
Expected<void> resolveIds(Checkpoint& c, const Loaded& loaded)
{
    Arena& a = c.arena;
    for (std::uint32_t i = 0; i < a.size(); ++i) {
        const ValueId v{i};
        if (a[v].kind != Kind::PersistentId || a[v].items.empty()) {
            continue;
        }
        const auto key = intValue(a, a[v].items[0]);
        if (!key) {
            continue;  // a tuple id other than a module: left opaque, as any unknown id
        }
        if (auto t = loaded.tensors.find(*key); t != loaded.tensors.end()) {
            a[v] = a[t->second];
        } else if (auto s = loaded.storages.find(*key); s != loaded.storages.end()) {
            a[v] = a[a.storage(s->second)];
        } else {
            return makeError(ErrorCode::Corrupt, "the pickle names object " + std::to_string(*key) +
                                                     ", which the tar's tensors and storages do not hold");
        }
    }
    return {};
}

}  // namespace

bool startsLikeTorchTar(Bytes head)
{
    constexpr std::size_t kMagicAt = 257;  // ustar's magic, in the first header
    return head.size() > kMagicAt + 5 && std::memcmp(head.data() + kMagicAt, "ustar", 5) == 0;
}

Expected<void> loadTorchTar(Checkpoint& c, MemoryBudget& budget)
{
    c.format = Format::TorchTar;
    auto members = archive::parseTar(c.bytes);
    if (!members) {
        return members.error();
    }
    c.duplicateMembers = archive::duplicatedNames(*members);
    const auto* storages = archive::findMember(*members, "storages");
    const auto* tensors = archive::findMember(*members, "tensors");
    const auto* pkl = archive::findMember(*members, "pickle");
    if (storages == nullptr && tensors == nullptr && pkl == nullptr) {
        return makeError(ErrorCode::NotCheckpoint, "is a tar archive without the members 'storages', 'tensors' and "
                                                   "'pickle' of a PyTorch 0.1 checkpoint");
    }
    if (storages == nullptr || tensors == nullptr || pkl == nullptr) {
        std::string lacks;
        for (const auto& [member, name] :
             {std::pair{storages, "'storages'"}, std::pair{tensors, "'tensors'"}, std::pair{pkl, "'pickle'"}}) {
            if (member == nullptr) {
                lacks += (lacks.empty() ? "" : " and ") + std::string(name);
            }
        }
        return makeError(ErrorCode::Corrupt, "is a PyTorch 0.1 tar checkpoint that lacks its member " + lacks +
                                                 " (torch.load fails with KeyError): the archive is incomplete");
    }
    budget.pickleBytes = storages->size + tensors->size + pkl->size;
    Loaded loaded;
    MemberReader s(c, *storages, budget);
    if (auto ok = readStorages(c, s, loaded); !ok) {
        return ok;
    }
    MemberReader t(c, *tensors, budget);
    if (auto ok = readTensors(c, t, loaded); !ok) {
        return ok;
    }
    // The object's ids are resolved as they are met, as legacy_load's persistent_load returns
    // `deserialized_objects[int(saved_id)]`: a 0.1 Variable's BUILD then sees its data tensor.
    MemberReader p(c, *pkl, budget);
    auto root = p.pickle([&](ValueId pid) -> std::optional<ValueId> {
        Arena& a = c.arena;
        const auto key = a[pid].kind == Kind::Str || a[pid].kind == Kind::Bytes || a[pid].kind == Kind::Int
                             ? intValue(a, pid)
                             : std::nullopt;
        if (!key) {
            return std::nullopt;
        }
        if (const auto t = loaded.tensors.find(*key); t != loaded.tensors.end()) {
            return t->second;
        }
        if (const auto st = loaded.storages.find(*key); st != loaded.storages.end()) {
            return c.arena.storage(st->second);
        }
        return std::nullopt;  // an unknown key: left to resolveIds, which says so
    });
    if (!root) {
        return root.error();
    }
    c.root = *root;
    if (auto ok = resolveIds(c, loaded); !ok) {
        return ok;
    }
    c.warnings.emplace_back("tar-format checkpoint (PyTorch < 0.1.10): current torch.load still reads it, but "
                            "not with weights_only=True");
    return {};
}

}  // namespace ckpt::detail
