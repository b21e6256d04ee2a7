// safetensors (docs/format.md §10): a JSON header naming each tensor's dtype, shape and byte range,
// then the bytes (file_formats.h's safetensors entry), read from a mapped file or from ranges of a
// source that is not.
#include "archive/safetensors.h"
#include "checkpoint/loaders.h"
#include "checkpoint/source_storages.h"
#include "pickle/tensor_record.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ckpt::detail {
namespace {

using pickle::Arena;
using pickle::ValueId;

// safetensors' save_model stores a tie once and records each removed name in __metadata__ as
// `removed: kept` (torch.py: `metadata[to_remove] = kept_name`), as ckptscope's export does: such a
// name comes back as a second name of the kept tensor (the same value: one storage, one view), as
// model.state_dict() has it. Only a key that names no stored tensor, pointing at one that is stored.
void addRecordedTies(Arena& a, const archive::SafetensorsFile& st, const std::vector<ValueId>& tensorOf,
                     std::vector<ValueId>& items)
{
    std::unordered_map<std::string_view, std::size_t> stored;
    for (std::size_t i = 0; i < st.tensors.size(); ++i) {
        stored.emplace(st.tensors[i].name, i);
    }
    std::unordered_set<std::string_view> added;
    for (const auto& [removed, kept] : st.metadata) {
        const auto it = stored.find(kept);
        if (removed.empty() || removed == "format" || removed.starts_with("__") || it == stored.end() ||
            stored.contains(removed) || !added.insert(removed).second) {
            continue;
        }
        items.push_back(a.str(removed));
        items.push_back(tensorOf[it->second]);
    }
}

// The tensors a safetensors header names, as a state dict of plain tensors.
Expected<void> fillSafetensors(Checkpoint& c, MemoryBudget& budget, const archive::SafetensorsFile& file);

}  // namespace

bool startsLikeSafetensors(Bytes head, std::uint64_t size)
{
    if (head.size() < 10) {
        return false;
    }
    const std::uint64_t n = loadLE(head, 0, 8);
    constexpr std::uint64_t kLongestHeader = 100'000'000;  // the safetensors crate's own limit
    return n >= 2 && n <= kLongestHeader && n <= size - 8 && std::to_integer<char>(head[8]) == '{';
}

// Reads what it can from ranges; nothing when the file is to be read whole.

Expected<void> loadSafetensors(Checkpoint& c, MemoryBudget& budget)
{
    auto st = archive::parseSafetensors(c.bytes);
    if (!st) {
        return st.error();
    }
    return fillSafetensors(c, budget, *st);
}

// Restored names are what inspect lists and convert writes. A shard of a set (`-0000i-of-0000N`) is
// no model alone: the set restores its ties (sharded/hf_set.cpp).
void restoreModelTies(Checkpoint& c)
{
    static const std::regex shardName(R"(-[0-9]{5}-of-[0-9]{5}\.safetensors$)");
    if (std::regex_search(c.path, shardName) || !c.root.valid() || c.arena[c.root].kind != pickle::Kind::Dict) {
        return;
    }
    c.modelConfig = readModelConfig(std::filesystem::path(c.path).parent_path().string());
    std::vector<ValueId> items(c.arena[c.root].items.begin(), c.arena[c.root].items.end());
    std::vector<std::string> keys;
    std::unordered_map<std::string, ValueId> valueOf;
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        keys.emplace_back(c.arena[items[i]].text);
        valueOf.emplace(keys.back(), items[i + 1]);
    }
    c.ties = tiedWeights(c.modelConfig, keys);
    if (c.ties.restored.empty()) {
        return;
    }
    for (const auto& t : c.ties.restored) {
        items.push_back(c.arena.str(t.name));
        items.push_back(valueOf.at(t.source));
    }
    c.arena[c.root].items.assign(items.begin(), items.end());
}

Expected<std::optional<source::Held>> safetensorsHeaderAt(const source::ByteSource& src, std::uint64_t start,
                                                          std::uint64_t firstBytes)
{
    const std::uint64_t size = start < src.size() ? src.size() - start : 0;
    auto first = src.read(start, std::min(size, firstBytes));
    if (!first) {
        return first.error();
    }
    if (!startsLikeSafetensors(first->bytes, size)) {
        return std::optional<source::Held>();
    }
    const std::uint64_t n = loadLE(first->bytes, 0, 8);
    if (8 + n <= first->bytes.size()) {
        first->bytes = first->bytes.first(static_cast<std::size_t>(8 + n));
        return std::optional(std::move(*first));
    }
    auto more = src.read(start, 8 + n);
    if (!more) {
        return more.error();
    }
    return std::optional(std::move(*more));
}

// A safetensors file from ranges: its length, then its header if the first read did not hold it.
Expected<RangedRead> loadSafetensorsRanged(std::shared_ptr<Checkpoint>& checkpoint, MemoryBudget& budget,
                                           std::uint64_t /*wholeLimit*/)
{
    Checkpoint& c = *checkpoint;
    auto header = safetensorsHeaderAt(*c.input, 0, kHeadBytes);
    if (!header) {
        return header.error();
    }
    if (!*header) {
        return RangedRead::NotThisFormat;
    }
    auto st = archive::parseSafetensors((*header)->bytes, c.input->size());
    if (!st) {
        return st.error();
    }
    if (auto ok = fillSafetensors(c, budget, *st); !ok) {
        return ok.error();
    }
    readThroughSource(c, std::vector<SourceStorages::Entry>(c.storages.size()));
    return RangedRead::Read;
}

namespace {

Expected<void> fillSafetensors(Checkpoint& c, MemoryBudget& budget, const archive::SafetensorsFile& file)
{
    const archive::SafetensorsFile* st = &file;
    budget.pickleBytes = st->dataStart;  // the JSON header plays the pickle's part
    c.format = Format::Safetensors;
    c.safetensorsMetadata = st->metadata;
    Arena& a = c.arena;
    std::vector<ValueId> items;
    items.reserve(st->tensors.size() * 2);
    a.storages.reserve(a.storages.size() + st->tensors.size());
    a.tensors.reserve(a.tensors.size() + st->tensors.size());
    std::vector<ValueId> tensorOf;  // the value of each stored tensor, in header order
    tensorOf.reserve(st->tensors.size());
    for (const auto& t : st->tensors) {
        pickle::StorageRef ref;
        ref.key = t.name;
        ref.location = "cpu";
        ref.dtype = t.dtype;
        ref.className = std::string(storageClassName(t.dtype));
        const std::uint32_t elem = std::max<std::uint32_t>(1, elementSize(t.dtype));
        ref.numel = (t.end - t.begin) / elem;
        a.storages.push_back(ref);
        tensorOf.push_back(
            pickle::contiguousTensor(a, static_cast<std::uint32_t>(a.storages.size() - 1), t.dtype, t.shape));
        items.push_back(a.str(t.name));
        items.push_back(tensorOf.back());
    }
    addRecordedTies(a, *st, tensorOf, items);
    c.root = a.dict(std::move(items), true);
    if (auto r = adoptStorages(c); !r) {
        return r;
    }
    for (std::size_t i = 0; i < st->tensors.size(); ++i) {
        auto& s = c.storages[StorageIndex{static_cast<std::uint32_t>(i)}];
        s.fileOffset = st->dataStart + st->tensors[i].begin;
        s.storedBytes = st->tensors[i].end - st->tensors[i].begin;
        s.present = true;
    }
    return checkStorageBytes(c);
}

}  // namespace

}  // namespace ckpt::detail
