// A Hugging Face set -> one torch zip, as torch.save(state_dict) would write it (format.md §2):
// a fresh pickle of the consolidated dict, then each storage streamed from its shard in pieces, so
// memory is one piece, not the model.
#include "archive/zip.h"
#include "pickle/pickler.h"
#include "pickle/tensor_record.h"
#include "sharded/chunks.h"
#include "sharded/consolidate_progress.h"
#include "sharded/dcp.h"
#include "sharded/sharded.h"
#include "util/dtype.h"
#include "write/output_file.h"
#include "write/targets.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <map>
#include <sys/stat.h>
#include <variant>

namespace ckpt::sharded {

namespace detail {

Expected<pickle::ValueId> shardSetPickle(const ShardedSet& set, pickle::Arena& a, std::vector<ShardStorage>& storages)
{
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint32_t> outIndex;
    std::vector<pickle::ValueId> items;
    for (const auto& t : set.tensors) {
        const TensorEntry& e = t.entry;
        if (e.form != pickle::TensorForm::Strided || !e.storage.valid()) {
            return makeError(ErrorCode::Unsupported,
                             "tensor '" + t.name + "' in " + set.shardFiles[t.shard] +
                                 " is not a plain strided tensor; consolidation writes those only");
        }
        const StorageEntry& s = t.storage;
        const auto key = std::make_pair(t.shard, static_cast<std::uint32_t>(e.storage.value()));
        auto [it, added] = outIndex.emplace(key, static_cast<std::uint32_t>(a.storages.size()));
        if (added) {
            pickle::StorageRef ref;
            ref.key = std::to_string(a.storages.size());
            ref.location = s.location;
            ref.dtype = s.dtype;
            ref.numel = s.numel;
            ref.untyped = s.dtype != e.dtype;
            if (ref.untyped) {
                ref.numel = s.nbytes;
            }
            a.storages.push_back(std::move(ref));
            storages.push_back({t.shard, e.storage, s.nbytes});
        }
        pickle::TensorInfo info;
        info.form = pickle::TensorForm::Strided;
        info.rebuild = pickle::internGlobal({"torch._utils", "_rebuild_tensor_v2"});
        info.storage = a.storage(it->second);
        info.dtype = e.dtype;
        info.storageOffset = e.storageOffset;
        info.shape = e.shape;
        info.stride = e.stride;
        info.requiresGrad = e.requiresGrad;
        items.push_back(a.str(t.name));
        items.push_back(a.tensor(std::move(info)));
    }
    return a.dict(std::move(items), true);
}

}  // namespace detail

namespace {

// One storage of the consolidated file from its shard: stored bytes go file to file
// (copy_file_range, a whole torch record keeping its CRC), others stream through.
Expected<void> writeStorage(const ShardedSet& set, const detail::ShardStorage& s, archive::ZipWriter& zw,
                            const std::string& record)
{
    auto opened = set.shard(s.shard);  // the set keeps few shards open: reopened when needed
    if (!opened) {
        return opened.error();
    }
    const Checkpoint& shard = **opened;
    const StorageEntry& se = shard.storages[s.storage];
    if (shard.file && !se.compressed && se.present) {
        const archive::FileRecord one{record, se.fileOffset, s.nbytes, wholeRecordCrc(shard, s.storage, 0, s.nbytes)};
        auto added = zw.addRecordsFromFile({&one, 1}, shard.file->fd(), detail::copyGoesOn(zw));
        if (!added) {
            return added.error();
        }
        return {};
    }
    if (auto r = zw.beginRecord(record, s.nbytes); !r) {
        return r;
    }
    if (auto r = detail::streamInto(zw, shard, s.storage, 0, s.nbytes); !r) {
        return r;
    }
    return zw.endRecord();
}

// The output must not be one of the shards (checkOutputOutsideSet said so before anything was read;
// this holds for callers that did not ask it). The shards are closed, so they are compared by the
// identity recorded when they were read, and checkTarget words the refusal.
Expected<void> checkTargetIsNoShard(const ShardedSet& set, const std::string& target)
{
    struct stat out {};
    if (::stat(target.c_str(), &out) != 0) {
        return {};
    }
    for (std::size_t i = 0; i < set.shardPaths.size(); ++i) {
        const FileIdentity& id = set.shardIdentities[i];
        if (set.shardRead(i) && id.dev == static_cast<std::uint64_t>(out.st_dev) &&
            id.ino == static_cast<std::uint64_t>(out.st_ino)) {
            Checkpoint shard;  // no mapping: checkTarget stats it by its path
            shard.path = set.shardPaths[i];
            return write::detail::checkTarget(shard, target);
        }
    }
    return {};
}

}  // namespace

namespace {

// The innermost ConsolidateProgressScope of this thread, or null.
ConsolidateProgressScope::Installed*& consolidateProgress()
{
    thread_local ConsolidateProgressScope::Installed* current = nullptr;
    return current;
}

}  // namespace

ConsolidateProgressScope::ConsolidateProgressScope(std::function<bool(const ConsolidateProgress&)> progress)
    : installed_{std::move(progress), 0}, previous_(consolidateProgress())
{
    consolidateProgress() = &installed_;
}

ConsolidateProgressScope::~ConsolidateProgressScope()
{
    consolidateProgress() = previous_;
}

namespace detail {

namespace {

// One element of `from` as float32, as Tensor.float() converts it (round to nearest for wider
// types, exact for the 16-bit floats and small integers).
float toFloat32(DType from, const std::byte* p)
{
    auto load = [p](auto v) {
        std::memcpy(&v, p, sizeof(v));
        return v;
    };
    switch (from) {
    case DType::Float64:
        return static_cast<float>(load(double{}));
    case DType::Float16:
        return static_cast<float>(halfToDouble(load(std::uint16_t{})));
    case DType::BFloat16:
        return bfloat16ToFloat(load(std::uint16_t{}));
    case DType::Int64:
        return static_cast<float>(load(std::int64_t{}));
    case DType::Int32:
        return static_cast<float>(load(std::int32_t{}));
    case DType::Int16:
        return static_cast<float>(load(std::int16_t{}));
    case DType::Int8:
        return static_cast<float>(load(std::int8_t{}));
    case DType::UInt8:
        return static_cast<float>(load(std::uint8_t{}));
    case DType::Bool:
        return load(std::uint8_t{}) != 0 ? 1.0F : 0.0F;
    default:
        return load(float{});
    }
}

}  // namespace

void castToFloat32(DType from, Bytes in, std::vector<std::byte>& out)
{
    const std::size_t inSize = std::max<std::size_t>(1, elementSize(from));
    const std::size_t n = in.size() / inSize;
    out.resize(n * sizeof(float));
    for (std::size_t i = 0; i < n; ++i) {
        const float f = toFloat32(from, in.data() + i * inSize);
        std::memcpy(out.data() + i * sizeof(float), &f, sizeof(float));
    }
}

std::uint64_t assembledBytes(const Assembled& t, const Piece& p)
{
    return t.from != t.dtype ? p.bytes / elementSize(t.from) * elementSize(t.dtype) : p.bytes;
}

namespace {

// Streams one piece into the open record, cast to float32 when its type differs, and drops the
// source pages it read from this process's resident set.
Expected<void> writePiece(archive::ZipWriter& zw, const Checkpoint& src, const Piece& p, DType from, DType to)
{
    const bool cast = from != to;
    const StorageEntry& stored = src.storages[p.storage];
    // A ZeRO rank's whole fp32 partition (one torch record) needs neither a read nor a CRC pass.
    if (!consolidationGoesOn(zw.bytesWritten())) {
        return consolidationCancelled();
    }
    if (const auto crc = wholeRecordCrc(src, p.storage, p.byteOffset, p.bytes); !cast && src.file && crc) {
        return zw.writeChunkFromFile(src.file->fd(), stored.fileOffset, p.bytes, *crc, copyGoesOn(zw));
    }
    std::vector<std::byte> converted;
    std::optional<Error> failed;
    auto streamed = src.streamStorage(p.storage, p.byteOffset, p.bytes, [&](Bytes piece) {
        if (!consolidationGoesOn(zw.bytesWritten())) {
            failed = consolidationCancelled();
            return false;
        }
        if (!cast) {
            if (auto w = zw.writeChunk(piece); !w) {
                failed = w.error();
            }
            return !failed;
        }
        // Pieces arrive in 4 MiB slices, a multiple of every element size.
        castToFloat32(from, piece, converted);
        if (auto w = zw.writeChunk(Bytes(converted.data(), converted.size())); !w) {
            failed = w.error();
        }
        return !failed;
    });
    if (failed) {
        return *failed;
    }
    if (!streamed) {
        return streamed.error();
    }
    if (!stored.compressed && stored.present && src.bytes.size() >= stored.fileOffset + p.byteOffset + p.bytes) {
        dcp::detail::releasePages(src.bytes.subspan(stored.fileOffset + p.byteOffset, p.bytes));
    }
    return {};
}

}  // namespace

bool consolidationGoesOn(std::uint64_t bytesWritten)
{
    const auto* installed = consolidateProgress();
    return installed == nullptr || !installed->progress ||
           installed->progress({bytesWritten, std::max(installed->total, bytesWritten)});
}

CopyStep copyGoesOn(const archive::ZipWriter& zw)
{
    if (consolidateProgress() == nullptr) {
        return {};
    }
    // `zw` counts a copy's bytes once it is done: the copy's own count comes on top until then.
    return [start = zw.bytesWritten(), copied = std::uint64_t{0}](std::uint64_t n) mutable {
        copied += n;
        return consolidationGoesOn(start + copied);
    };
}

void expectConsolidated(std::uint64_t bytes)
{
    if (auto* installed = consolidateProgress()) {
        installed->total = bytes;
    }
}

Error consolidationCancelled()
{
    return makeError(ErrorCode::Cancelled, "consolidation cancelled; nothing was written");
}

Expected<AssembledPickle> assembledPickle(const std::vector<Assembled>& tensors, pickle::Arena& a)
{
    std::vector<std::uint32_t> storageOf(tensors.size());
    std::vector<std::size_t> recorded;  // tensors with a storage record of their own, in storage order
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        if (tensors[i].aliasOf || tensors[i].value) {
            continue;
        }
        pickle::StorageRef ref;
        ref.key = std::to_string(a.storages.size());
        ref.location = "cpu";
        ref.dtype = tensors[i].dtype;
        ref.numel = numelOf(tensors[i].shape);
        storageOf[i] = static_cast<std::uint32_t>(a.storages.size());
        a.storages.push_back(std::move(ref));
        recorded.push_back(i);
    }
    // Nested dicts by Assembled::parents, each level in first-use order: indices, never
    // references, since `levels` grows while it is filled.
    struct Level {
        std::vector<std::pair<std::string, std::variant<pickle::ValueId, std::size_t>>> entries;
        std::map<std::string, std::size_t, std::less<>> child;
    };
    std::vector<Level> levels(1);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const auto& t = tensors[i];
        if (t.storageOnly) {
            continue;
        }
        std::size_t level = 0;
        for (const auto& p : t.parents) {
            auto it = levels[level].child.find(p);
            if (it == levels[level].child.end()) {
                levels.emplace_back();
                const std::size_t made = levels.size() - 1;
                levels[level].entries.emplace_back(p, made);
                it = levels[level].child.emplace(p, made).first;
            }
            level = it->second;
        }
        if (t.value) {
            levels[level].entries.emplace_back(t.name, t.value(a));
            continue;
        }
        const std::size_t own = t.aliasOf.value_or(i);
        if (own >= tensors.size() || tensors[own].aliasOf || tensors[own].value ||
            t.aliasOffset + numelOf(t.shape) > numelOf(tensors[own].shape)) {
            return makeError(ErrorCode::Internal, "tensor '" + t.name + "' aliases no stored tensor");
        }
        // An alias may view the same elements in another shape.
        levels[level].entries.emplace_back(t.name,
                                           pickle::contiguousTensor(a, storageOf[own], tensors[own].dtype, t.shape,
                                                                    static_cast<std::int64_t>(t.aliasOffset)));
    }
    // Children always come after their parent in `levels`: build the dicts from the last one up.
    std::vector<pickle::ValueId> built(levels.size());
    for (std::size_t l = levels.size(); l-- > 0;) {
        std::vector<pickle::ValueId> items;
        for (const auto& [key, value] : levels[l].entries) {
            items.push_back(a.str(key));
            items.push_back(std::holds_alternative<pickle::ValueId>(value) ? std::get<pickle::ValueId>(value)
                                                                           : built[std::get<std::size_t>(value)]);
        }
        built[l] = a.dict(std::move(items), true);
    }
    return AssembledPickle{built.front(), std::move(recorded)};
}

Expected<ConsolidateResult> writeAssembled(const std::vector<Assembled>& tensors, const MemberCheckpoints& sources,
                                           const std::string& outPath)
{
    auto target = write::resolveTarget(outPath);
    if (!target) {
        return target.error();
    }
    if (auto r = sources.checkNotMember(*target); !r) {
        return r.error();
    }
    pickle::Arena a;
    auto built = assembledPickle(tensors, a);
    if (!built) {
        return built.error();
    }
    const std::vector<std::size_t>& recorded = built->recorded;
    const pickle::ValueId root = built->root;
    auto pickled = pickle::picklePersistent(a, root);
    if (!pickled) {
        return pickled.error();
    }
    auto size = writeTorchArchive(
        *target, *pickled, recorded.size(), storageBytes(a),
        [&](archive::ZipWriter& zw, std::size_t k, const std::string& record) -> Expected<void> {
            const auto& t = tensors[recorded[k]];
            std::uint64_t bytes = 0;
            for (const auto& p : t.pieces) {
                bytes += assembledBytes(t, p);
            }
            if (auto r = zw.beginRecord(record, bytes); !r) {
                return r;
            }
            for (const auto& p : t.pieces) {
                auto src = sources.get(p.source);  // reopened when the cache let it go (members.h)
                if (!src) {
                    return src.error();
                }
                if (auto r = writePiece(zw, **src, p, t.from, t.dtype); !r) {
                    return r;
                }
            }
            return zw.endRecord();
        },
        [&]() { return sources.checkUnchanged(); });
    if (!size) {
        return size.error();
    }
    const auto written =
        std::count_if(tensors.begin(), tensors.end(), [](const Assembled& t) { return !t.value && !t.storageOnly; });
    return ConsolidateResult{*target, *size, static_cast<std::size_t>(written), sources.size()};
}

}  // namespace detail

Expected<void> checkConsolidatable(const ShardedSet& set)
{
    if (!set.complete()) {
        return detail::incomplete("the set is incomplete", set.findings, set.indexPath);
    }
    return {};
}

Expected<ConsolidateResult> consolidateTorch(const ShardedSet& set, const std::string& outPath)
{
    if (auto whole = checkConsolidatable(set); !whole) {
        return whole.error();
    }
    auto target = write::resolveTarget(outPath);
    if (!target) {
        return target.error();
    }
    if (auto r = checkTargetIsNoShard(set, *target); !r) {
        return r.error();
    }
    pickle::Arena arena;
    std::vector<detail::ShardStorage> storages;
    auto root = detail::shardSetPickle(set, arena, storages);
    if (!root) {
        return root.error();
    }
    auto pickled = pickle::picklePersistent(arena, *root);
    if (!pickled) {
        return pickled.error();
    }
    auto size = detail::writeTorchArchive(
        *target, *pickled, storages.size(), detail::storageBytes(arena),
        [&](archive::ZipWriter& zw, std::size_t i, const std::string& record) {
            return writeStorage(set, storages[i], zw, record);
        },
        [&]() -> Expected<void> { return set.checkUnchanged(); });
    if (!size) {
        return size.error();
    }
    return ConsolidateResult{*target, *size, set.tensors.size(), set.shardFiles.size(), {}, set.ties};
}

}  // namespace ckpt::sharded
