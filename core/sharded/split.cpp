// A state dict -> a Hugging Face sharded set. The split follows huggingface_hub
// serialization/_base.py `split_state_dict_into_shards_factory`; each shard is a sub-plan of the
// caller's plan (the same tensors, storages renumbered), so the torch and safetensors writers do
// the bytes exactly as for a single file.
#include "sharded/split.h"

#include "sharded/out_dir.h"
#include "util/tied_pairs.h"
#include "write/output_file.h"
#include "write/targets.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace ckpt::sharded {

namespace fs = std::filesystem;

namespace {

// One key of the state dict: its name and tensor value in the plan's arena, and the output
// storage it reads.
struct Entry {
    pickle::ValueId key;
    pickle::ValueId value;
    std::string name;
    std::uint32_t storage = 0;
};

Expected<std::vector<Entry>> entriesOf(const transform::Plan& plan)
{
    const pickle::Arena& a = plan.arena;
    const pickle::Value& root = a[plan.root];
    if (root.kind != pickle::Kind::Dict) {
        return makeError(ErrorCode::Usage, "a sharded set holds a flat state dict, and the root is not a dict; "
                                           "choose it with --select (or --single-card)");
    }
    std::vector<Entry> out;
    for (std::size_t i = 0; i + 1 < root.items.size(); i += 2) {
        const pickle::Value& k = a[root.items[i]];
        const pickle::Value& v = a[root.items[i + 1]];
        if (k.kind != pickle::Kind::Str) {
            return makeError(ErrorCode::Usage, "a sharded set's keys are strings; the root dict has another key");
        }
        if (v.kind != pickle::Kind::Tensor) {
            return makeError(ErrorCode::Usage, "'" + k.text +
                                                   "' is not a tensor: a sharded set holds a flat state dict of "
                                                   "tensors; leave it out with --drop, or choose the weights with "
                                                   "--select / --single-card");
        }
        const pickle::TensorInfo& t = pickle::tensorOf(a, root.items[i + 1]);
        if (t.form != pickle::TensorForm::Strided || !t.storage.valid()) {
            return makeError(ErrorCode::Unsupported,
                             "'" + k.text + "' is not a plain strided tensor; a sharded set holds those only");
        }
        out.push_back({root.items[i], root.items[i + 1], k.text, static_cast<std::uint32_t>(a[t.storage].i)});
    }
    if (out.empty()) {
        return makeError(ErrorCode::Usage, "the state dict holds no tensors: there is nothing to shard");
    }
    return out;
}

// safetensors cannot alias: views identical to another (tied weights) are left out, and the
// removed name is recorded against the kept one, keptTiedName's choice (the input
// embedding of a known tied head, else the sorted-first as safetensors' _remove_duplicate_names
// and the hub's save_torch_state_dict keep).
std::vector<Entry> removeTied(const transform::Plan& plan, std::vector<Entry> entries,
                              std::vector<std::pair<std::string, std::string>>& tied)
{
    using View = std::tuple<std::uint32_t, std::int64_t, std::vector<std::int64_t>, std::vector<std::int64_t>, int>;
    auto viewOf = [&](const Entry& e) {
        const auto& t = pickle::tensorOf(plan.arena, e.value);
        return View{e.storage, t.storageOffset, t.shape, t.stride, static_cast<int>(t.dtype)};
    };
    std::map<View, std::vector<std::string>> namesByView;
    for (const auto& e : entries) {
        if (plan.storages[e.storage].nbytes != 0) {
            namesByView[viewOf(e)].push_back(e.name);
        }
    }
    std::map<std::string, std::string> removed;
    for (auto& [view, names] : namesByView) {
        if (names.size() < 2) {
            continue;
        }
        const std::string keep = keptTiedName(names);
        for (auto& n : names) {
            if (n != keep) {
                removed.emplace(std::move(n), keep);
            }
        }
    }
    std::vector<Entry> out;
    for (auto& e : entries) {
        if (auto it = removed.find(e.name); it != removed.end()) {
            tied.emplace_back(it->first, it->second);
        } else {
            out.push_back(std::move(e));
        }
    }
    return out;
}

// huggingface_hub's greedy rule, in key order: a tensor over the limit gets a shard of its own;
// otherwise the shard closes when the tensor would tip it over. A tensor whose storage was seen
// joins that storage's shard after the others and is not counted again.
std::vector<std::vector<std::size_t>> greedySplit(const transform::Plan& plan, const std::vector<Entry>& entries,
                                                  std::uint64_t maxBytes, std::uint64_t& total)
{
    std::vector<std::vector<std::size_t>> shards;
    std::vector<std::size_t> current;
    std::uint64_t currentSize = 0;
    std::map<std::uint32_t, std::vector<std::size_t>> byStorage;
    for (std::size_t i = 0; i < entries.size(); ++i) {
        auto [it, fresh] = byStorage.try_emplace(entries[i].storage);
        it->second.push_back(i);
        if (!fresh) {
            continue;
        }
        const std::uint64_t size = plan.storages[entries[i].storage].nbytes;
        total += size;
        if (size > maxBytes) {
            shards.push_back({i});
            continue;
        }
        if (currentSize + size > maxBytes && !current.empty()) {
            shards.push_back(std::move(current));
            current.clear();
            currentSize = 0;
        }
        current.push_back(i);
        currentSize += size;
    }
    if (!current.empty()) {
        shards.push_back(std::move(current));
    }
    for (auto& shard : shards) {
        std::vector<std::size_t> joined;
        for (const std::size_t i : shard) {
            const auto& group = byStorage[entries[i].storage];
            if (group.front() == i) {
                joined.insert(joined.end(), group.begin() + 1, group.end());
            }
        }
        shard.insert(shard.end(), joined.begin(), joined.end());
    }
    return shards;
}

// The shard as a plan of its own: the caller's arena with a root of this shard's keys and only
// the storages they read, renumbered from 0 (their keys stay, so records keep their names).
transform::Plan subPlan(const transform::Plan& plan, const std::vector<Entry>& entries,
                        const std::vector<std::size_t>& shard)
{
    transform::Plan sub;
    sub.options = plan.options;
    sub.arena = plan.arena;
    sub.arena.storages.clear();
    std::map<std::uint32_t, std::uint32_t> renumbered;
    std::vector<pickle::ValueId> items;
    for (const std::size_t i : shard) {
        const Entry& e = entries[i];
        auto [it, fresh] = renumbered.emplace(e.storage, static_cast<std::uint32_t>(sub.storages.size()));
        if (fresh) {
            sub.storages.push_back(plan.storages[e.storage]);
            sub.arena.storages.push_back(plan.arena.storages[e.storage]);
        }
        const pickle::ValueId storageValue = pickle::tensorOf(plan.arena, e.value).storage;
        sub.arena[storageValue].i = it->second;
        items.push_back(e.key);
        items.push_back(e.value);
    }
    sub.tensorCount = shard.size();
    sub.root = sub.arena.dict(std::move(items), plan.arena[plan.root].flag);
    return sub;
}

Expected<void> writeIndex(const std::string& path, std::uint64_t total,
                          const std::vector<std::pair<std::string, std::string>>& tied,
                          const std::map<std::string, std::string>& weightMap)
{
    // transformers and the hub write json.dumps(index, indent=2, sort_keys=True) + "\n".
    nlohmann::json index;
    index["metadata"] = {{"total_size", total}};
    for (const auto& [removed, kept] : tied) {
        index["metadata"][removed] = kept;
    }
    index["weight_map"] = nlohmann::json::object();
    for (const auto& [name, file] : weightMap) {
        index["weight_map"][name] = file;
    }
    std::ofstream out(path, std::ios::binary);
    out << index.dump(2) << '\n';
    out.close();
    if (!out) {
        return write::detail::writeError(path, "cannot write the index", errno);
    }
    return {};
}

}  // namespace

Expected<std::uint64_t> parseShardSize(std::string_view text)
{
    const std::string s(text);
    std::size_t used = 0;
    double number = 0;
    try {
        number = std::stod(s, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    std::string unit = s.substr(used);
    std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
    static const std::map<std::string, double> kUnits{
        {"", 1},      {"b", 1},        {"kb", 1e3},        {"mb", 1e6},           {"gb", 1e9},
        {"tb", 1e12}, {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
    };
    const auto it = kUnits.find(unit);
    if (used == 0 || it == kUnits.end() || !std::isfinite(number) || number * it->second < 1 ||
        number * it->second > 1e18 || s.front() == '-' || s.front() == '+') {
        return makeError(ErrorCode::Usage, "--shard-size '" + s +
                                               "' is not a size: give bytes or a number with KB, MB, GB, TB "
                                               "(powers of 1000, as the hub) or KiB, MiB, GiB, TiB");
    }
    return static_cast<std::uint64_t>(number * it->second);
}

std::string shardFileName(bool safetensors, std::size_t i, std::size_t count)
{
    const std::string stem = safetensors ? "model" : "pytorch_model";
    const std::string ext = safetensors ? ".safetensors" : ".bin";
    if (count == 1) {
        return stem + ext;
    }
    std::array<char, 32> buf{};
    std::snprintf(buf.data(), buf.size(), "-%05zu-of-%05zu", i + 1, count);
    return stem + buf.data() + ext;
}

Expected<SplitResult> writeShardedSet(const Checkpoint& in, const transform::Plan& plan, const std::string& outDir,
                                      const SplitOptions& options)
{
    const bool st = plan.options.format == transform::OutputFormat::Safetensors;
    auto entries = entriesOf(plan);
    if (!entries) {
        Error e = entries.error();
        e.path = in.path;
        return e;
    }
    SplitResult result;
    result.dir = outDir;
    const std::vector<Entry> all = *entries;
    if (st) {
        *entries = removeTied(plan, std::move(*entries), result.tied);
    }
    std::vector<std::vector<std::size_t>> shards = greedySplit(plan, *entries, options.maxShardBytes, result.totalSize);
    if (shards.size() == 1) {
        // One file and no index: the safetensors writer itself stores tied names once and
        // records them in the file's __metadata__, where the hub puts them for a single file.
        *entries = all;
        shards.front().resize(all.size());
        for (std::size_t i = 0; i < all.size(); ++i) {
            shards.front()[i] = i;
        }
    }

    const fs::path dir(outDir);
    auto exists = detail::checkTargetDir(dir, st ? "model" : "pytorch_model", st ? ".safetensors" : ".bin");
    if (!exists) {
        return exists.error();
    }
    auto tmp = detail::TempDir::create(dir);
    if (!tmp) {
        return tmp.error();
    }
    std::map<std::string, std::string> weightMap;
    std::uint64_t shardsDone = 0;  // bytes of the shards already written
    for (std::size_t s = 0; s < shards.size(); ++s) {
        const std::string name = shardFileName(st, s, shards.size());
        const transform::Plan sub = subPlan(plan, *entries, shards[s]);
        std::function<void(const write::WriteProgress&)> progress;
        if (options.progress) {
            progress = [&](const write::WriteProgress& p) {
                const std::uint64_t done = shardsDone + p.bytesDone;
                options.progress({done, std::max(done, result.totalSize), name});
            };
        }
        auto written =
            write::writeCheckpoint(in, sub, (fs::path(tmp->path()) / name).string(), progress, {}, options.write);
        if (!written) {
            Error e = written.error();
            if (e.code == ErrorCode::WriteFailed || e.code == ErrorCode::Cancelled) {
                e.path = (dir / name).string();
            }
            return e;
        }
        for (auto& n : written->notes) {
            result.notes.push_back(name + ": " + n);
        }
        for (const std::size_t i : shards[s]) {
            weightMap[(*entries)[i].name] = name;
        }
        result.files.push_back(name);
        result.tensors += shards[s].size();
        shardsDone += written->bytes;
    }
    std::vector<std::string> files = result.files;
    if (shards.size() > 1) {
        result.index = (st ? "model.safetensors" : "pytorch_model.bin") + std::string(".index.json");
        if (auto ok =
                writeIndex((fs::path(tmp->path()) / result.index).string(), result.totalSize, result.tied, weightMap);
            !ok) {
            return ok.error();
        }
        files.push_back(result.index);
    }
    if (auto same = in.checkUnchanged(); !same) {
        return same.error();
    }
    if (auto moved = detail::moveInto(*tmp, dir, *exists, files); !moved) {
        return moved.error();
    }
    if (*exists) {
        std::error_code ec;
        fs::remove(tmp->path(), ec);
    }
    tmp->release();
    return result;
}

}  // namespace ckpt::sharded
