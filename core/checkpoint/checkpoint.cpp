#include "checkpoint/checkpoint.h"

#include "archive/zip.h"

#include <algorithm>
#include <map>
#include <optional>

namespace ckpt {

std::string_view formatName(Format f)
{
    switch (f) {
    case Format::TorchZip:
        return "torch-zip";
    case Format::TorchLegacy:
        return "torch-legacy";
    case Format::Safetensors:
        return "safetensors";
    }
    return "unknown";
}

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

std::string Checkpoint::pathOf(std::uint32_t node) const
{
    std::vector<std::uint32_t> chain;
    for (std::uint32_t n = node; n != kNoIndex && n != 0; n = nodes[n].parent) {
        chain.push_back(n);
    }
    std::string out;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        if (!out.empty()) {
            out += '/';
        }
        out += nodes[*it].name;
    }
    return out;
}

std::uint32_t Checkpoint::find(std::string_view keyPath) const
{
    if (nodes.empty()) {
        return kNoIndex;
    }
    std::uint32_t cur = 0;
    if (keyPath.empty()) {
        return cur;
    }
    // Dict keys may themselves contain '/', so match children by prefix rather than splitting first.
    while (!keyPath.empty()) {
        const Node& n = nodes[cur];
        std::uint32_t next = kNoIndex;
        std::size_t bestLen = 0;
        for (std::uint32_t c = n.firstChild; c < n.firstChild + n.childCount; ++c) {
            const std::string& name = nodes[c].name;
            if (keyPath.starts_with(name) && (keyPath.size() == name.size() || keyPath[name.size()] == '/') &&
                (next == kNoIndex || name.size() > bestLen)) {
                next = c;
                bestLen = name.size();
            }
        }
        if (next == kNoIndex) {
            return kNoIndex;
        }
        cur = next;
        keyPath.remove_prefix(std::min(keyPath.size(), bestLen + 1));
    }
    return cur;
}

Expected<Bytes> Checkpoint::storageData(std::uint32_t storage, std::vector<std::byte>& scratch) const
{
    const StorageEntry& s = storages.at(storage);
    if (!s.present) {
        Error e = makeError(ErrorCode::Corrupt, "the bytes of storage " + s.key + " are missing");
        e.path = path;
        return e;
    }
    if (s.compressed) {
        std::optional<archive::ZipReader> parsed;  // for a Checkpoint not read by openCheckpoint
        const archive::ZipReader* reader = zip.get();
        if (reader == nullptr) {
            auto p = archive::ZipReader::parse(bytes);
            if (!p) {
                return p.error();
            }
            reader = &parsed.emplace(std::move(*p));
        }
        if (const archive::ZipRecord* r = reader->findExact(s.record)) {
            auto data = reader->data(*r, scratch);
            if (!data) {
                return data.error();
            }
            return data->first(std::min<std::uint64_t>(data->size(), s.nbytes));
        }
        return makeError(ErrorCode::Corrupt, "record " + s.record + " vanished");
    }
    return bytes.subspan(s.fileOffset, s.nbytes);
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
