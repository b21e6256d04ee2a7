// Format detection and the per-format loaders: each fills the arena, the root and the storage
// table; index.cpp then builds the key tree. Messages name the real cause of a bad file, since
// "invalid load key, 'v'" is what torch would have said.
#include "archive/compressed.h"
#include "archive/tar.h"
#include "archive/zip.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/file_formats.h"
#include "checkpoint/index.h"
#include "checkpoint/loaders.h"
#include "checkpoint/model_folder.h"
#include "checkpoint/source_storages.h"
#include "pickle/unpickler.h"
#include "util/printable.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <sys/mman.h>
#include <unistd.h>

namespace ckpt {
namespace {

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

void readThroughSource(Checkpoint& c, std::vector<SourceStorages::Entry> entries)
{
    for (std::size_t i = 0; i < c.storages.size(); ++i) {
        auto& s = c.storages[StorageIndex{static_cast<std::uint32_t>(i)}];
        entries[i].dataOffset = s.fileOffset;
        s.assembled = s.present && !s.compressed;
    }
    c.source = std::make_shared<SourceStorages>(c.input, std::move(entries));
}

// Reading a zip of 40 000 small records touches every page of it through the local headers, 12 of
// the 98 MB peak of `inspect`. The mapping is read-only (no page holds anything the file does not),
// so a failure only means the pages stay.
void dropResidentPages(const MappedFile& file)
{
    const Bytes b = file.bytes();
    if (!b.empty()) {
        (void)::madvise(const_cast<std::byte*>(b.data()), b.size(), MADV_DONTNEED);
    }
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

Expected<void> unpickleInto(Checkpoint& c, Bytes pkl, bool legacy, const MemoryBudget& budget)
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
    return {};
}

}  // namespace detail

namespace {

using detail::dropResidentPages;

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
    // Formats are recognised in the registry's order, those whose sniff text could pass only after
    // what is no checkpoint was ruled out (file_formats.h).
    auto recognise = [&](bool weak) -> const FileFormat* {
        for (const auto& f : fileFormats()) {
            if (f.weakSniff == weak && f.sniff(data, data.size())) {
                return &f;
            }
        }
        return nullptr;
    };
    const FileFormat* format = recognise(false);
    if (format != nullptr && format->id == Format::TorchTar) {
        if (const auto weights = allenNlpWeights(data)) {
            return readTarMember(data, name, *weights, file);
        }
    }
    if (format == nullptr) {
        if (auto e = sniffNonCheckpoint(data, file != nullptr)) {
            return withPath(*e);
        }
        format = recognise(true);
    }
    auto c = std::make_shared<Checkpoint>();
    c->path = name;
    c->file = std::move(file);
    c->input = std::move(input);
    c->bytes = data;
    c->fileSize = data.size();
    if (format == nullptr) {
        if (auto text = c->file ? textFileError(data) : std::nullopt) {
            return withPath(*text);
        }
        // The first bytes help with a file the user named; an item inside a file (a DCP chunk at a
        // crafted offset) could be any file's bytes, so its error shows none.
        return withPath(fail(ErrorCode::NotCheckpoint,
                             "is not a PyTorch checkpoint: no zip, legacy-torch or safetensors signature" +
                                 (c->file ? " (first bytes: " + hexPrefix(data) + ")" : std::string())));
    }
    MemoryBudget budget;
    Expected<void> loaded = format->load(*c, budget);
    if (loaded && modelFile && c->format == Format::Safetensors) {
        detail::restoreModelTies(*c);
    }
    // A text file that starts with 'L', 'I' or '(' is no protocol-0 pickle: say what it is.
    if (!loaded && format->weakSniff && c->file) {
        if (auto text = textFileError(data)) {
            return withPath(*text);
        }
    }
    return finishRead(std::move(c), budget, std::move(loaded), name);
}

// ---- Reading from a source that is not mapped (issue 37: readers pull the ranges they need) ----

// Reads what it can from ranges; nothing when the file is to be read whole. The formats with a
// ranged reader are tried in the registry's order, those whose first look the source holds first.
Expected<std::optional<CheckpointPtr>> readRanged(const source::SourcePtr& src, const std::string& name,
                                                  std::uint64_t limit)
{
    const bool headHeld = src->holds({0, std::min(src->size(), detail::kHeadBytes)});
    const auto first = headHeld ? FileFormat::Look::Head : FileFormat::Look::Tail;
    std::vector<const FileFormat*> order;
    for (const bool preferred : {true, false}) {
        for (const auto& f : fileFormats()) {
            if (f.loadRanged != nullptr && (f.firstLook == first) == preferred) {
                order.push_back(&f);
            }
        }
    }
    for (const FileFormat* f : order) {
        auto c = std::make_shared<Checkpoint>();
        c->path = name;
        c->input = src;
        c->fileSize = src->size();
        MemoryBudget budget;
        auto read = f->loadRanged(c, budget, limit);
        if (read && *read == detail::RangedRead::NotThisFormat) {
            continue;
        }
        if (read && *read == detail::RangedRead::ReadWhole) {
            return std::optional<CheckpointPtr>();
        }
        auto done = finishRead(c, budget, read ? Expected<void>() : Expected<void>(read.error()), name);
        if (!done) {
            return done.error();
        }
        return std::optional(*done);
    }
    return std::optional<CheckpointPtr>();
}

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
    auto mapped = source::MappedSource::open(path);
    if (!mapped) {
        return mapped.error();
    }
    if (const auto span = (*mapped)->span()) {
        return readImpl(*span, path, (*mapped)->file(), *mapped, opts.modelConfig);
    }
    return readSource(*mapped, path);
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
