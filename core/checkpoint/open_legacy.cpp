// The legacy torch.save stream of PyTorch 0.4 to 1.5 (docs/format.md §3): five pickles, then each
// storage's element count and bytes in the order of the storage key list (file_formats.h's
// torch-legacy entry), read from a mapped file or from ranges of a source that is not.
#include "checkpoint/loaders.h"
#include "checkpoint/source_storages.h"
#include "pickle/unpickler.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace ckpt::detail {
namespace {

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

// The LONG1 payload of torch's legacy MAGIC_NUMBER 0x1950a86a20f9469cfc6c, little-endian.
constexpr std::array<unsigned char, 10> kLegacyMagic{0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

bool isLegacyMagic(const Arena& a, ValueId v)
{
    const auto& val = a[v];
    return val.kind == Kind::BigInt && val.text.size() >= kLegacyMagic.size() &&
           std::memcmp(val.text.data(), kLegacyMagic.data(), kLegacyMagic.size()) == 0 &&
           std::all_of(val.text.begin() + kLegacyMagic.size(), val.text.end(), [](char ch) { return ch == 0; });
}

// A legacy stream's five pickles (magic number, protocol, sys info, the object, the storage keys),
// read from the start of `c.bytes`: the key list, and in `pos` where the storage records start.
Expected<ValueId> readLegacyPickles(Checkpoint& c, MemoryBudget& budget, std::uint64_t& pos)
{
    c.format = Format::TorchLegacy;
    budget.pickleBytes = c.bytes.size();  // the pickles' end is known only once they are read
    Bytes rest = c.bytes;
    pos = 0;
    auto next = [&](bool legacyIds) -> Expected<ValueId> {
        std::size_t used = 0;
        Arena& a = c.arena;
        pickle::UnpickleOptions opts;
        opts.legacyPersistentIds = legacyIds;
        opts.budget = budget;
        auto r = pickle::unpickle(rest, a, opts);
        if (!r) {
            Error e = r.error();
            if (e.offset) {
                e.offset = *e.offset + pos;
            }
            return e;
        }
        used = r->consumed;
        c.opcodesSeen |= r->opcodesSeen;
        noteUndecodable(c, *r, pos, "");
        if (legacyIds) {
            c.pickleProtocol = r->protocol;
        }
        rest = rest.subspan(used);
        pos += used;
        return r->root;
    };
    auto magic = next(false);
    if (!magic) {
        return magic.error();
    }
    if (!isLegacyMagic(c.arena, *magic)) {
        return makeError(
            ErrorCode::NotCheckpoint,
            "is a plain pickle, not a torch.save checkpoint (no torch magic number; torch.load says \"Invalid "
            "magic number; corrupt file?\")");
    }
    auto proto = next(false);
    if (!proto) {
        return proto.error();
    }
    if (c.arena[*proto].kind != Kind::Int || c.arena[*proto].i != 1001) {
        return makeError(ErrorCode::Unsupported, "legacy stream with protocol version " +
                                                     pickle::shortRepr(c.arena, *proto) + " (torch reads only 1001)");
    }
    auto sysInfo = next(false);
    if (!sysInfo) {
        return sysInfo.error();
    }
    auto root = next(true);
    if (!root) {
        return root.error();
    }
    c.root = *root;
    auto keys = next(false);
    if (!keys) {
        return keys.error();
    }
    if (auto r = adoptStorages(c); !r) {
        return r.error();
    }
    if (c.arena[*keys].kind != Kind::List && c.arena[*keys].kind != Kind::Tuple) {
        return makeError(ErrorCode::Corrupt, "legacy stream: the storage key list is not a list", pos);
    }
    return *keys;
}

// A storage record of a legacy stream as its walk finds it: its key, its storage (none for a key
// no tensor names) and the bytes of one element (1 for such a key).
struct LegacyRecord {
    std::string key;
    StorageEntry* storage = nullptr;
    std::uint64_t elementBytes = 1;
};

// The storage records in key-list order.
std::vector<LegacyRecord> legacyRecords(Checkpoint& c, ValueId keys)
{
    // Keys are looked up in a hash map: a search of the storage table per key was quadratic
    // (180k storages took minutes). The first storage with a key wins, as the search's did.
    std::unordered_map<std::string_view, std::size_t> byKey;
    byKey.reserve(c.storages.size());
    for (std::uint32_t i = 0; i < c.storages.size(); ++i) {
        byKey.emplace(c.storages[StorageIndex{i}].key, i);
    }
    std::vector<LegacyRecord> records;
    records.reserve(c.arena[keys].items.size());
    for (ValueId k : c.arena[keys].items) {
        LegacyRecord r;
        r.key = pickle::keyText(c.arena, k);
        if (const auto found = byKey.find(r.key); found != byKey.end()) {
            r.storage = &c.storages[StorageIndex{static_cast<std::uint32_t>(found->second)}];
            r.elementBytes = std::max<std::uint64_t>(1, elementSize(r.storage->dtype));
        }
        records.push_back(std::move(r));
    }
    return records;
}

// Where a legacy record's element count comes from: the bytes at `pos` of a mapped stream, or,
// read from ranges of a source, as the pickle declares it (checked when the bytes are read).
using CountAt = std::function<Expected<std::uint64_t>(const LegacyRecord&, std::uint64_t pos)>;

// The storage records after the pickles (from `pos`), in key-list order: u64 element count, then
// count x element size bytes, in a stream of `size` bytes.
Expected<void> walkLegacyRecords(Checkpoint& c, ValueId keys, std::uint64_t pos, std::uint64_t size,
                                 const CountAt& countAt)
{
    for (const auto& record : legacyRecords(c, keys)) {
        const auto& [key, it, elem] = record;
        if (pos > size || size - pos < 8) {
            return makeError(ErrorCode::Truncated,
                             "legacy stream ends before storage " + key + ": the file is truncated", pos);
        }
        auto count = countAt(record, pos);
        if (!count) {
            return count.error();
        }
        if (*count > (size - pos - 8) / elem) {
            return makeError(ErrorCode::Truncated,
                             "legacy stream: storage " + key + " declares " + std::to_string(*count) +
                                 " elements but the file ends first: the file is truncated",
                             pos);
        }
        const std::uint64_t n = *count * elem;
        if (it != nullptr) {
            it->fileOffset = pos + 8;
            it->storedBytes = n;
            it->present = true;
        }
        pos += 8 + n;
    }
    for (const auto& s : c.storages) {
        if (!s.present) {
            return makeError(ErrorCode::Corrupt, "legacy stream: storage " + s.key + " is referenced but not stored");
        }
    }
    if (pos < size) {
        c.warnings.push_back(std::to_string(size - pos) + " bytes after the last storage are ignored");
    }
    return checkStorageBytes(c);
}

}  // namespace

// A legacy stream's first pickle (the magic number) starts with PROTO, or with MARK, a LONG or
// INT opcode, or LONG1 at protocol 0-1.
bool startsLikeLegacyStream(Bytes data)
{
    const auto b = std::to_integer<unsigned>(data[0]);
    return b == 0x80 || b == '(' || b == 'L' || b == 'I' || b == 0x8a;
}

Expected<void> loadLegacy(Checkpoint& c, MemoryBudget& budget)
{
    std::uint64_t pos = 0;
    auto keys = readLegacyPickles(c, budget, pos);
    if (!keys) {
        return keys.error();
    }
    return walkLegacyRecords(c, *keys, pos, c.bytes.size(),
                             [&](const LegacyRecord&, std::uint64_t at) -> Expected<std::uint64_t> {
                                 return loadLE(c.bytes, static_cast<std::size_t>(at), 8);
                             });
}

// A legacy stream from ranges: its pickles (the first bytes, four times as many each time they run
// past them, up to `limit`), then each record's count as the pickle declares it, assumed and checked
// when its bytes are read (SourceStorages). A stream with more than a few records no tensor names
// (each count a read of 8 bytes) is read whole.
Expected<RangedRead> loadLegacyRanged(std::shared_ptr<Checkpoint>& first, MemoryBudget& budget, std::uint64_t limit)
{
    const source::SourcePtr src = first->input;
    const std::uint64_t size = src->size();
    {
        auto head = src->read(0, std::min(size, kHeadBytes));
        if (!head) {
            return head.error();
        }
        if (head->bytes.empty() || !startsLikeLegacyStream(head->bytes)) {
            return RangedRead::NotThisFormat;
        }
    }
    std::uint64_t n = std::min(size, kHeadBytes);
    for (;;) {
        auto prefix = src->read(0, n);
        if (!prefix) {
            return prefix.error();
        }
        // Each try starts from a fresh checkpoint: a failed one leaves values in the arena.
        auto c = std::make_shared<Checkpoint>();
        c->path = first->path;
        c->input = src;
        c->fileSize = size;
        c->bytes = prefix->bytes;
        std::uint64_t pos = 0;
        MemoryBudget tryBudget;
        auto keys = readLegacyPickles(*c, tryBudget, pos);
        c->bytes = {};
        if (!keys) {
            if (keys.error().code != ErrorCode::Truncated || n == size) {
                return RangedRead::ReadWhole;  // for the reader's own message, on the whole file
            }
            if (n >= limit) {
                return makeError(ErrorCode::Unsupported,
                                 "its pickles run past the first " + humanBytes(limit) +
                                     ", more than ckptscope reads over HTTP; download it first");
            }
            n = std::min({size, n * 4, limit});
            continue;
        }
        budget = tryBudget;
        constexpr int kUndeclaredRead = 16;  // each is a read of 8 bytes
        int undeclared = 0;
        std::vector<SourceStorages::Entry> entries(c->storages.size());
        auto countAt = [&](const LegacyRecord& r, std::uint64_t at) -> Expected<std::uint64_t> {
            if (src->holds({at, 8})) {  // fetched with the pickles: read, not assumed
                auto count = src->read(at, 8);
                if (!count) {
                    return count.error();
                }
                return loadLE(count->bytes, 0, 8);
            }
            if (r.storage != nullptr) {
                auto& e = entries[static_cast<std::size_t>(r.storage - &c->storages[StorageIndex{0}])];
                e.header = at;
                e.assumed = SourceStorages::Assumed::LegacyCount;
                e.count = r.storage->numel;
                return r.storage->numel;
            }
            if (++undeclared > kUndeclaredRead) {
                return makeError(ErrorCode::Unsupported, "");  // read whole
            }
            auto count = src->read(at, 8);
            if (!count) {
                return count.error();
            }
            return loadLE(count->bytes, 0, 8);
        };
        if (auto ok = walkLegacyRecords(*c, *keys, pos, size, countAt); !ok) {
            if (undeclared > kUndeclaredRead) {
                return RangedRead::ReadWhole;
            }
            return ok.error();
        }
        readThroughSource(*c, std::move(entries));
        first = std::move(c);
        return RangedRead::Read;
    }
}

}  // namespace ckpt::detail
