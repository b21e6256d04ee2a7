// A Hugging Face set -> one torch zip, as torch.save(state_dict) would write it (format.md §2):
// a fresh pickle of the consolidated dict, then each storage streamed from its shard in pieces, so
// memory is one piece, not the model.
#include "archive/zip.h"
#include "pickle/pickler.h"
#include "sharded/sharded.h"
#include "write/output_file.h"
#include "write/targets.h"

#include <filesystem>
#include <map>

namespace ckpt::sharded {

namespace {

struct OutStorage {
    std::uint32_t shard;
    StorageIndex storage;
    std::uint64_t nbytes;
};

// The consolidated pickle: an OrderedDict of plain tensors, storages keyed 0..n-1 in first use.
// Views of one storage inside a shard (tied weights in a .bin shard) keep sharing it.
Expected<pickle::ValueId> buildPickle(const ShardedSet& set, pickle::Arena& a, std::vector<OutStorage>& storages)
{
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint32_t> outIndex;
    std::vector<pickle::ValueId> items;
    for (const auto& t : set.tensors) {
        const TensorEntry& e = set.entry(t);
        const Checkpoint& c = *set.shards[t.shard];
        if (e.form != pickle::TensorForm::Strided || !e.storage.valid()) {
            return makeError(ErrorCode::Unsupported,
                             "tensor '" + t.name + "' in " + set.shardFiles[t.shard] +
                                 " is not a plain strided tensor; consolidation writes those only");
        }
        const StorageEntry& s = c.storages[e.storage];
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

std::string archiveFolderFor(const std::string& outPath)
{
    std::string base = std::filesystem::path(outPath).filename().string();
    const auto dot = base.rfind('.');
    if (dot != std::string::npos) {
        base.erase(dot);
    }
    return base.empty() ? std::string("archive") : base;
}

Expected<void> writeArchive(const ShardedSet& set, const std::string& pickleBytes,
                            const std::vector<OutStorage>& storages, const std::string& target, int fd)
{
    const std::string folder = archiveFolderFor(target);
    archive::ZipWriter zw(fd);
    if (auto r = zw.addRecord(folder + "/data.pkl", asBytes(pickleBytes)); !r) {
        return write::detail::onTarget(r.error(), target);
    }
    if (auto r = zw.addRecord(folder + "/byteorder", asBytes("little")); !r) {
        return write::detail::onTarget(r.error(), target);
    }
    for (std::size_t i = 0; i < storages.size(); ++i) {
        const auto& s = storages[i];
        const Checkpoint& shard = *set.shards[s.shard];
        const StorageEntry& se = shard.storages[s.storage];
        if (shard.file && !se.compressed && se.present) {
            // Stored bytes go file to file (copy_file_range); a whole torch record keeps its CRC.
            std::optional<std::uint32_t> crc;
            if (shard.format == Format::TorchZip && !se.record.empty() && se.storedBytes == s.nbytes) {
                crc = se.crc32;
            }
            if (auto r = zw.addRecordFromFile(folder + "/data/" + std::to_string(i), shard.file->fd(), se.fileOffset,
                                              s.nbytes, crc);
                !r) {
                return write::detail::onTarget(r.error(), target);
            }
            continue;
        }
        if (auto r = zw.beginRecord(folder + "/data/" + std::to_string(i), s.nbytes); !r) {
            return write::detail::onTarget(r.error(), target);
        }
        Error failed;
        bool ok = true;
        auto streamed = set.shards[s.shard]->streamStorage(s.storage, 0, s.nbytes, [&](Bytes piece) {
            auto w = zw.writeChunk(piece);
            if (!w) {
                failed = w.error();
                ok = false;
            }
            return ok;
        });
        if (!ok) {
            return write::detail::onTarget(failed, target);
        }
        if (!streamed) {
            return streamed.error();
        }
        if (auto r = zw.endRecord(); !r) {
            return write::detail::onTarget(r.error(), target);
        }
    }
    if (auto r = zw.addRecord(folder + "/version", asBytes("3\n")); !r) {
        return write::detail::onTarget(r.error(), target);
    }
    if (auto r = zw.finish(); !r) {
        return write::detail::onTarget(r.error(), target);
    }
    return {};
}

}  // namespace

namespace detail {

Expected<ConsolidateResult> writeAssembled(const std::vector<Assembled>& tensors,
                                           const std::vector<CheckpointPtr>& sources, const std::string& outPath)
{
    auto target = write::resolveTarget(outPath);
    if (!target) {
        return target.error();
    }
    for (const auto& s : sources) {
        if (auto r = write::detail::checkTarget(*s, *target); !r) {
            return r.error();
        }
    }
    pickle::Arena a;
    std::vector<pickle::ValueId> items;
    for (const auto& t : tensors) {
        std::uint64_t numel = 1;
        for (const auto d : t.shape) {
            numel *= static_cast<std::uint64_t>(d);
        }
        pickle::StorageRef ref;
        ref.key = std::to_string(a.storages.size());
        ref.location = "cpu";
        ref.dtype = t.dtype;
        ref.numel = numel;
        a.storages.push_back(std::move(ref));
        pickle::TensorInfo info;
        info.rebuild = pickle::internGlobal({"torch._utils", "_rebuild_tensor_v2"});
        info.storage = a.storage(static_cast<std::uint32_t>(a.storages.size() - 1));
        info.dtype = t.dtype;
        info.shape = t.shape;
        std::int64_t stride = 1;
        info.stride.assign(t.shape.size(), 1);
        for (std::size_t d = t.shape.size(); d-- > 0;) {
            info.stride[d] = stride;
            stride *= std::max<std::int64_t>(t.shape[d], 1);
        }
        items.push_back(a.str(t.name));
        items.push_back(a.tensor(std::move(info)));
    }
    const pickle::ValueId root = a.dict(std::move(items), true);
    auto pickled = pickle::picklePersistent(a, root);
    if (!pickled) {
        return pickled.error();
    }
    auto out = write::detail::OutputFile::create(*target, write::Durability::Lazy);
    if (!out) {
        return out.error();
    }
    const std::string folder = archiveFolderFor(*target);
    archive::ZipWriter zw(out->fd());
    auto fail = [&](const Error& e) { return write::detail::onTarget(e, *target); };
    if (auto r = zw.addRecord(folder + "/data.pkl", asBytes(*pickled)); !r) {
        return fail(r.error());
    }
    if (auto r = zw.addRecord(folder + "/byteorder", asBytes("little")); !r) {
        return fail(r.error());
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        std::uint64_t size = 0;
        for (const auto& p : tensors[i].pieces) {
            size += p.bytes;
        }
        if (auto r = zw.beginRecord(folder + "/data/" + std::to_string(i), size); !r) {
            return fail(r.error());
        }
        for (const auto& p : tensors[i].pieces) {
            std::optional<Error> failed;
            auto streamed = sources[p.source]->streamStorage(p.storage, p.byteOffset, p.bytes, [&](Bytes piece) {
                if (auto w = zw.writeChunk(piece); !w) {
                    failed = w.error();
                }
                return !failed;
            });
            if (failed) {
                return fail(*failed);
            }
            if (!streamed) {
                return streamed.error();
            }
        }
        if (auto r = zw.endRecord(); !r) {
            return fail(r.error());
        }
    }
    if (auto r = zw.addRecord(folder + "/version", asBytes("3\n")); !r) {
        return fail(r.error());
    }
    if (auto r = zw.finish(); !r) {
        return fail(r.error());
    }
    for (const auto& s : sources) {
        if (auto r = s->checkUnchanged(); !r) {
            return r.error();
        }
    }
    if (auto r = out->commit(); !r) {
        return r.error();
    }
    std::error_code ec;
    const auto size = std::filesystem::file_size(*target, ec);
    return ConsolidateResult{*target, ec ? 0 : size, tensors.size()};
}

}  // namespace detail

Expected<ConsolidateResult> consolidateTorch(const ShardedSet& set, const std::string& outPath)
{
    if (!set.complete()) {
        std::string codes;
        for (const auto& f : set.findings) {
            codes += f.severity == "error" ? (codes.empty() ? "" : ", ") + f.code : "";
        }
        Error e = makeError(ErrorCode::Corrupt,
                            "the set is incomplete (" + codes + "; see `ckptscope check`): nothing was written");
        e.path = set.indexPath;
        return e;
    }
    auto target = write::resolveTarget(outPath);
    if (!target) {
        return target.error();
    }
    for (const auto& shard : set.shards) {
        if (auto r = write::detail::checkTarget(*shard, *target); !r) {
            return r.error();
        }
    }
    pickle::Arena arena;
    std::vector<OutStorage> storages;
    auto root = buildPickle(set, arena, storages);
    if (!root) {
        return root.error();
    }
    auto pickled = pickle::picklePersistent(arena, *root);
    if (!pickled) {
        return pickled.error();
    }
    auto out = write::detail::OutputFile::create(*target, write::Durability::Lazy);
    if (!out) {
        return out.error();
    }
    if (auto r = writeArchive(set, *pickled, storages, *target, out->fd()); !r) {
        return r.error();
    }
    for (const auto& shard : set.shards) {
        if (auto r = shard->checkUnchanged(); !r) {
            return r.error();
        }
    }
    if (auto r = out->commit(); !r) {
        return r.error();
    }
    std::error_code ec;
    const auto size = std::filesystem::file_size(*target, ec);
    return ConsolidateResult{*target, ec ? 0 : size, set.tensors.size()};
}

}  // namespace ckpt::sharded
