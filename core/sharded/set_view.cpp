#include "sharded/set_view.h"

#include "checkpoint/index.h"
#include "checkpoint/loaders.h"
#include "sharded/chunks.h"
#include "sharded/formats.h"

#include <algorithm>
#include <map>
#include <utility>

namespace ckpt::sharded {

namespace {

// Bytes [offset, offset + length) of a member's storage as a span of its file, when they are in its
// mapping as they are; with the zip's CRC when they are its whole record.
std::optional<StorageSource::FileSpan> spanOf(const CheckpointPtr& member, StorageIndex storage, std::uint64_t offset,
                                              std::uint64_t length)
{
    const StorageEntry& se = member->storages[storage];
    if (!member->file || !se.inMapping() || offset > se.nbytes || length > se.nbytes - offset) {
        return std::nullopt;
    }
    return StorageSource::FileSpan{member, se.fileOffset + offset, wholeRecordCrc(*member, storage, offset, length)};
}

// The Hugging Face view's bytes: each storage one storage of one shard, streamed from it.
class ShardStorages final : public StorageSource {
public:
    ShardStorages(std::shared_ptr<const ShardedSet> set, std::vector<detail::ShardStorage> storages)
        : set_(std::move(set)), storages_(std::move(storages))
    {
    }
    Expected<void> stream(StorageIndex storage, std::uint64_t offset, std::uint64_t length,
                          const std::function<bool(Bytes)>& sink, std::size_t chunk) const override
    {
        const auto& s = storages_.at(storage.value());
        auto shard = set_->shard(s.shard);  // reopened when the set's cache let it go
        if (!shard) {
            return shard.error();
        }
        return (*shard)->streamStorage(s.storage, offset, length, sink, chunk);
    }
    [[nodiscard]] Expected<void> checkUnchanged() const override { return set_->checkUnchanged(); }
    [[nodiscard]] std::optional<FileSpan> fileSpan(StorageIndex storage) const override
    {
        const auto& s = storages_.at(storage.value());
        auto shard = set_->shard(s.shard);
        return shard ? spanOf(*shard, s.storage, 0, s.nbytes) : std::nullopt;
    }

private:
    std::shared_ptr<const ShardedSet> set_;
    std::vector<detail::ShardStorage> storages_;
};

// An assembled view's bytes: a storage's pieces of member checkpoints end to end, each cast to
// float32 where the tensor's pieces are of another type (ZeRO's bf16 buffers, as .float() does).
class PieceStorages final : public StorageSource {
public:
    PieceStorages(std::vector<detail::Assembled> tensors, std::vector<std::size_t> recorded, MemberCheckpoints sources)
        : tensors_(std::move(tensors)), recorded_(std::move(recorded)), sources_(std::move(sources))
    {
    }
    Expected<void> stream(StorageIndex storage, std::uint64_t offset, std::uint64_t length,
                          const std::function<bool(Bytes)>& sink, std::size_t chunk) const override
    {
        const auto& t = tensors_.at(recorded_.at(storage.value()));
        const bool cast = t.from != t.dtype;
        const std::uint64_t inSize = std::max<std::uint64_t>(1, elementSize(t.from));
        const std::uint64_t outSize = std::max<std::uint64_t>(1, elementSize(t.dtype));
        if (cast && (offset % outSize != 0 || length % outSize != 0)) {
            return makeError(ErrorCode::Internal, "a cast storage is read in whole elements only");
        }
        const std::uint64_t end = offset + length;
        std::uint64_t at = 0;  // where the piece starts in the storage
        for (const auto& p : t.pieces) {
            const std::uint64_t size = detail::assembledBytes(t, p);
            if (at + size <= offset || at >= end) {
                at += size;
                continue;
            }
            const std::uint64_t lo = std::max(offset, at) - at;
            const std::uint64_t hi = std::min(end, at + size) - at;
            auto src = sources_.get(p.source);  // reopened when the cache let it go (members.h)
            if (!src) {
                return src.error();
            }
            auto read =
                cast ? streamCast(**src, p, t.from, lo / outSize * inSize, (hi - lo) / outSize * inSize, sink, chunk)
                     : (*src)->streamStorage(p.storage, p.byteOffset + lo, hi - lo, sink, chunk);
            if (!read) {
                return read;
            }
            at += size;
        }
        if (at < end) {
            // A tensor of an incomplete set: its partitions in rank files that are missing.
            return makeError(ErrorCode::Truncated, "bytes " + std::to_string(std::max(offset, at)) + ".." +
                                                       std::to_string(end) + " of '" + t.name +
                                                       "' are in rank files that are missing or unreadable");
        }
        return {};
    }
    [[nodiscard]] Expected<void> checkUnchanged() const override { return sources_.checkUnchanged(); }
    [[nodiscard]] std::optional<FileSpan> fileSpan(StorageIndex storage) const override
    {
        const auto& t = tensors_.at(recorded_.at(storage.value()));
        if (t.from != t.dtype || t.pieces.size() != 1) {
            return std::nullopt;
        }
        const auto& p = t.pieces.front();
        auto src = sources_.get(p.source);
        return src ? spanOf(*src, p.storage, p.byteOffset, p.bytes) : std::nullopt;
    }

private:
    // Bytes [from, from + length) of a piece, each element cast to float32. Pieces arrive in slices
    // that are a multiple of every element size (Checkpoint::streamStorage's chunks).
    static Expected<void> streamCast(const Checkpoint& src, const detail::Piece& p, DType type, std::uint64_t from,
                                     std::uint64_t length, const std::function<bool(Bytes)>& sink, std::size_t chunk)
    {
        const std::size_t inSize = std::max<std::size_t>(1, elementSize(type));
        std::vector<std::byte> converted;
        return src.streamStorage(
            p.storage, p.byteOffset + from, length,
            [&](Bytes piece) {
                detail::castToFloat32(type, piece, converted);
                return sink(Bytes(converted.data(), converted.size()));
            },
            std::max<std::size_t>(inSize, chunk / sizeof(float) * inSize));
    }

    std::vector<detail::Assembled> tensors_;
    std::vector<std::size_t> recorded_;
    MemberCheckpoints sources_;
};

// An incomplete set's listing view: there are no bytes to read, and each read says why.
class RefusedStorages final : public StorageSource {
public:
    explicit RefusedStorages(Error why) : why_(std::move(why)) {}
    Expected<void> stream(StorageIndex /*storage*/, std::uint64_t /*offset*/, std::uint64_t /*length*/,
                          const std::function<bool(Bytes)>& /*sink*/, std::size_t /*chunk*/) const override
    {
        return why_;
    }
    [[nodiscard]] Expected<void> checkUnchanged() const override { return {}; }

private:
    Error why_;
};

}  // namespace

Expected<CheckpointPtr> detail::finishView(std::shared_ptr<Checkpoint> c, const std::vector<std::uint64_t>& nbytes,
                                           std::shared_ptr<const StorageSource> source)
{
    c->format = Format::TorchZip;  // what the set's consolidation writes
    c->archiveFolder = "archive";
    c->pickleProtocol = 2;
    if (auto r = ckpt::detail::adoptStorages(*c); !r) {
        return r.error();
    }
    for (std::size_t i = 0; i < c->storages.size() && i < nbytes.size(); ++i) {
        auto& s = c->storages[StorageIndex{static_cast<std::uint32_t>(i)}];
        s.nbytes = nbytes[i];
        s.storedBytes = nbytes[i];
        s.present = true;
        s.assembled = true;
    }
    c->source = std::move(source);
    if (auto r = ckpt::detail::buildIndex(*c); !r) {
        return r.error();
    }
    return CheckpointPtr(std::move(c));
}

Expected<CheckpointPtr> viewOf(const ShardedSet& set)
{
    auto c = std::make_shared<Checkpoint>();
    std::vector<detail::ShardStorage> storages;
    auto root = detail::shardSetPickle(set, c->arena, storages);
    if (!root) {
        return root.error();
    }
    c->root = *root;
    c->path = set.dir;
    c->setFiles = set.shardFiles;
    c->setMembers = memberFiles({set.kind, set.dir, set.indexPath, ""});
    c->modelConfig = set.config;  // its ties are the set's findings; its quantization_config is the view's
    // The names restored are rows of the view (set.tensors); a conversion's plan says so as for a file.
    c->ties = set.ties;
    std::vector<std::uint64_t> nbytes;
    for (const auto& s : storages) {
        nbytes.push_back(s.nbytes);
        c->fileSize += s.nbytes;
    }
    return detail::finishView(
        std::move(c), nbytes,
        std::make_shared<const ShardStorages>(std::make_shared<const ShardedSet>(set), std::move(storages)));
}

Expected<std::vector<CheckpointPtr>> partsOf(const ShardedSet& set)
{
    if (auto whole = checkConsolidatable(set); !whole) {
        return whole.error();
    }
    const auto shared = std::make_shared<const ShardedSet>(set);
    std::vector<CheckpointPtr> parts;
    for (std::size_t i = 0; i < set.shardFiles.size(); ++i) {
        auto read = set.files ? set.shard(i) : set.readShard(i);
        if (!read) {
            return read.error();
        }
        if (set.files) {
            parts.push_back(std::move(*read));  // a remote shard holds no descriptor
            continue;
        }
        auto part = std::const_pointer_cast<Checkpoint>(*read);  // read for this part alone
        std::vector<detail::ShardStorage> storages;
        for (std::uint32_t k = 0; k < part->storages.size(); ++k) {
            auto& se = part->storages[StorageIndex{k}];
            storages.push_back({static_cast<std::uint32_t>(i), StorageIndex{k}, se.nbytes});
            se.assembled = se.present;
        }
        part->source = std::make_shared<const ShardStorages>(shared, std::move(storages));
        part->bytes = {};
        // Its descriptor and mapping, held by the file and by the source it was read through: the
        // set's cache reopens the shard to read.
        part->file.reset();
        part->input.reset();
        parts.push_back(std::move(part));
    }
    return parts;
}

Expected<CheckpointPtr> viewOf(const zero::Set& set, bool groupStorages)
{
    auto tensors = zero::assembled(set, groupStorages);
    auto c = std::make_shared<Checkpoint>();
    auto built = detail::assembledPickle(tensors, c->arena);
    if (!built) {
        return built.error();
    }
    c->root = built->root;
    c->path = set.loc.dir;
    c->setFiles = set.files;
    c->setMembers = memberFiles(set.loc);
    std::vector<std::uint64_t> nbytes;
    for (const auto i : built->recorded) {
        const auto& t = tensors[i];
        nbytes.push_back(detail::numelOf(t.shape) * elementSize(t.dtype));
        c->fileSize += nbytes.back();
    }
    auto recorded = built->recorded;
    return detail::finishView(
        std::move(c), nbytes,
        std::make_shared<const PieceStorages>(std::move(tensors), std::move(recorded), set.sources));
}

Expected<CheckpointPtr> listingView(const SetListing& listing, const Error& why)
{
    std::vector<detail::Assembled> tensors;
    std::map<std::string, std::size_t, std::less<>> byKey;
    std::vector<std::string> locations;  // parallel to tensors
    for (const auto& row : listing.rows) {
        if (elementSize(row.dtype) == 0) {
            continue;  // nothing to describe a tensor by (a row of a file that could not be read)
        }
        detail::Assembled t;
        t.name = row.key;
        t.dtype = row.dtype;
        t.shape = row.shape;
        if (const auto kept = byKey.find(row.tiedTo);
            !row.tiedTo.empty() && kept != byKey.end() && !tensors[kept->second].aliasOf &&
            detail::numelOf(row.shape) <= detail::numelOf(tensors[kept->second].shape)) {
            t.aliasOf = kept->second;
        }
        byKey.emplace(row.key, tensors.size());
        tensors.push_back(std::move(t));
        locations.push_back(row.location);
    }
    for (const auto& v : listing.values) {
        detail::Assembled t;
        t.name = v.key;
        t.value = [text = v.value](pickle::Arena& a) { return a.str(text); };
        tensors.push_back(std::move(t));
        locations.emplace_back();
    }
    auto c = std::make_shared<Checkpoint>();
    auto built = detail::assembledPickle(tensors, c->arena);
    if (!built) {
        return built.error();
    }
    c->root = built->root;
    c->path = listing.dir;
    std::vector<std::uint64_t> nbytes;
    for (std::size_t k = 0; k < built->recorded.size(); ++k) {
        const std::size_t i = built->recorded[k];
        nbytes.push_back(detail::numelOf(tensors[i].shape) * elementSize(tensors[i].dtype));
        c->fileSize += nbytes.back();
        // The saved device the listing read (the pickle says cpu, as a consolidation writes).
        if (!locations[i].empty()) {
            c->arena.storages[k].location = locations[i];
        }
    }
    return detail::finishView(std::move(c), nbytes, std::make_shared<const RefusedStorages>(why));
}

Expected<CheckpointPtr> openInput(const std::string& path, bool asSet)
{
    if (asSet) {
        if (const auto loc = wholeSetInput(path)) {
            return openView(*loc);
        }
    }
    return openCheckpoint(path);
}

}  // namespace ckpt::sharded
