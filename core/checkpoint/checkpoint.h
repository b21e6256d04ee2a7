// The checkpoint model: what one file holds, as torch.load(map_location='cpu') would see it,
// read without running any of it.
//
// A Checkpoint is an immutable snapshot shared as std::shared_ptr<const Checkpoint>: the value
// arena from the unpickler, a storage table (one row per persistent-id key, with the file offset
// of its bytes), a flat node table over the key tree (children contiguous, so a tree model answers
// parent/rowCount in O(1)), a flat tensor index and an object index. Key paths join container
// levels with '/', dict keys as written, sequence positions as numbers; an opaque object's state
// appears under the object's path as if it were a dict (`_modules/conv/_parameters/weight`).
#pragma once

#include "checkpoint/indices.h"
#include "checkpoint/script_classes.h"
#include "pickle/value.h"
#include "source/byte_source.h"
#include "util/bytes.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/model_config.h"
#include "util/tied_pairs.h"

#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ckpt {

struct ModelFolder;  // checkpoint/model_folder.h
class Checkpoint;

enum class Format : std::uint8_t { TorchZip, TorchLegacy, Safetensors, TorchTar };
// "torch-zip", "torch-legacy", "safetensors", "torch-tar" (PyTorch < 0.1.10)
[[nodiscard]] std::string_view formatName(Format f);

inline constexpr NodeIndex kRootNode{0};

enum class NodeKind : std::uint8_t {
    Dict,
    OrderedDict,
    List,
    Tuple,
    Set,
    Tensor,     // a tensor or nn.Parameter
    Module,     // an opaque object whose state looks like an nn.Module's __dict__
    Object,     // any other opaque object (argparse.Namespace, numpy values, ...)
    Scalar,     // None, bool, int, float, str, bytes, dtype, device, torch.Size, globals
    Recursive,  // a reference back to one of its own ancestors (cyclic pickle)
};
[[nodiscard]] std::string_view nodeKindName(NodeKind k);

struct Node {
    NodeIndex parent;              // invalid for the root
    NodeIndex firstChild{0};       // children are nodes[firstChild, firstChild + childCount)
    std::uint32_t childCount = 0;  // (its row among its siblings is Checkpoint::rowOf: not stored)
    NodeKind kind = NodeKind::Scalar;
    bool stateDictLike = false;  // a dict whose values are mostly tensors
    pickle::ValueId value;
    TensorIndex tensor;             // when kind == Tensor
    ObjectIndex object;             // for Module/Object
    std::uint32_t tensorCount = 0;  // tensors in this subtree
    std::uint64_t bytes = 0;        // sum of the subtree's tensor nbytes
    // Key-path component ("" for the root): a view of the key's string in the arena, or of the
    // checkpoint's name pool for other keys, so a memoized key reused on every level of a deep
    // tree is stored once, not once per node.
    std::string_view name;

    [[nodiscard]] NodeIndex child(std::uint32_t childRow) const { return NodeIndex{firstChild.value() + childRow}; }
};

// Chunks of text that never move, holding the key-path components that are no string value of
// the pickle (int and tuple keys, list positions).
class TextPool {
public:
    std::string_view add(std::string_view s);
    [[nodiscard]] std::uint64_t bytes() const { return bytes_; }

private:
    static constexpr std::size_t kChunk = std::size_t{64} * 1024;
    std::vector<std::unique_ptr<char[]>> chunks_;
    std::size_t used_ = 0;  // bytes taken in the last chunk
    std::size_t room_ = 0;  // and free after them
    std::uint64_t bytes_ = 0;
};

// StorageEntry and TensorEntry hold their strings and dims in pickle/compact.h's containers: a
// 40 000-tensor file has 40 000 of each, and std::string/std::vector fields made them 176 and 168
// bytes plus two heap blocks per tensor (issue 12's 64 MB inspect target).
struct StorageEntry {
    pickle::Text key;
    pickle::Text location;
    DType dtype = DType::Unknown;
    std::uint64_t numel = 0;
    std::uint64_t nbytes = 0;       // numel x element size: what torch reads
    pickle::Text record;            // zip record name (folder included), "" otherwise
    std::uint64_t fileOffset = 0;   // where the bytes start in the file
    std::uint64_t storedBytes = 0;  // bytes present in the file for it
    bool present = false;           // the file holds at least nbytes for it
    bool compressed = false;        // a compressed zip member (not mmap-able)
    std::uint16_t method = 0;       // its zip compression method (8 deflate; others torch cannot read)
    std::uint64_t compressedBytes = 0;
    std::uint64_t localHeader = 0;   // zip local header offset, for messages
    std::uint32_t crc32 = 0;         // zip central-directory CRC, 0 otherwise
    std::uint32_t tensorCount = 0;   // tensors viewing it
    std::uint64_t reachedBytes = 0;  // bytes any tensor can reach (union of view extents)
    // Its bytes are pieces of other files, read through Checkpoint::source (a set's consolidated
    // view: sharded/set_view.h); `fileOffset` and `bytes` mean nothing for it.
    bool assembled = false;
    // Whether the bytes are `nbytes` at `fileOffset` of the mapping, to be viewed or copied as they
    // are; otherwise they are read through storageData/streamStorage (inflated, or assembled).
    [[nodiscard]] bool inMapping() const { return present && !compressed && !assembled; }
};

// Where an assembled storage's bytes come from (StorageEntry::assembled).
class StorageSource {
public:
    StorageSource() = default;
    StorageSource(const StorageSource&) = delete;
    StorageSource& operator=(const StorageSource&) = delete;
    StorageSource(StorageSource&&) = delete;
    StorageSource& operator=(StorageSource&&) = delete;
    virtual ~StorageSource() = default;
    // Bytes [offset, offset + length) of storage `storage` to `sink` in pieces of at most `chunk`;
    // `sink` returning false stops with Cancelled.
    virtual Expected<void> stream(StorageIndex storage, std::uint64_t offset, std::uint64_t length,
                                  const std::function<bool(Bytes)>& sink, std::size_t chunk) const = 0;
    // Every file read from is still the one that was opened.
    [[nodiscard]] virtual Expected<void> checkUnchanged() const = 0;
    // Where the storage's bytes lie whole in one member's mapping, uncast (a shard's storage, a ZeRO
    // tensor within one partition), for writers that copy file to file: the member that holds the
    // file open, the offset there, and the CRC-32 of those bytes when its zip gave it.
    struct FileSpan {
        std::shared_ptr<const Checkpoint> member;
        std::uint64_t offset = 0;
        std::optional<std::uint32_t> crc;
    };
    [[nodiscard]] virtual std::optional<FileSpan> fileSpan(StorageIndex /*storage*/) const { return std::nullopt; }
};

struct TensorEntry {
    NodeIndex node{0};
    pickle::Text path;
    pickle::ValueId value;
    StorageIndex storage;  // invalid when storage-less
    DType dtype = DType::Unknown;
    pickle::SmallVector<std::int64_t> shape;
    pickle::SmallVector<std::int64_t> stride;
    std::int64_t storageOffset = 0;
    std::uint64_t numel = 0;
    std::uint64_t nbytes = 0;  // numel x element size
    pickle::Text location;     // storage location, or the device of storage-less forms
    bool requiresGrad = false;
    bool isParameter = false;
    bool contiguous = true;
    pickle::TensorForm form = pickle::TensorForm::Strided;
    // Whether the file holds its values: not a meta tensor (torch.save of a model built on the
    // meta device, `_rebuild_meta_tensor_no_storage`), whose shape and dtype are all there is.
    // `nbytes` is what it would take; sizes shown and summed count 0 for it.
    [[nodiscard]] bool hasData() const { return form != pickle::TensorForm::Meta; }
    [[nodiscard]] std::uint64_t dataBytes() const { return hasData() ? nbytes : 0; }
};

struct ObjectEntry {
    NodeIndex node{0};
    std::string path;
    std::string type;  // qualified name, e.g. "argparse.Namespace"
    bool isModule = false;
};

// Every GLOBAL the pickle names, with the key paths of the values that use it.
struct GlobalUse {
    std::string qualified;
    std::vector<std::string> paths;
};

class Checkpoint {
public:
    Checkpoint() = default;
    // Node names view the arena and the name pool: a copy would point into the original.
    Checkpoint(const Checkpoint&) = delete;
    Checkpoint& operator=(const Checkpoint&) = delete;
    Checkpoint(Checkpoint&&) = delete;
    Checkpoint& operator=(Checkpoint&&) = delete;
    ~Checkpoint() = default;

    Format format = Format::TorchZip;
    std::string path;
    std::uint64_t fileSize = 0;
    std::string archiveFolder;  // zip only
    std::string byteorder = "little";
    int pickleProtocol = 0;
    std::bitset<256> opcodesSeen;
    bool torchScript = false;
    ScriptClasses scriptClasses;  // a TorchScript archive's classes, from its code/ sources
    // Values shown as the root's last children under these names but not part of the root value
    // (convert does not write them): a TorchScript archive's constants.pkl tuple (`constants.pkl`:
    // no data.pkl attribute can have that name); a torch.export archive's `[constants]`,
    // `[graph_signature]` and `[archive]` (no parameter name has brackets).
    std::vector<std::pair<std::string, pickle::ValueId>> rootExtras;
    // A torch.export archive (docs/format.md §14): "pt2" (2.6+), "pt2-root" (2.1-2.5, records in no
    // folder); empty otherwise. Its root is the exported program's state dict.
    std::string exportLayout;
    std::vector<std::pair<std::string, std::string>> safetensorsMetadata;
    std::vector<std::string> warnings;
    // Archive member names carried by more than one member (a tar: torch.load reads the last of
    // them, and so does ckptscope); `duplicate-member` reports them.
    std::vector<std::string> duplicateMembers;
    // Strings whose bytes are not UTF-8, which torch.load cannot decode (UnicodeDecodeError): a
    // corrupt file, or a Python 2 str that loads only with encoding='latin1'. Shown with `\xNN`
    // escapes; `paths` are the escaped key paths of the first 100 the key tree shows.
    struct Undecodable {
        std::size_t count = 0;
        std::size_t python2 = 0;  // of which Python 2 strs
        std::string firstAt;      // "byte N of data.pkl", "byte N" (of a legacy stream)
        std::vector<std::string> paths;
    } undecodable;

    // A zip whose end record was gone (a download or copy cut off), read from its local headers:
    // the storages whose records were not whole are `present == false`, and torch.load refuses
    // the file. `endsIn` says where the file ends ("inside record 'a/data/3', which starts at
    // byte N", "in the central directory, after every record").
    struct Truncation {
        bool salvaged = false;
        std::uint64_t records = 0;  // whole records found
        bool inDirectory = false;   // every record is whole; the cut is in the central directory
        std::string endsIn;
    } truncation;

    pickle::Arena arena;
    pickle::ValueId root;
    IndexedVector<NodeIndex, Node> nodes;  // nodes[kRootNode] is the root
    TextPool names;                        // see Node::name
    IndexedVector<StorageIndex, StorageEntry> storages;
    IndexedVector<TensorIndex, TensorEntry> tensors;
    IndexedVector<ObjectIndex, ObjectEntry> objects;
    std::vector<GlobalUse> globals;

    std::shared_ptr<const MappedFile> file;  // keeps the bytes below alive
    Bytes bytes;                             // the whole file, where it is mapped or in memory
    // What the file was read from (source/byte_source.h): a mapped file, bytes in memory, or a file
    // over HTTP, which `bytes` is empty for and whose storages are read through `source` below.
    source::SourcePtr input;
    // A checkpoint read from inside a compressed file: the wrapper's name ("gzip") and the
    // inflated bytes that `bytes` views (`file` is then null: nothing can be copied from it).
    std::string compression;
    std::shared_ptr<const std::vector<std::byte>> inflated;
    // A checkpoint read from a member of an archive that torch.load cannot read (an AllenNLP
    // model.tar.gz's `weights.th`): the member's name, shown in place of the archive; empty
    // otherwise. `bytes` then views the member alone (a copy, or the inflated archive).
    std::string archiveMember;
    // A checkpoint opened through the folder that holds it beside a run's other state (an
    // accelerate save_state folder, a PEFT adapter, a Trainer checkpoint-N/): that folder, with what
    // each of its files is; null when the file itself was named. `path` is the model file's.
    std::shared_ptr<const ModelFolder> folder;
    // config.json beside a safetensors model file (or a Hugging Face set's folder): its class, ties and
    // quantization_config; nullopt without one.
    std::optional<ModelConfig> modelConfig;
    // The names that model ties (util/tied_pairs.h): `restored` ones are keys of the root dict holding
    // the tensor they are tied to, as model.state_dict() has them (convert writes them so); the rest
    // are reported. Empty unless a safetensors model file was opened by its path.
    TieReport ties;
    // A set opened as one checkpoint (sharded/set_view.h): what its assembled storages read from;
    // `path` is then the set's folder, and `file` and `bytes` are empty.
    std::shared_ptr<const StorageSource> source;
    std::vector<std::string> setFiles;  // the files its bytes are read from, as its format names them
    // Every file of the set (sharded::memberFiles: those, and its index, `latest`, metadata), as
    // paths: a write refuses each as its target (write::detail::checkTarget).
    std::vector<std::string> setMembers;

    [[nodiscard]] std::string pathOf(NodeIndex node) const;
    [[nodiscard]] const Node& node(NodeIndex i) const { return nodes[i]; }
    // A node's position among its parent's children (0 for the root): siblings are contiguous.
    [[nodiscard]] std::uint32_t rowOf(NodeIndex i) const
    {
        const Node& n = nodes[i];
        return n.parent.valid() ? i.value() - nodes[n.parent].firstChild.value() : 0;
    }
    // Finds a node by key path ("" = root); invalid when absent.
    [[nodiscard]] NodeIndex find(std::string_view keyPath) const;
    // The bytes of a storage, as torch reads them: a view into the mapping; a deflated member is
    // inflated into `scratch`, unless it would take more than the read's memory budget allows for
    // its compressed size (a decompression bomb): then a Limit error says to stream it instead.
    Expected<Bytes> storageData(StorageIndex storage, std::vector<std::byte>& scratch) const;
    // Bytes [offset, offset + length) of a storage handed to `sink` in pieces of at most `chunk`:
    // views of the mapping, or inflated one chunk at a time, so memory stays one chunk whatever a
    // deflated record declares. Reading a compressed storage whole also checks its size and CRC.
    // `sink` returning false stops with Cancelled. Errors carry the checkpoint's path.
    Expected<void> streamStorage(StorageIndex storage, std::uint64_t offset, std::uint64_t length,
                                 const std::function<bool(Bytes)>& sink, std::size_t chunk = 4U << 20) const;
    // `e`, naming this checkpoint's file unless it names one already.
    [[nodiscard]] Error withPath(Error e) const;
    // The mapping's SIGBUS guard (MappedFile): an error once the file shrank while it was read.
    // Every result computed from the bytes is checked with it before it is trusted.
    [[nodiscard]] Expected<void> checkUnchanged() const;
    // Storage bytes per saved location (what torch.load would allocate there), "cpu" first.
    [[nodiscard]] std::vector<std::pair<std::string, std::uint64_t>> bytesByLocation() const;
};

using CheckpointPtr = std::shared_ptr<const Checkpoint>;

// The value a node that is no tensor and no container shows, in inspect's SHAPE/VALUE column, its
// JSON and the window's value column alike: a scalar's repr; a value-like object's value (`0.7`
// for a numpy scalar, `PosixPath('/runs/x')`: pickle::shortRepr renders them); "<recursive
// reference>". Empty for tensors, containers and objects with children.
[[nodiscard]] std::optional<std::string> leafValueText(const Checkpoint& c, NodeIndex node, std::size_t maxLen = 60);

// Opens and maps a file and reads it. The error message names the real cause (truncated download,
// Git LFS pointer, HTML page, TorchScript archive, not a checkpoint at all). A folder that holds one
// model beside its training state (model_folder.h) opens that model, with `folder` set. A DCP data file
// (`__R_N.distcp`: several torch.save records back to back that only its folder's .metadata
// locates) is refused as such, Unsupported; its folder is what opens (core/sharded).
struct OpenOptions {
    // Read config.json beside a safetensors model file and restore the names its model ties
    // (util/tied_pairs.h); off for a set's members, whose set does that for the whole model.
    bool modelConfig = true;
};
Expected<CheckpointPtr> openCheckpoint(const std::string& path, const OpenOptions& opts = {});
// Reads from memory (fuzzing, tests); `name` is used in messages.
Expected<CheckpointPtr> readCheckpoint(Bytes data, const std::string& name);
// Reads from any byte source. One that is not mapped (a file over HTTP) is read by range: a torch
// zip's end records, directory and non-storage records; a safetensors header; a legacy stream's
// pickles; storages only when something reads them (SourceStorages). Other formats (tar, gzip, a
// truncated zip) are read whole, up to `wholeLimit` bytes.
Expected<CheckpointPtr> readSource(const source::SourcePtr& src, const std::string& name,
                                   std::uint64_t wholeLimit = std::uint64_t{4} << 30);

}  // namespace ckpt
