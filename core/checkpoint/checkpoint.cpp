#include "checkpoint/checkpoint.h"

#include "archive/inflate.h"
#include "archive/zip.h"
#include "util/budget.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace ckpt {

std::string_view nodeKindName(NodeKind k)
{
    switch (k) {
    case NodeKind::Dict:
        return "dict";
    case NodeKind::OrderedDict:
        return "OrderedDict";
    case NodeKind::List:
        return "list";
    case NodeKind::Tuple:
        return "tuple";
    case NodeKind::Set:
        return "set";
    case NodeKind::Tensor:
        return "tensor";
    case NodeKind::Module:
        return "module";
    case NodeKind::Object:
        return "object";
    case NodeKind::Scalar:
        return "scalar";
    case NodeKind::Recursive:
        return "recursive";
    }
    return "unknown";
}

std::optional<std::string> leafValueText(const Checkpoint& c, NodeIndex node, std::size_t maxLen)
{
    const Node& n = c.nodes[node];
    switch (n.kind) {
    case NodeKind::Scalar:
        return pickle::shortRepr(c.arena, n.value, maxLen);
    case NodeKind::Recursive:
        return std::string("<recursive reference>");
    case NodeKind::Object:
        if (n.childCount == 0) {
            return pickle::shortRepr(c.arena, n.value, maxLen);
        }
        return std::nullopt;
    default:
        return std::nullopt;
    }
}

Expected<void> Checkpoint::checkUnchanged() const
{
    if (file) {
        return file->checkUnchanged();
    }
    if (source) {
        return source->checkUnchanged();
    }
    return {};
}

std::string_view TextPool::add(std::string_view s)
{
    if (s.size() > room_) {
        const std::size_t size = std::max(kChunk, s.size());
        chunks_.push_back(std::make_unique<char[]>(size));
        room_ = size;
        used_ = 0;
        bytes_ += size;
    }
    char* at = chunks_.back().get() + used_;
    std::memcpy(at, s.data(), s.size());
    used_ += s.size();
    room_ -= s.size();
    return {at, s.size()};
}

std::string Checkpoint::pathOf(NodeIndex node) const
{
    std::vector<NodeIndex> chain;
    for (NodeIndex n = node; n.valid() && n != kRootNode; n = nodes[n].parent) {
        chain.push_back(n);
    }
    std::string out;
    for (std::size_t k = chain.size(); k-- > 0;) {
        if (!out.empty()) {
            out += '/';
        }
        out += nodes[chain[k]].name;
    }
    return out;
}

NodeIndex Checkpoint::find(std::string_view keyPath) const
{
    if (nodes.empty()) {
        return {};
    }
    NodeIndex cur = kRootNode;
    if (keyPath.empty()) {
        return cur;
    }
    // Dict keys may themselves contain '/', so match children by prefix rather than splitting first.
    while (!keyPath.empty()) {
        const Node& n = nodes[cur];
        NodeIndex next;
        std::size_t bestLen = 0;
        for (std::uint32_t row = 0; row < n.childCount; ++row) {
            const std::string_view name = nodes[n.child(row)].name;
            if (keyPath.starts_with(name) && (keyPath.size() == name.size() || keyPath[name.size()] == '/') &&
                (!next.valid() || name.size() > bestLen)) {
                next = n.child(row);
                bestLen = name.size();
            }
        }
        if (!next.valid()) {
            return {};
        }
        cur = next;
        keyPath.remove_prefix(std::min(keyPath.size(), bestLen + 1));
    }
    return cur;
}

namespace {

archive::ZipRecord recordOf(const StorageEntry& s)
{
    archive::ZipRecord r;
    r.name = s.record;
    r.localHeaderOffset = s.localHeader;
    r.dataOffset = s.fileOffset;
    r.size = s.storedBytes;
    r.compressedSize = s.compressedBytes;
    r.crc32 = s.crc32;
    r.method = s.method;
    return r;
}

}  // namespace

Error Checkpoint::withPath(Error e) const
{
    if (e.path.empty()) {
        e.path = path;
    }
    return e;
}

Expected<Bytes> Checkpoint::storageData(StorageIndex storage, std::vector<std::byte>& scratch) const
{
    const StorageEntry& s = storages.at(storage);
    auto onFile = [this](Error e) { return withPath(std::move(e)); };
    if (!s.present) {
        return onFile(makeError(ErrorCode::Corrupt, "the bytes of storage " + s.key + " are missing"));
    }
    if (s.inMapping()) {
        return bytes.subspan(s.fileOffset, s.nbytes);
    }
    // An assembled storage is read whole into memory as an inflated one is: within the budget a
    // file of its size would have.
    const MemoryBudget budget{s.assembled ? s.nbytes : s.compressedBytes};
    if (s.nbytes > budget.limit()) {
        Error e = budget.exceeded();
        e.message = "storage " + s.key + " (record " + s.record + ") " + e.message;
        return onFile(std::move(e));
    }
    scratch.clear();
    scratch.reserve(static_cast<std::size_t>(s.nbytes));
    auto read = streamStorage(storage, 0, s.nbytes, [&](Bytes piece) {
        scratch.insert(scratch.end(), piece.begin(), piece.end());
        return true;
    });
    if (!read) {
        return read.error();
    }
    return Bytes{scratch.data(), scratch.size()};
}

Expected<void> Checkpoint::streamStorage(StorageIndex storage, std::uint64_t offset, std::uint64_t length,
                                         const std::function<bool(Bytes)>& sink, std::size_t chunk) const
{
    const StorageEntry& s = storages.at(storage);
    auto onFile = [this](Error e) { return withPath(std::move(e)); };
    if (!s.present) {
        return onFile(makeError(ErrorCode::Corrupt, "the bytes of storage " + s.key + " are missing"));
    }
    if (offset > s.nbytes || length > s.nbytes - offset) {
        return onFile(makeError(ErrorCode::Internal, "bytes " + std::to_string(offset) + ".." +
                                                         std::to_string(offset + length) + " of storage " + s.key +
                                                         ", which holds " + std::to_string(s.nbytes)));
    }
    if (s.assembled) {
        if (!source) {
            return onFile(makeError(ErrorCode::Internal, "storage " + s.key + " is assembled from no source"));
        }
        return source->stream(storage, offset, length, sink, chunk);
    }
    if (!s.compressed) {
        for (std::uint64_t at = offset; at < offset + length;) {
            const std::uint64_t n = std::min<std::uint64_t>(chunk, offset + length - at);
            if (!sink(bytes.subspan(static_cast<std::size_t>(s.fileOffset + at), static_cast<std::size_t>(n)))) {
                return onFile(makeError(ErrorCode::Cancelled, "cancelled"));
            }
            at += n;
        }
        return {};
    }
    // A whole read of the record checks its size and CRC; torch reads exactly nbytes of it.
    const bool whole = offset == 0 && length == s.nbytes && s.nbytes == s.storedBytes;
    auto r = archive::readRecord(bytes, recordOf(s), offset, whole ? s.storedBytes : length, sink, chunk);
    if (!r) {
        return onFile(r.error());
    }
    return {};
}

std::vector<std::pair<std::string, std::uint64_t>> Checkpoint::bytesByLocation() const
{
    std::map<std::string, std::uint64_t> by;
    for (const auto& s : storages) {
        by[s.location] += s.nbytes;
    }
    std::vector<std::pair<std::string, std::uint64_t>> out(by.begin(), by.end());
    std::stable_partition(out.begin(), out.end(), [](const auto& p) { return p.first == "cpu"; });
    return out;
}

}  // namespace ckpt
