// Format detection and the per-format loaders: each fills the arena, the root and the storage
// table; index.cpp then builds the key tree. Messages name the real cause of a bad file, since
// "invalid load key, 'v'" is what torch would have said.
#include "archive/compressed.h"
#include "archive/inflate.h"
#include "archive/safetensors.h"
#include "archive/tar.h"
#include "archive/zip.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/index.h"
#include "checkpoint/loaders.h"
#include "checkpoint/model_folder.h"
#include "checkpoint/source_storages.h"
#include "pickle/tensor_record.h"
#include "pickle/unpickler.h"
#include "util/printable.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <string_view>
#include <sys/mman.h>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>

namespace ckpt {
namespace {

// Drops the mapping's pages from the resident set once the pickle is read: they stay in the page
// cache and fault back in if storage bytes are asked for. Reading a zip of 40 000 small records
// touches every page of it through the local headers, 12 of the 98 MB peak of `inspect`, and the
// index built next is the read's peak. The mapping is read-only (no page holds anything the file
// does not), so a failure only means the pages stay.
void dropResidentPages(const MappedFile& file)
{
    const Bytes b = file.bytes();
    if (!b.empty()) {
        // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast)
        (void)::madvise(const_cast<std::byte*>(b.data()), b.size(), MADV_DONTNEED);
    }
}

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

Error fail(ErrorCode code, std::string message, std::optional<std::uint64_t> offset = {})
{
    return makeError(code, std::move(message), offset);
}

bool startsWith(Bytes b, std::string_view prefix)
{
    return b.size() >= prefix.size() && std::memcmp(b.data(), prefix.data(), prefix.size()) == 0;
}

std::string hexPrefix(Bytes b)
{
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (std::size_t i = 0; i < std::min<std::size_t>(8, b.size()); ++i) {
        const auto v = std::to_integer<unsigned>(b[i]);
        if (i) {
            out += ' ';
        }
        out += kHex[v >> 4U];
        out += kHex[v & 15U];
    }
    return out;
}

// The LONG1 payload of torch's legacy MAGIC_NUMBER 0x1950a86a20f9469cfc6c, little-endian.
constexpr std::array<unsigned char, 10> kLegacyMagic{0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

// Lua Torch7's binary serialization (torch7 File.lua writeObject, docs/format.md §3.5): each object
// is an int32 type tag, then for a table (3) or a Torch object (4) an int32 reference index, 1 for
// the first object written; a table then has an int32 entry count and its keys, numbers (1) or
// strings (2); a Torch object a length-prefixed version "V 1" and class name ("torch.FloatTensor",
// "nn.Sequential"). What the first object is, or nothing when the bytes are no Torch7 file.
std::optional<std::string> torch7FirstObject(Bytes b)
{
    constexpr std::uint64_t kTable = 3;
    constexpr std::uint64_t kTorch = 4;
    constexpr std::uint64_t kLongestName = 256;
    auto int32At = [&](std::size_t at) { return at + 4 <= b.size() ? std::optional(loadLE(b, at, 4)) : std::nullopt; };
    // A length-prefixed string of printable ASCII at `at`.
    auto stringAt = [&](std::size_t at) -> std::optional<std::string> {
        const auto len = int32At(at);
        if (!len || *len == 0 || *len > kLongestName || at + 4 + *len > b.size()) {
            return std::nullopt;
        }
        std::string s(asText(b.subspan(at + 4, *len)));
        if (!std::all_of(s.begin(), s.end(), [](char ch) { return ch >= 0x20 && ch < 0x7f; })) {
            return std::nullopt;
        }
        return s;
    };
    const auto type = int32At(0);
    if (!type || int32At(4) != 1U) {
        return std::nullopt;
    }
    if (*type == kTorch) {
        auto version = stringAt(8);
        if (!version) {
            return std::nullopt;
        }
        // Files older than torch7's versioned classes write the class name alone.
        auto cls = version->starts_with("V ") ? stringAt(12 + version->size()) : version;
        if (!cls || cls->find('.') == std::string::npos) {  // package-qualified: torch., nn., cudnn.
            return std::nullopt;
        }
        return "a " + *cls;
    }
    const auto entries = int32At(8);
    const auto keyType = int32At(12);
    constexpr std::uint64_t kNumber = 1;
    constexpr std::uint64_t kString = 2;
    if (*type != kTable || !entries || *entries > (1U << 24U) ||
        (*entries > 0 && (keyType != kNumber && !(keyType == kString && stringAt(16))))) {
        return std::nullopt;
    }
    return "a Lua table of " + std::to_string(*entries) + (*entries == 1 ? " entry" : " entries");
}

// A file of text (a config, a README, /etc/hostname) named where a checkpoint is taken: no
// checkpoint is text, past a protocol-0 pickle, which the legacy reader tries first. The whole of a
// small file, else its first 4 KiB, must be printable UTF-8 or whitespace. The error quotes the
// start of its first line.
std::optional<Error> textFileError(Bytes b)
{
    constexpr std::size_t kLooked = 4096;
    constexpr std::size_t kQuoted = 48;
    std::string_view text = asText(b.first(std::min(b.size(), kLooked)));
    if (text.empty()) {
        return std::nullopt;
    }
    const bool controls = std::any_of(text.begin(), text.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return (u < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f') || u == 0x7f;
    });
    // A multi-byte character cut by the 4 KiB window is still text.
    std::string_view whole = text;
    for (int cut = 0; cut < 3 && b.size() > kLooked && !isValidUtf8(whole); ++cut) {
        whole.remove_suffix(1);
    }
    if (controls || !isValidUtf8(whole)) {
        return std::nullopt;
    }
    const std::size_t start = text.find_first_not_of(" \t\r\n\f");
    if (start == std::string_view::npos) {
        return fail(ErrorCode::NotCheckpoint, "is a text file of blank lines, not a PyTorch checkpoint");
    }
    const std::string_view line = text.substr(start, text.find_first_of("\r\n", start) - start);
    std::string quoted(line.substr(0, kQuoted));
    while (!isValidUtf8(quoted)) {  // not inside a character
        quoted.pop_back();
    }
    if (quoted.size() < line.size()) {
        quoted += "…";
    }
    return fail(ErrorCode::NotCheckpoint,
                "is a text file, not a PyTorch checkpoint (it begins \"" + displayText(quoted) + "\")");
}

// `named`: the bytes are a file the user named, whose text an error may quote (an item inside a
// file could be any file's bytes).
std::optional<Error> sniffNonCheckpoint(Bytes b, bool named)
{
    if (b.empty()) {
        return fail(
            ErrorCode::NotCheckpoint,
            "the file is empty (0 bytes): an interrupted save or download? (torch.load says \"EOFError: Ran out "
            "of input\")");
    }
    if (startsWith(b, "version https://git-lfs")) {
        return fail(ErrorCode::NotCheckpoint, "is a Git LFS pointer, not the checkpoint: fetch the real file with "
                                              "`git lfs pull` (torch.load says \"invalid load key, 'v'\")");
    }
    std::string_view text = asText(b.first(std::min<std::size_t>(b.size(), 512)));
    const auto firstNonSpace = text.find_first_not_of(" \t\r\n\xEF\xBB\xBF");
    if (firstNonSpace != std::string_view::npos && text[firstNonSpace] == '<') {
        return fail(ErrorCode::NotCheckpoint, "is an HTML/XML page, not a checkpoint: the download saved an error or "
                                              "login page (torch.load says \"invalid load key, '<'\")");
    }
    if (startsWith(b, "PYTORCH1")) {
        return fail(ErrorCode::Unsupported, "is an archive from PyTorch's preview release (PYTORCH1), which no "
                                            "current PyTorch reads");
    }
    // Files people pick by mistake, named by their signature rather than shown as hex.
    struct Signature {
        std::string_view magic;
        std::string_view what;
    };
    static constexpr std::array<Signature, 6> kOthers{{
        {"\x89PNG\r\n\x1a\n", "a PNG image"},
        {"\xFF\xD8\xFF", "a JPEG image"},
        {"GIF8", "a GIF image"},
        {"%PDF-", "a PDF document"},
        {"\x7F"
         "ELF",
         "an ELF executable or library"},
        {"\x93NUMPY", "a NumPy .npy array (numpy.load reads it)"},
    }};
    for (const auto& s : kOthers) {
        if (startsWith(b, s.magic)) {
            return fail(ErrorCode::NotCheckpoint, "is " + std::string(s.what) + ", not a PyTorch checkpoint");
        }
    }
    if (const auto first = torch7FirstObject(b)) {
        return fail(ErrorCode::NotCheckpoint,
                    "is a Lua Torch7 file (Torch7's binary serialization; its first object is " + *first +
                        "), not a PyTorch checkpoint: PyTorch cannot read it (torch.utils.serialization.load_lua "
                        "was removed in PyTorch 1.0); read it in Python with the torchfile package "
                        "(torchfile.load) and torch.save the tensors");
    }
    // Shorter than any checkpoint: a zip's end record alone is 22 bytes, a legacy stream's magic
    // number pickle 11, a safetensors header at least 10. Text that short is a text file (a
    // hostname), not a cut-off checkpoint.
    if (constexpr std::size_t kShortest = 10; b.size() < kShortest) {
        if (auto isText = named ? textFileError(b) : std::nullopt) {
            return isText;
        }
        return fail(ErrorCode::Truncated,
                    "is " + std::string(b.size() == 1 ? "1 byte" : std::to_string(b.size()) + " bytes") +
                        ", shorter than any checkpoint: truncated (an interrupted save or "
                        "download?)");
    }
    return std::nullopt;
}

std::string storageName(const StorageEntry& s)
{
    if (s.record.empty()) {
        return "storage " + s.key;
    }
    const auto slash = s.record.find('/');
    return "storage " + s.key + " (" + (slash == std::string::npos ? s.record.str() : s.record.substr(slash + 1)) + ")";
}

}  // namespace

namespace detail {

Expected<void> checkStorageBytes(Checkpoint& c)
{
    for (auto& s : c.storages) {
        if (s.present && s.storedBytes < s.nbytes) {
            return fail(ErrorCode::Corrupt, storageName(s) + " holds " + std::to_string(s.storedBytes) +
                                                " bytes but its declared size needs " + std::to_string(s.nbytes) +
                                                ": the file is truncated or corrupt");
        }
        if (s.present && s.storedBytes > s.nbytes) {
            c.warnings.push_back(storageName(s) + " holds " + std::to_string(s.storedBytes) + " bytes, more than the " +
                                 std::to_string(s.nbytes) +
                                 " its pickle declares (torch.load refuses a size mismatch)");
        }
    }
    return {};
}

Expected<void> adoptStorages(Checkpoint& c)
{
    c.storages.clear();
    c.storages.reserve(c.arena.storages.size());
    for (const auto& ref : c.arena.storages) {
        StorageEntry s;
        s.key = ref.key;
        s.location = ref.location;
        s.dtype = ref.dtype;
        s.numel = ref.numel;
        const std::uint64_t elem = elementSize(ref.dtype);
        if (elem != 0 && ref.numel > UINT64_MAX / elem) {
            return fail(ErrorCode::Limit, "storage " + ref.key + " declares " + std::to_string(ref.numel) +
                                              " elements, more bytes than a file can hold");
        }
        s.nbytes = ref.numel * elem;
        if (ref.conflicting) {
            c.warnings.push_back("storage " + ref.key +
                                 " is declared with different dtypes or sizes by different tensors");
        }
        c.storages.push_back(std::move(s));
    }
    return {};
}

void placeRecord(StorageEntry& s, const archive::ZipRecord& rec, std::uint64_t base)
{
    s.record = rec.name;
    s.fileOffset = base + rec.dataOffset;
    s.storedBytes = rec.size;
    s.crc32 = rec.crc32;
    s.compressed = rec.method != 0;
    s.method = rec.method;
    s.compressedBytes = rec.compressedSize;
    s.localHeader = base + rec.localHeaderOffset;
    s.present = true;
}

}  // namespace detail

namespace {

using detail::adoptStorages;
using detail::checkStorageBytes;

std::string undecodableWarning(const Checkpoint& c)
{
    const auto& u = c.undecodable;
    const bool python2 = u.python2 == u.count;
    std::string w = std::to_string(u.count) + (python2 ? " Python 2" : "") +
                    (u.count == 1 ? " string is" : " strings are") + " not valid UTF-8 (" +
                    (python2 ? "" : "corrupt text; ") + "the first at " + u.firstAt;
    if (!u.paths.empty()) {
        w += ", key '" + u.paths.front() + "'";
    }
    w += "): torch.load fails with UnicodeDecodeError";
    if (python2) {
        w += " unless given encoding='latin1'";
    }
    return w + "; shown with \\xNN escapes";
}

void noteUndecodable(Checkpoint& c, const pickle::UnpickleResult& r, std::uint64_t pickleStart, std::string_view of)
{
    if (r.undecodableStrings == 0) {
        return;
    }
    if (c.undecodable.count == 0) {
        c.undecodable.firstAt = "byte " + std::to_string(pickleStart + r.firstUndecodable) + std::string(of);
    }
    c.undecodable.count += r.undecodableStrings;
    c.undecodable.python2 += r.undecodablePython2;
}

Expected<void> unpickleInto(Checkpoint& c, Bytes pkl, bool legacy, const MemoryBudget& budget,
                            std::size_t* consumed = nullptr)
{
    pickle::UnpickleOptions opts;
    opts.legacyPersistentIds = legacy;
    opts.budget = budget;
    auto r = pickle::unpickle(pkl, c.arena, opts);
    if (!r) {
        return r.error();
    }
    c.root = r->root;
    c.pickleProtocol = r->protocol;
    c.opcodesSeen |= r->opcodesSeen;
    noteUndecodable(c, *r, 0, " of data.pkl");
    for (auto& w : r->warnings) {
        c.warnings.push_back(std::move(w));
    }
    if (consumed != nullptr) {
        *consumed = r->consumed;
    }
    return {};
}

void noteSalvage(Checkpoint& c, const archive::ZipReader& zip)
{
    const auto& s = zip.salvage();
    if (!s) {
        return;
    }
    c.truncation.salvaged = true;
    c.truncation.records = zip.records().size();
    c.truncation.inDirectory = s->inCentralDirectory;
    if (s->inCentralDirectory) {
        c.truncation.endsIn = "in the central directory, after every record";
    } else if (s->cutAt == s->fileSize) {
        c.truncation.endsIn = "after its last whole record, before the central directory";
    } else {
        const std::string name = s->cutRecord.empty() ? std::string("a record") : "record '" + s->cutRecord + "'";
        c.truncation.endsIn = "inside " + name + ", which starts at byte " + std::to_string(s->cutAt);
    }
    c.warnings.push_back("the zip archive is truncated (no central directory; it ends " + c.truncation.endsIn +
                         "): read from its " + std::to_string(c.truncation.records) +
                         " whole local records; torch.load refuses it");
}

Expected<void> loadZipFrom(Checkpoint& c, const archive::ZipReader& zipReader, MemoryBudget& budget);

Expected<void> loadZip(Checkpoint& c, MemoryBudget& budget)
{
    auto zip = archive::ZipReader::parse(c.bytes, c.file ? c.file->fd() : -1);
    if (!zip) {
        return zip.error();
    }
    return loadZipFrom(c, *zip, budget);
}

// A torch zip's records read through `zipReader` (over the mapping, or ranges of a source).
Expected<void> loadZipFrom(Checkpoint& c, const archive::ZipReader& zipReader, MemoryBudget& budget)
{
    const archive::ZipReader* zip = &zipReader;
    c.format = Format::TorchZip;
    c.archiveFolder = zip->folder();
    noteSalvage(c, *zip);
    if (detail::isExportArchive(*zip)) {
        return detail::loadExportArchive(c, *zip, budget);
    }
    if (zip->flat()) {
        return fail(ErrorCode::Corrupt, "file in archive is not in a subdirectory: " + zip->records().front().name,
                    zip->flatFirstAt());
    }
    if (zip->find("constants.pkl") != nullptr) {
        // data.pkl holds the module tree as __torch__ objects with the same storage ids as torch.save;
        // the class sources say which attributes are parameters and buffers (state_dict.h).
        c.torchScript = true;
        detail::readScriptClasses(*zip, c);
    }
    const archive::ZipRecord* pkl = zip->find("data.pkl");
    if (pkl == nullptr) {
        if (zip->find(".data/extern_modules") != nullptr) {
            return fail(ErrorCode::Unsupported, "is a torch.package archive, not a torch.save checkpoint");
        }
        if (zip->find("model.json") != nullptr) {
            return detail::loadFirstScriptLayout(c, *zip);
        }
        if (c.truncation.salvaged) {
            return fail(ErrorCode::Truncated, "zip archive is truncated and its data.pkl is not whole: the file ends " +
                                                  c.truncation.endsIn + " (torch: \"" +
                                                  std::string(archive::kTruncatedTorchError) + "\")");
        }
        return fail(ErrorCode::Corrupt, "the zip archive has no data.pkl record (folder '" + zip->folder() +
                                            "'): it is not a torch.save checkpoint or it is damaged");
    }
    if (!c.truncation.salvaged && zip->find("version") == nullptr && zip->find(".data/version") == nullptr) {
        c.warnings.emplace_back("the archive has no 'version' record; torch.load will refuse it");
    }
    if (const auto* bo = zip->find("byteorder")) {
        std::vector<std::byte> scratch;
        if (auto d = zip->data(*bo, scratch)) {
            c.byteorder = std::string(asText(*d));
            if (c.byteorder != "little" && c.byteorder != "big") {
                c.warnings.push_back("unknown byteorder record '" + c.byteorder + "'");
            }
        }
    }
    // The budget follows the pickle's size in the file: a deflated data.pkl that inflates past it
    // (50 million NONEs in 97 KB) is refused before it is inflated.
    budget.pickleBytes = pkl->compressedSize;
    if (pkl->method != 0) {
        if (pkl->size > budget.limit()) {
            return budget.exceeded();
        }
        c.arena.charge(pkl->size);
    }
    std::vector<std::byte> scratch;
    auto data = zip->data(*pkl, scratch);
    if (!data) {
        return data.error();
    }
    // The central directory and local headers were read through the mapping (40k records: 7 MB of
    // pages); the pickle's pages are let go again once it is read, before the storage and tensor
    // tables are built. Together they moved the 40k-key read's peak from 64 to 59 MB.
    if (c.file) {
        dropResidentPages(*c.file);
    }
    if (auto r = unpickleInto(c, *data, false, budget); !r) {
        r.error().message = "data.pkl: " + r.error().message;
        if (r.error().offset) {
            r.error().message += " (pickle byte " + std::to_string(*r.error().offset) + ")";
            r.error().offset.reset();
        }
        return r;
    }
    const std::size_t dataStorages = c.arena.storages.size();
    if (c.torchScript) {
        detail::readScriptConstants(*zip, c, budget);
    }
    if (c.file) {
        dropResidentPages(*c.file);
    }
    if (auto r = adoptStorages(c); !r) {
        return r;
    }
    for (std::size_t i = 0; i < c.storages.size(); ++i) {
        auto& s = c.storages[StorageIndex{static_cast<std::uint32_t>(i)}];
        const std::string recName = i < dataStorages ? "data/" + s.key : s.key.str();  // constants/<key>
        const archive::ZipRecord* rec = zip->find(recName);
        if (rec == nullptr && c.truncation.salvaged) {
            continue;  // cut off with the rest of the file: present stays false
        }
        if (rec == nullptr) {
            return fail(ErrorCode::Corrupt, "storage record " + recName +
                                                " is missing from the archive (torch.load fails with \"failed "
                                                "locating file " +
                                                recName + "\")");
        }
        detail::placeRecord(s, *rec, 0);
        if (s.method != 0 && s.method != 8) {
            c.warnings.push_back("storage record " + rec->name + " is compressed with " +
                                 archive::methodName(s.method) + ", which torch.load cannot read");
        }
    }
    return checkStorageBytes(c);
}

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
        return fail(ErrorCode::NotCheckpoint,
                    "is a plain pickle, not a torch.save checkpoint (no torch magic number; torch.load says \"Invalid "
                    "magic number; corrupt file?\")");
    }
    auto proto = next(false);
    if (!proto) {
        return proto.error();
    }
    if (c.arena[*proto].kind != Kind::Int || c.arena[*proto].i != 1001) {
        return fail(ErrorCode::Unsupported, "legacy stream with protocol version " +
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
        return fail(ErrorCode::Corrupt, "legacy stream: the storage key list is not a list", pos);
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

// A legacy stream's first pickle (the magic number) starts with PROTO, or with MARK, a LONG or
// INT opcode, or LONG1 at protocol 0-1.
bool startsLikeLegacyStream(Bytes data)
{
    const auto b = std::to_integer<unsigned>(data[0]);
    return b == 0x80 || b == '(' || b == 'L' || b == 'I' || b == 0x8a;
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
            return fail(ErrorCode::Truncated, "legacy stream ends before storage " + key + ": the file is truncated",
                        pos);
        }
        auto count = countAt(record, pos);
        if (!count) {
            return count.error();
        }
        if (*count > (size - pos - 8) / elem) {
            return fail(ErrorCode::Truncated,
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
            return fail(ErrorCode::Corrupt, "legacy stream: storage " + s.key + " is referenced but not stored");
        }
    }
    if (pos < size) {
        c.warnings.push_back(std::to_string(size - pos) + " bytes after the last storage are ignored");
    }
    return checkStorageBytes(c);
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

// A `save_pretrained` file (model.safetensors with config.json beside it) lacks the names its model
// ties (util/tied_pairs.h): they come back as second names of the tensor they are tied to, as
// model.state_dict() has them, so inspect lists them and convert writes them. A shard of a set
// (`-0000i-of-0000N`) is no model alone: the set restores its ties (sharded/hf_set.cpp).
void restoreModelTies(Checkpoint& c, std::vector<ValueId>& items)
{
    static const std::regex shardName(R"(-[0-9]{5}-of-[0-9]{5}\.safetensors$)");
    if (std::regex_search(c.path, shardName)) {
        return;
    }
    c.modelConfig = readModelConfig(std::filesystem::path(c.path).parent_path().string());
    std::vector<std::string> keys;
    std::unordered_map<std::string, ValueId> valueOf;
    for (std::size_t i = 0; i < items.size(); i += 2) {
        keys.emplace_back(c.arena[items[i]].text);
        valueOf.emplace(keys.back(), items[i + 1]);
    }
    c.ties = tiedWeights(c.modelConfig, keys);
    for (const auto& t : c.ties.restored) {
        items.push_back(c.arena.str(t.name));
        items.push_back(valueOf.at(t.source));
    }
}

Expected<void> fillSafetensors(Checkpoint& c, MemoryBudget& budget, const archive::SafetensorsFile* st,
                               bool modelFile = false);

// `modelFile`: a file opened by its path as a model, whose folder's config.json is read (ties).
Expected<void> loadSafetensors(Checkpoint& c, MemoryBudget& budget, bool modelFile)
{
    auto st = archive::parseSafetensors(c.bytes);
    if (!st) {
        return st.error();
    }
    return fillSafetensors(c, budget, &*st, modelFile);
}

// The tensors a safetensors header names, as a state dict of plain tensors.
Expected<void> fillSafetensors(Checkpoint& c, MemoryBudget& budget, const archive::SafetensorsFile* st, bool modelFile)
{
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
    if (modelFile) {
        restoreModelTies(c, items);
    }
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

// `modelFile`: a file opened by its path as a model, whose folder's config.json is read (ties).
Expected<CheckpointPtr> readImpl(Bytes data, const std::string& name, std::shared_ptr<const MappedFile> file,
                                 source::SourcePtr input = nullptr, bool modelFile = false);

// AllenNLP's model archive (allennlp/models/archival.py, archive_model): a gzipped tar of
// `weights.th` (the model's torch.save state dict), `config.json` and `vocabulary/`, which
// torch.load cannot read; allennlp's load_archive extracts it and loads `weights.th`
// (docs/format.md §3.4). The member, when the tar is such an archive rather than a PyTorch 0.1
// checkpoint (whose members are `storages`, `tensors` and `pickle`).
constexpr std::string_view kAllenNlpWeights = "weights.th";

std::optional<archive::TarMember> allenNlpWeights(Bytes data)
{
    auto members = archive::parseTar(data);
    if (!members || archive::findMember(*members, "pickle") != nullptr) {
        return std::nullopt;
    }
    // Archives tarred by hand from inside the folder name it `./weights.th`.
    for (const std::string_view name : {kAllenNlpWeights, std::string_view("./weights.th")}) {
        if (const auto* m = archive::findMember(*members, name)) {
            return *m;
        }
    }
    return std::nullopt;
}

// The checkpoint in a tar's member, read as any file is. Read from a mapped file, the member is
// copied: storage offsets count from the checkpoint's own bytes, and writers would otherwise
// copy from the archive's offsets.
Expected<CheckpointPtr> readTarMember(Bytes data, const std::string& name, const archive::TarMember& m,
                                      const std::shared_ptr<const MappedFile>& file)
{
    Bytes member = data.subspan(m.offset, m.size);
    std::shared_ptr<const std::vector<std::byte>> copy;
    if (file) {
        copy = std::make_shared<const std::vector<std::byte>>(member.begin(), member.end());
        member = *copy;
    }
    auto inner = readImpl(member, name, nullptr);
    if (!inner) {
        Error e = inner.error();
        e.message = "is an AllenNLP model archive; its member '" + m.name + "': " + e.message;
        return e;
    }
    auto c = std::const_pointer_cast<Checkpoint>(*inner);  // built for this call alone
    if (copy) {
        c->inflated = std::move(copy);
    }
    c->archiveMember = m.name;
    c->fileSize = data.size();
    c->warnings.push_back("an AllenNLP model archive: shown is its member '" + m.name +
                          "', the model's weights; torch.load cannot read the archive itself: extract " + m.name +
                          " (tar -xf), or convert the archive, first");
    return CheckpointPtr(std::move(c));
}

// Where the bytes a gzip file stores end: the start of its trailing sparse hole, found with
// SEEK_HOLE/SEEK_DATA so the hole is never read (reading it would make its zero pages resident).
// A hole holds only zeros, which gunzip ignores after the last member.
std::size_t endOfStoredBytes(Bytes data, const MappedFile* file)
{
    if (file == nullptr || file->fd() < 0) {
        return data.size();
    }
    off_t at = ::lseek(file->fd(), 0, SEEK_DATA);
    // ENXIO: no data at all; another error: a file system that cannot say, read as it is.
    if (at < 0 && errno != ENXIO) {
        return data.size();
    }
    off_t lastDataEnd = 0;
    for (; at >= 0; at = ::lseek(file->fd(), lastDataEnd, SEEK_DATA)) {
        const off_t hole = ::lseek(file->fd(), at, SEEK_HOLE);
        if (hole <= at) {
            break;
        }
        lastDataEnd = hole;
    }
    return std::min(data.size(), static_cast<std::size_t>(lastDataEnd));
}

// The bytes the inflate limit is proportional to: the stored bytes less their trailing zeros, so
// that neither a sparse hole (no disk) nor zero padding (compresses to nothing) grows the limit (a
// member followed by a 1 GiB hole could inflate to 64 GiB). Only the limit: the zeros stay in what
// is inflated, since a member's CRC and length may themselves end in zero bytes.
std::size_t meaningfulBytes(Bytes stored)
{
    std::size_t end = stored.size();
    while (end > 0 && stored[end - 1] == std::byte{0}) {
        --end;
    }
    return end;
}

// torch.load cannot read a compressed file ("invalid load key, '\x1f'"); ckptscope reads the
// checkpoint inside a gzip one, and names the others.
Expected<CheckpointPtr> readCompressed(Bytes data, const std::string& name, archive::Compression kind,
                                       const std::shared_ptr<const MappedFile>& file)
{
    const std::string what = std::string(archive::compressionName(kind)) + "-compressed file";
    const std::string undo = std::string(archive::decompressCommand(kind));
    auto named = [&](Error e) {
        e.message = "is a " + what + " (" + e.message + "); torch.load cannot read it either: " + undo + " it first";
        e.path = name;
        return e;
    };
    if (kind != archive::Compression::Gzip) {
        return named(makeError(ErrorCode::Unsupported,
                               "ckptscope does not decompress " + std::string(archive::compressionName(kind))));
    }
    // Checkpoints compress little (float noise), so 64x the file plus the read budget's base is
    // room for any real one and stops a gzip bomb.
    const Bytes stored = data.first(endOfStoredBytes(data, file.get()));
    const std::uint64_t limit = MemoryBudget::kBase + 64 * static_cast<std::uint64_t>(meaningfulBytes(stored));
    auto inflated = archive::gunzip(stored, limit);
    if (file) {
        if (auto same = file->checkUnchanged(); !same) {
            return same.error();
        }
    }
    if (!inflated) {
        // A damaged stream: gunzip would fail the same way, so no advice to run it.
        Error e = inflated.error();
        e.message = "is a " + what + ", and " + e.message;
        e.path = name;
        return e;
    }
    auto owned = std::make_shared<const std::vector<std::byte>>(std::move(*inflated));
    if (archive::sniffCompression(*owned) != archive::Compression::None) {
        return named(makeError(ErrorCode::Unsupported, "compressed twice"));
    }
    auto inner = readImpl(*owned, name, nullptr);
    if (!inner) {
        Error e = inner.error();
        e.message = "inside the " + what + ": " + e.message;
        return e;
    }
    // The checkpoint was built for this call alone: nothing else holds it yet.
    auto c = std::const_pointer_cast<Checkpoint>(*inner);
    c->compression = archive::compressionName(kind);
    c->inflated = std::move(owned);
    c->fileSize = data.size();
    if (c->archiveMember.empty()) {  // an archive's member has the archive-member finding instead
        c->warnings.push_back("the checkpoint is wrapped in " + std::string(archive::compressionName(kind)) +
                              R"(: torch.load cannot read the file as it is ("invalid load key, '\x1f'"); )" + undo +
                              " it, or convert it, first");
    }
    return CheckpointPtr(std::move(c));
}

// What every reader does once its loader ran: the key tree, the undecodable-text warning, and the
// check that the file did not change while it was read.
Expected<CheckpointPtr> finishRead(std::shared_ptr<Checkpoint> c, MemoryBudget& budget, Expected<void> loaded,
                                   const std::string& name)
{
    if (loaded && c->file) {
        dropResidentPages(*c->file);
    }
    if (loaded) {
        detail::IndexLimits limits;
        limits.budget = budget;
        loaded = detail::buildIndex(*c, limits);
    }
    if (loaded && c->undecodable.count > 0) {
        c->warnings.push_back(undecodableWarning(*c));
    }
    // A file cut short while it was parsed reads as zeros past its new end: say what happened,
    // not what the zeros looked like.
    if (auto same = c->checkUnchanged(); !same) {
        return same.error();
    }
    if (!loaded) {
        Error e = loaded.error();
        if (e.path.empty()) {
            e.path = name;
        }
        return e;
    }
    return CheckpointPtr(std::move(c));
}

Expected<CheckpointPtr> readImpl(Bytes data, const std::string& name, std::shared_ptr<const MappedFile> file,
                                 source::SourcePtr input, bool modelFile)
{
    if (const auto kind = archive::sniffCompression(data); kind != archive::Compression::None) {
        return readCompressed(data, name, kind, file);
    }
    auto withPath = [&](Error e) {
        if (e.path.empty()) {
            e.path = name;
        }
        return e;
    };
    // Structure first: a safetensors header length of 0x3C20 starts with the bytes `20 3c`, which
    // the text sniffing below would take for an HTML page.
    const bool zip = startsWith(data, "PK\x03\x04") || startsWith(data, "PK\x05\x06");
    const bool safetensors = !zip && archive::looksLikeSafetensors(data);
    // torch.load tries a tar first (PyTorch < 0.1.10 wrote checkpoints as tar archives).
    const bool tar = !zip && !safetensors && data.size() > 262 && std::memcmp(data.data() + 257, "ustar", 5) == 0;
    if (tar) {
        if (const auto weights = allenNlpWeights(data)) {
            return readTarMember(data, name, *weights, file);
        }
    }
    if (!zip && !safetensors && !tar) {
        if (auto e = sniffNonCheckpoint(data, file != nullptr)) {
            return withPath(*e);
        }
    }
    auto c = std::make_shared<Checkpoint>();
    c->path = name;
    c->file = std::move(file);
    c->input = std::move(input);
    c->bytes = data;
    c->fileSize = data.size();
    Expected<void> loaded;
    MemoryBudget budget;
    if (zip) {
        loaded = loadZip(*c, budget);
    } else if (safetensors) {
        loaded = loadSafetensors(*c, budget, modelFile);
    } else if (tar) {
        loaded = detail::loadTorchTar(*c, budget);
    } else if (startsLikeLegacyStream(data)) {
        loaded = loadLegacy(*c, budget);
        // A text file that starts with 'L', 'I' or '(' is no protocol-0 pickle: say what it is.
        if (!loaded && c->file) {
            if (auto text = textFileError(data)) {
                return withPath(*text);
            }
        }
    } else {
        if (auto text = c->file ? textFileError(data) : std::nullopt) {
            return withPath(*text);
        }
        // The first bytes help with a file the user named; an item inside a file (a DCP chunk at a
        // crafted offset) could be any file's bytes, so its error shows none.
        return withPath(fail(ErrorCode::NotCheckpoint,
                             "is not a PyTorch checkpoint: no zip, legacy-torch or safetensors signature" +
                                 (c->file ? " (first bytes: " + hexPrefix(data) + ")" : std::string())));
    }
    return finishRead(std::move(c), budget, std::move(loaded), name);
}

// ---- Reading from a source that is not mapped (issue 37: readers pull the ranges they need) ----

constexpr std::uint64_t kHeadBytes = std::uint64_t{64} << 10;  // what is read first of a file's head

// A ranged read answers true when it read the file, false when the file is to be read whole
// (within the caller's limit) instead.
constexpr bool kReadWhole = false;

// The storages of `c` read through its source: assembled, each from its own range, `assumed` saying
// which headers the reader assumed (checked when the bytes are read).
void readThroughSource(Checkpoint& c, std::vector<SourceStorages::Entry> entries)
{
    for (std::size_t i = 0; i < c.storages.size(); ++i) {
        auto& s = c.storages[StorageIndex{static_cast<std::uint32_t>(i)}];
        entries[i].dataOffset = s.fileOffset;
        s.assembled = s.present && !s.compressed;
    }
    c.source = std::make_shared<SourceStorages>(c.input, std::move(entries));
}

// A torch zip from ranges: the end records and the central directory, then every record that is
// no storage (its pickle, byteorder, version, TorchScript's code) fetched together; storages are
// read when asked for, their local headers assumed in torch's layout. An export archive (whose
// records hold zips of their own) and deflated storages are read whole instead.
Expected<bool> loadZipRanged(Checkpoint& c, MemoryBudget& budget, archive::ZipReader& zip)
{
    if (detail::isExportArchive(zip)) {
        return kReadWhole;
    }
    std::vector<const archive::ZipRecord*> wanted;
    for (const auto& r : zip.records()) {
        const auto slash = r.name.find('/');
        const std::string_view rel =
            slash == std::string::npos ? std::string_view(r.name) : std::string_view(r.name).substr(slash + 1);
        const bool storage = rel.starts_with("data/") || rel.starts_with("constants/");
        if (!storage) {
            wanted.push_back(&r);
        } else if (r.method != 0) {
            return kReadWhole;
        }
    }
    if (auto ok = c.input->prefetch(archive::ZipReader::recordRanges(wanted)); !ok) {
        return ok.error();
    }
    // What the fetches brought along (a small file comes whole) is read, not assumed.
    zip.readHeldHeaders();
    if (auto ok = loadZipFrom(c, zip, budget); !ok) {
        return ok.error();
    }
    std::vector<SourceStorages::Entry> entries(c.storages.size());
    for (std::size_t i = 0; i < c.storages.size(); ++i) {
        const auto& s = c.storages[StorageIndex{static_cast<std::uint32_t>(i)}];
        const archive::ZipRecord* rec = s.record.empty() ? nullptr : zip.findExact(s.record);
        if (rec != nullptr && rec->dataOffsetAssumed) {
            entries[i].header = s.localHeader;
            entries[i].assumed = SourceStorages::Assumed::ZipHeader;
        }
    }
    readThroughSource(c, std::move(entries));
    return true;
}

// A safetensors file from ranges: its length, then its header if the first read did not hold it.
Expected<bool> loadSafetensorsRanged(Checkpoint& c, MemoryBudget& budget, const source::Held& head)
{
    const std::uint64_t size = c.input->size();
    const std::uint64_t n = loadLE(head.bytes, 0, 8);
    source::Held header = head;
    if (8 + n > head.bytes.size()) {
        auto more = c.input->read(0, 8 + n);
        if (!more) {
            return more.error();
        }
        header = std::move(*more);
    }
    auto st = archive::parseSafetensors(header.bytes.first(static_cast<std::size_t>(8 + n)), size);
    if (!st) {
        return st.error();
    }
    if (auto ok = fillSafetensors(c, budget, &*st); !ok) {
        return ok.error();
    }
    readThroughSource(c, std::vector<SourceStorages::Entry>(c.storages.size()));
    return true;
}

// A legacy stream from ranges: its pickles (the first bytes, four times as many each time they run
// past them, up to `limit`), then each record's count as the pickle declares it, assumed and checked
// when its bytes are read. A stream with more than a few records no tensor names (each count a read
// of 8 bytes) is read whole: null then.
Expected<std::shared_ptr<Checkpoint>> loadLegacyRanged(const std::shared_ptr<Checkpoint>& first, MemoryBudget& budget,
                                                       std::uint64_t limit)
{
    const source::SourcePtr& src = first->input;
    const std::uint64_t size = src->size();
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
                return std::shared_ptr<Checkpoint>();  // read whole, for the reader's own message
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
                return std::shared_ptr<Checkpoint>();
            }
            return ok.error();
        }
        readThroughSource(*c, std::move(entries));
        return c;
    }
}

// `head` holds the first bytes of a file of `size` that are a safetensors length and '{'.
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
Expected<std::optional<CheckpointPtr>> readRanged(const source::SourcePtr& src, const std::string& name,
                                                  std::uint64_t limit)
{
    auto c = std::make_shared<Checkpoint>();
    c->path = name;
    c->input = src;
    c->fileSize = src->size();
    MemoryBudget budget;
    auto done = [&](Expected<bool> r) -> Expected<std::optional<CheckpointPtr>> {
        if (r && *r == kReadWhole) {
            return std::optional<CheckpointPtr>();
        }
        auto read = finishRead(c, budget, r ? Expected<void>() : Expected<void>(r.error()), name);
        if (!read) {
            return read.error();
        }
        return std::optional(*read);
    };
    auto head = [&]() { return src->read(0, std::min(src->size(), kHeadBytes)); };
    // A file named .safetensors is read from its head first (the HTTP source's first request was
    // that), anything else from its tail, where a zip keeps its directory.
    if (name.ends_with(".safetensors")) {
        auto h = head();
        if (!h) {
            return h.error();
        }
        if (startsLikeSafetensors(h->bytes, src->size())) {
            return done(loadSafetensorsRanged(*c, budget, *h));
        }
    }
    auto zip = archive::ZipReader::parse(src);
    if (zip) {
        return done(loadZipRanged(*c, budget, *zip));
    }
    if (zip.error().code != ErrorCode::NotCheckpoint) {
        // A truncated zip is salvaged from its local headers, which needs the whole file.
        if (zip.error().code == ErrorCode::Truncated) {
            return std::optional<CheckpointPtr>();
        }
        Error e = zip.error();
        e.path = name;
        return e;
    }
    auto h = head();
    if (!h) {
        return h.error();
    }
    if (startsLikeSafetensors(h->bytes, src->size())) {
        return done(loadSafetensorsRanged(*c, budget, *h));
    }
    if (!h->bytes.empty() && startsLikeLegacyStream(h->bytes)) {
        auto legacy = loadLegacyRanged(c, budget, limit);
        if (!legacy) {
            return done(legacy.error());
        }
        if (!*legacy) {
            return std::optional<CheckpointPtr>();
        }
        c = *legacy;
        return done(true);
    }
    return std::optional<CheckpointPtr>();
}

}  // namespace

namespace {

// A folder named where a checkpoint is taken opens its one model (model_folder.h); errors say
// which folder and which file, as a tar member's do.
Expected<CheckpointPtr> openModelFolder(const ModelFolder& folder)
{
    auto model = modelFileOf(folder);
    if (!model) {
        return model.error();
    }
    auto inner = openCheckpoint(*model);
    if (!inner) {
        Error e = inner.error();
        e.message = "is " + folder.layout + (folder.adapter() ? "; its adapter " : "; its model ") +
                    displayText(folder.model()) + ": " + e.message;
        e.path = folder.dir;
        return e;
    }
    auto c = std::const_pointer_cast<Checkpoint>(*inner);  // built for this call alone
    c->folder = std::make_shared<const ModelFolder>(folder);
    return CheckpointPtr(std::move(c));
}

}  // namespace

Expected<CheckpointPtr> openCheckpoint(const std::string& path, const OpenOptions& opts)
{
    if (auto folder = readModelFolder(path)) {
        return openModelFolder(*folder);
    }
    // Read as one zip, a DCP data file fails on its last record's missing ZIP64 locator, which says
    // nothing of what the file is.
    if (std::filesystem::path(path).extension() == ".distcp") {
        const std::string dir = std::filesystem::path(path).parent_path().string();
        Error e = makeError(ErrorCode::Unsupported,
                            "a torch.distributed.checkpoint (DCP) data file: several torch.save records back to back "
                            "that only the folder's .metadata locates, not one checkpoint; open its folder (ckptscope "
                            "inspect " +
                                displayText(dir.empty() ? std::string(".") : dir) + ")");
        e.path = path;
        return e;
    }
    // Sets and model folders were tried: an empty folder is said to be one, in plain words.
    if (std::error_code ec; std::filesystem::is_directory(path, ec) &&
                            std::filesystem::directory_iterator(path, ec) == std::filesystem::directory_iterator() &&
                            !ec) {
        Error e = makeError(ErrorCode::NotCheckpoint, "is an empty folder: there is no checkpoint in it");
        e.path = path;
        return e;
    }
    auto m = MappedFile::open(path);
    if (!m) {
        return m.error();
    }
    const Bytes b = (*m)->bytes();
    return readImpl(b, path, *m, nullptr, opts.modelConfig);
}

Expected<CheckpointPtr> readSource(const source::SourcePtr& src, const std::string& name, std::uint64_t wholeLimit)
{
    if (const auto span = src->span()) {
        const auto* mapped = dynamic_cast<const source::MappedSource*>(src.get());
        return readImpl(*span, name, mapped != nullptr ? mapped->file() : nullptr, src);
    }
    auto ranged = readRanged(src, name, wholeLimit);
    if (!ranged) {
        return ranged.error();
    }
    if (*ranged) {
        return **ranged;
    }
    // Tars and gzip wrappers, truncated zips, and streams the ranged readers leave: the whole file.
    if (src->size() > wholeLimit) {
        return makeError(ErrorCode::Unsupported,
                         "is " + humanBytes(src->size()) +
                             " in a format that is read whole (not a torch zip, safetensors or legacy stream), more "
                             "than ckptscope reads this way (" +
                             humanBytes(wholeLimit) + "); download it first");
    }
    auto whole = src->read(0, src->size());
    if (!whole) {
        return whole.error();
    }
    auto memory = std::make_shared<const source::MemorySource>(whole->bytes, whole->owner);
    return readImpl(whole->bytes, name, nullptr, memory);
}

Expected<CheckpointPtr> readCheckpoint(Bytes data, const std::string& name)
{
    return readImpl(data, name, nullptr);
}

}  // namespace ckpt
