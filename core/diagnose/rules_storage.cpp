// Facts about the container and its storages: the legacy stream format, TorchScript archives,
// storages missing from the file, bytes no tensor reaches, and tensors sharing a storage.
#include "archive/zip.h"
#include "checkpoint/model_folder.h"
#include "diagnose/rules.h"
#include "util/shape_text.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

namespace ckpt::diagnose {
namespace {

constexpr std::uint64_t kBloatWarnBytes = 1ULL << 20;
constexpr std::size_t kExamples = 3;

// The tensors viewing each storage, by storage index.
using TensorsByStorage = std::vector<std::vector<TensorIndex>>;

TensorsByStorage tensorsByStorage(const Checkpoint& ckpt)
{
    TensorsByStorage out(ckpt.storages.size());
    for (std::uint32_t i = 0; i < ckpt.tensors.size(); ++i) {
        const TensorIndex t{i};
        const auto s = ckpt.tensors[t].storage;
        if (s.valid() && s.value() < out.size()) {
            out[s.value()].push_back(t);
        }
    }
    return out;
}

void duplicateMembers(const Checkpoint& ckpt, Findings& out)
{
    if (ckpt.duplicateMembers.empty()) {
        return;
    }
    std::string names;
    for (std::size_t i = 0; i < ckpt.duplicateMembers.size() && i < 5; ++i) {
        names += (i ? ", '" : "'") + ckpt.duplicateMembers[i] + "'";
    }
    if (ckpt.duplicateMembers.size() > 5) {
        names += " and " + std::to_string(ckpt.duplicateMembers.size() - 5) + " more";
    }
    Finding f;
    f.code = "duplicate-member";
    f.severity = Severity::Error;
    f.title = "Archive members named twice: readers disagree on which one is the file";
    f.detail = "More than one member is named " + names +
               ". Python's tarfile, and so torch.load, reads the last of them, and ckptscope shows that one; a "
               "reader that takes the first sees another checkpoint. No torch.save writes this: the file was "
               "put together by hand, which is how a harmless first pickle hides the one torch loads. Fix: "
               "rewrite it (convert writes what torch.load reads).";
    f.fix = transform::Options{};
    out.push_back(std::move(f));
}

void legacyFormat(const Checkpoint& ckpt, Findings& out)
{
    duplicateMembers(ckpt, out);
    if (ckpt.format == Format::TorchTar) {
        Finding f;
        f.code = "legacy-format";
        f.severity = Severity::Warning;
        f.title = "Tar-format checkpoint from PyTorch < 0.1.10, not a zip archive";
        f.detail = "The file is the tar archive (members storages, tensors, pickle, sys_info) that torch.save wrote "
                   "before PyTorch 0.1.10. Current torch.load still reads it, but refuses weights_only=True "
                   "(\"Cannot use ``weights_only=True`` with files saved in the legacy .tar format.\"), and so "
                   "PyTorch 2.6+ refuses it by default; mmap and other readers fail too. Fix: rewrite it as a zip "
                   "archive.";
        f.fix = transform::Options{};
        out.push_back(std::move(f));
        return;
    }
    if (ckpt.format != Format::TorchLegacy) {
        return;
    }
    Finding f;
    f.code = "legacy-format";
    f.severity = Severity::Warning;
    f.title = "Legacy (pre-1.6) serialization format, not a zip archive";
    f.detail = "The file is the legacy magic-number stream that torch.save wrote before PyTorch 1.6 (or with "
               "_use_new_zipfile_serialization=False). Current PyTorch still reads it, but only by reading every "
               "byte in order: torch.load(mmap=True) refuses it (\"mmap can only be used with files saved with "
               "`torch.save(_, _use_new_zipfile_serialization=True)`, please torch.save your checkpoint with this "
               "option in order to use mmap.\"), storages cannot be read lazily, and tools that expect the zip "
               "layout (torch.jit, C++ readers) fail. Fix: rewrite it as a zip archive.";
    f.fix = transform::Options{};
    out.push_back(std::move(f));
}

// A checkpoint read from an archive's member (an AllenNLP model.tar.gz's weights.th): one finding
// names the member, compressed or not, in place of compressed-file's advice to gunzip, which would
// leave a tar that torch.load cannot read either.
void archiveMember(const Checkpoint& ckpt, Findings& out)
{
    if (ckpt.archiveMember.empty()) {
        return;
    }
    const std::string wrapped =
        ckpt.compression.empty() ? std::string("a tar archive") : "a " + ckpt.compression + "-compressed tar archive";
    Finding f;
    f.code = "archive-member";
    f.severity = Severity::Error;
    f.title = "An AllenNLP model archive: the checkpoint is its member '" + ckpt.archiveMember +
              "', which torch.load cannot reach";
    f.detail = "The file is " + wrapped + " as AllenNLP's archive_model writes it: '" + ckpt.archiveMember +
               "' (the model's state dict, a " + std::string(formatName(ckpt.format)) +
               " checkpoint shown here), config.json and vocabulary/. torch.load reads none of it; "
               "allennlp.models.load_archive extracts the archive and loads the weights. Fix: extract '" +
               ckpt.archiveMember + "' (tar -xf FILE " + ckpt.archiveMember +
               "), or convert the file, which writes the checkpoint alone.";
    f.fix = transform::Options{};
    out.push_back(std::move(f));
}

// A checkpoint opened through its folder (model_folder.h): which file the model is and what the
// others are, so a user who named accelerate's save_state folder knows what was shown and that
// the optimizer, scheduler and RNG state beside it are files of their own. Information, not a
// problem: each member loads on its own as its writer saved it.
void modelFolder(const Checkpoint& ckpt, Findings& out)
{
    if (!ckpt.folder) {
        return;
    }
    const ModelFolder& folder = *ckpt.folder;
    Finding f;
    f.code = "model-folder";
    f.severity = Severity::Info;
    if (folder.adapter()) {
        const AdapterConfig about = folder.adapterConfig.value_or(AdapterConfig{});
        f.title = "The folder is " + folder.layout + "; shown is its adapter, " + folder.model() +
                  ", which needs its base model" + (about.baseModel.empty() ? "" : " '" + about.baseModel + "'");
        f.detail = "Each file in it is saved on its own: " + folder.memberList() +
                   ". The adapter: " + adapterSummary(about) + ". " + folder.model() +
                   " holds the adapter's weights alone (LoRA matrices and the like, keyed as the base model's "
                   "modules with the adapter's names), not a model: load " +
                   (about.baseModel.empty() ? std::string("its base model") : "that base model") +
                   " and apply the adapter with peft's PeftModel.from_pretrained, or merge it "
                   "into the base model (merge_and_unload) to have one model file. torch.load (or safetensors) reads "
                   "the adapter file, not the folder; inspect, check or convert another member by its name.";
    } else {
        f.title = "The folder is " + folder.layout + "; shown is its model, " + folder.model();
        f.detail = "Each file in it is saved on its own: " + folder.memberList() +
                   ". torch.load (or safetensors) reads the model file, not the folder; inspect, check or convert "
                   "another member by its name.";
    }
    for (const auto& m : folder.members) {
        f.paths.push_back(m.name);
    }
    out.push_back(std::move(f));
}

void compressedFile(const Checkpoint& ckpt, Findings& out)
{
    if (ckpt.compression.empty() || !ckpt.archiveMember.empty()) {
        return;
    }
    Finding f;
    f.code = "compressed-file";
    f.severity = Severity::Error;
    f.title = "The checkpoint is wrapped in " + ckpt.compression + ", which torch.load cannot read";
    f.detail = "The file is a " + ckpt.compression + "-compressed " + std::string(formatName(ckpt.format)) +
               " checkpoint. torch.load looks only at the first bytes for a zip or a pickle and stops with "
               "\"invalid load key, '\\x1f'\". ckptscope read the checkpoint inside. Fix: gunzip the file, or "
               "convert it, which writes the checkpoint uncompressed.";
    f.fix = transform::Options{};
    out.push_back(std::move(f));
}

void torchScript(const Checkpoint& ckpt, Findings& out)
{
    if (!ckpt.torchScript) {
        return;
    }
    Finding f;
    f.code = "torchscript-archive";
    // A warning, not information: since 2.6 a plain torch.load of it fails.
    f.severity = Severity::Warning;
    f.title = "A TorchScript archive (torch.jit.save), not a torch.save checkpoint: torch.load(weights_only=True), "
              "the default since PyTorch 2.6, refuses it";
    f.detail = "The archive holds TorchScript code and constants. torch.load hands it to torch.jit.load (with the "
               "warning \"'torch.load' received a zip file that looks like a TorchScript archive dispatching to "
               "'torch.jit.load' (call 'torch.jit.load' directly to silence this warning)\") only with "
               "weights_only=False; with weights_only=True (2.6+'s default) it stops with \"Cannot use "
               "``weights_only=True`` with TorchScript archives passed to ``torch.load``\", and torch.jit.load "
               "compiles and runs the archive's code. ckptscope reads the module tree of data.pkl and the parameter "
               "and buffer lists of the archive's class sources without running anything: `inspect` lists the state "
               "dict, and `convert FILE -o OUT` writes exactly what torch.jit.load(f).state_dict() returns as a "
               "plain torch.save file that loads with weights_only=True (quantized packed params, which that state "
               "dict lacks too, are named as dropped in the plan).";
    f.fix = transform::Options{};
    out.push_back(std::move(f));
}

void exportArchive(const Checkpoint& ckpt, Findings& out)
{
    if (ckpt.exportLayout.empty()) {
        return;
    }
    Finding f;
    f.code = "export-archive";
    f.severity = Severity::Warning;
    f.title = "A torch.export archive (.pt2, torch.export.save), not a torch.save checkpoint: torch.load refuses it";
    f.detail = "The archive holds an exported program: its graph as JSON, its weights and constants as raw "
               "records described by JSON configs. torch.load finds no data.pkl in it "
               "(\"PytorchStreamReader failed locating file data.pkl\"); torch.export.load rebuilds the program. "
               "ckptscope reads the weights without running anything: the key tree's top level is the exported "
               "program's state dict, keyed by the names the export records, beside `[constants]`, "
               "`[graph_signature]` and `[archive]`; `convert FILE -o OUT` writes the state dict as a plain "
               "torch.save file that loads with weights_only=True.";
    f.fix = transform::Options{};
    out.push_back(std::move(f));
}

void missingStorages(const Checkpoint& ckpt, const TensorsByStorage& users, Findings& out)
{
    std::vector<StorageIndex> missing;
    for (std::uint32_t i = 0; i < ckpt.storages.size(); ++i) {
        const StorageIndex s{i};
        if (!ckpt.storages[s].present) {
            missing.push_back(s);
        }
    }
    if (missing.empty()) {
        return;
    }
    Finding f;
    f.code = "truncated-or-missing-storage";
    f.severity = Severity::Error;
    f.title = plural(missing.size(), "storage is", "storages are") + " missing or cut short in the file";
    std::uint64_t lacking = 0;
    std::string examples;
    for (std::size_t i = 0; i < missing.size(); ++i) {
        const auto& s = ckpt.storages[missing[i]];
        lacking += s.nbytes > s.storedBytes ? s.nbytes - s.storedBytes : 0;
        if (i < kExamples) {
            examples += std::string(i ? "; " : "") + "storage " + s.key +
                        (s.record.empty() ? std::string() : " (" + s.record + ")") + " needs " + bytesText(s.nbytes) +
                        ", the file holds " + bytesText(s.storedBytes);
        }
        for (auto t : users[missing[i].value()]) {
            f.paths.push_back(ckpt.tensors[t].path);
        }
    }
    f.detail = examples + (missing.size() > kExamples ? "; ..." : "") + ". In all " + bytesText(lacking) +
               " of tensor data are absent: the download or save was interrupted, or the file was cut. torch.load "
               "fails when it reaches the first of them; only the tensors listed are affected.";
    out.push_back(std::move(f));
}

// A zip read from its local headers because its end was cut off (Checkpoint::truncation). One
// finding names the cut, what survived and every tensor lost, so missingStorages stays quiet.
void truncatedArchive(const Checkpoint& ckpt, const TensorsByStorage& users, Findings& out)
{
    const auto& cut = ckpt.truncation;
    std::uint64_t lostStorages = 0;
    std::uint64_t lostBytes = 0;
    Finding f;
    for (std::uint32_t i = 0; i < ckpt.storages.size(); ++i) {
        const auto& s = ckpt.storages[StorageIndex{i}];
        if (s.present) {
            continue;
        }
        ++lostStorages;
        lostBytes += s.nbytes;
        for (auto t : users[i]) {
            f.paths.push_back(ckpt.tensors[t].path);
        }
    }
    f.code = "truncated-archive";
    f.severity = Severity::Error;
    f.title = "The file is cut off at byte " + std::to_string(ckpt.fileSize) + ": " +
              (lostStorages == 0 ? std::string("every tensor survived, the zip's directory did not")
                                 : plural(f.paths.size(), "tensor is", "tensors are") + " lost");
    std::string lost;
    for (std::size_t i = 0; i < f.paths.size() && i < kExamples; ++i) {
        lost += std::string(i ? ", " : "") + f.paths[i];
    }
    if (f.paths.size() > kExamples) {
        lost += ", ...";
    }
    f.detail = "The zip archive has no central directory: the file ends " + cut.endsIn +
               ". torch.load refuses it "
               "whole (torch 1.13: " +
               // Measured: a cut after the last storage record makes miniz seek before the file's start.
               (lostStorages == 0 ? std::string("\"[Errno 22] Invalid argument\"")
                                  : "\"" + std::string(archive::kTruncatedTorchError) + "\"") +
               "). Read from the local headers, " + plural(cut.records, "record is", "records are") + " whole" +
               (lostStorages == 0 ? std::string(" and every storage is among them")
                                  : "; " + plural(lostStorages, "storage", "storages") + " holding " +
                                        bytesText(lostBytes) + " are missing, so " +
                                        plural(f.paths.size(), "tensor", "tensors") + " cannot be read: " + lost) +
               ". Fix: download or copy the file again, and compare its size with the source's; convert --salvage "
               "writes what survived.";
    out.push_back(std::move(f));
}

// Compressed storage records are read to the end once (a chunk at a time): torch.load fails on a
// compression method it lacks, a corrupt deflate stream, a size that lies or a bad CRC, and so
// would every reader after it, so the file is damaged even though its index reads.
void unreadableStorages(const Checkpoint& ckpt, const TensorsByStorage& users, Findings& out)
{
    std::vector<std::pair<StorageIndex, std::string>> bad;
    for (std::uint32_t i = 0; i < ckpt.storages.size(); ++i) {
        const StorageIndex s{i};
        const auto& st = ckpt.storages[s];
        if (!st.present || !st.compressed) {
            continue;
        }
        if (auto ok = ckpt.streamStorage(s, 0, st.nbytes, [](Bytes) { return true; }); !ok) {
            bad.emplace_back(s, ok.error().message);
        }
    }
    if (bad.empty()) {
        return;
    }
    Finding f;
    f.code = "unreadable-storage";
    f.severity = Severity::Error;
    f.title = plural(bad.size(), "storage record cannot", "storage records cannot") + " be read";
    for (std::size_t i = 0; i < bad.size(); ++i) {
        if (i < kExamples) {
            f.detail +=
                std::string(i ? "; " : "") + "storage " + ckpt.storages[bad[i].first].key + ": " + bad[i].second;
        }
        for (auto t : users[bad[i].first.value()]) {
            f.paths.push_back(ckpt.tensors[t].path);
        }
    }
    f.detail += std::string(bad.size() > kExamples ? "; ..." : "") +
                ". torch.load stops at an unsupported compression (\"unsupported method\") or a size that lies "
                "(\"unexpected decompressed size\"), and reads a corrupt deflate stream without a word into garbage "
                "values (PyTorch 1.13 does); no conversion can keep them. The file was damaged, or rewritten by a zip "
                "tool with a compression PyTorch cannot read: re-download it, or re-save it from a copy that loads.";
    out.push_back(std::move(f));
}

void storageBloat(const Checkpoint& ckpt, const TensorsByStorage& users, Findings& out)
{
    struct Waste {
        StorageIndex storage;
        std::uint64_t bytes;
    };
    std::vector<Waste> wastes;
    std::uint64_t wasted = 0;
    std::uint64_t total = 0;
    for (std::uint32_t i = 0; i < ckpt.storages.size(); ++i) {
        const StorageIndex s{i};
        const auto& st = ckpt.storages[s];
        total += st.nbytes;
        if (st.tensorCount == 0 || users[i].empty() || st.reachedBytes >= st.nbytes) {
            continue;
        }
        wastes.push_back({s, st.nbytes - st.reachedBytes});
        wasted += st.nbytes - st.reachedBytes;
    }
    if (wastes.empty()) {
        return;
    }
    std::sort(wastes.begin(), wastes.end(), [](const Waste& a, const Waste& b) { return a.bytes > b.bytes; });
    Finding f;
    f.code = "storage-bloat";
    const bool big = wasted >= kBloatWarnBytes || wasted * 10 >= total;
    f.severity = big ? Severity::Warning : Severity::Info;
    f.title = bytesText(wasted) + " stored that no tensor reaches";
    std::string examples;
    for (std::size_t i = 0; i < wastes.size(); ++i) {
        const auto& st = ckpt.storages[wastes[i].storage];
        if (i < kExamples) {
            const auto& t = ckpt.tensors[users[wastes[i].storage.value()].front()];
            examples += std::string(i ? "; " : "") + quotedPath(t.path) + " (" + std::string(dtypeName(t.dtype)) + " " +
                        shapeText(t.shape) + ") views " + bytesText(st.reachedBytes) + " of a " + bytesText(st.nbytes) +
                        " storage";
        }
        for (auto t : users[wastes[i].storage.value()]) {
            f.paths.push_back(ckpt.tensors[t].path);
        }
    }
    f.detail = plural(wastes.size(), "storage holds", "storages hold") + " " + bytesText(wasted) +
               " that no tensor can reach (of " + bytesText(total) + " in all storages): " + examples +
               (wastes.size() > kExamples ? "; ..." : "") +
               ". torch.save writes a view's whole storage (a slice or a few rows of a large tensor), and "
               "torch.load reads and allocates all of it. Fix: compact, so each storage keeps only the bytes its "
               "tensors view.";
    transform::Options fix;
    fix.compact = true;
    f.fix = fix;
    out.push_back(std::move(f));
}

bool sameView(const TensorEntry& a, const TensorEntry& b)
{
    return a.storageOffset == b.storageOffset && a.shape == b.shape && a.stride == b.stride && a.dtype == b.dtype;
}

// Whether two of `ts` are the same view: a tie inside a storage its other tensors view elsewhere
// (a tied embedding in a ZeRO param group written as one storage). Sorted, so a group of
// thousands of params costs n log n.
bool holdsATie(const Checkpoint& ckpt, std::vector<TensorIndex> ts)
{
    auto before = [&](TensorIndex ia, TensorIndex ib) {
        const auto& a = ckpt.tensors[ia];
        const auto& b = ckpt.tensors[ib];
        if (a.storageOffset != b.storageOffset || a.dtype != b.dtype) {
            return std::tie(a.storageOffset, a.dtype) < std::tie(b.storageOffset, b.dtype);
        }
        if (a.shape != b.shape) {
            return std::lexicographical_compare(a.shape.begin(), a.shape.end(), b.shape.begin(), b.shape.end());
        }
        return std::lexicographical_compare(a.stride.begin(), a.stride.end(), b.stride.begin(), b.stride.end());
    };
    std::sort(ts.begin(), ts.end(), before);
    return std::adjacent_find(ts.begin(), ts.end(), [&](TensorIndex a, TensorIndex b) {
               return sameView(ckpt.tensors[a], ckpt.tensors[b]);
           }) != ts.end();
}

void sharedStorage(const Checkpoint& ckpt, const TensorsByStorage& users, Findings& out)
{
    std::vector<StorageIndex> groups;
    for (std::uint32_t i = 0; i < users.size(); ++i) {
        if (users[i].size() > 1) {
            groups.emplace_back(i);
        }
    }
    if (groups.empty()) {
        return;
    }
    Finding f;
    f.code = "shared-storage";
    f.severity = Severity::Info;
    std::size_t tied = 0;
    std::size_t partial = 0;
    std::string examples;
    for (std::size_t g = 0; g < groups.size(); ++g) {
        const auto& ts = users[groups[g].value()];
        const auto& first = ckpt.tensors[ts.front()];
        const bool identical =
            std::all_of(ts.begin(), ts.end(), [&](TensorIndex t) { return sameView(ckpt.tensors[t], first); });
        const bool someTied = identical || holdsATie(ckpt, ts);
        tied += someTied ? 1 : 0;
        partial += identical ? 0 : 1;
        if (g < kExamples) {
            std::string names;
            for (std::size_t i = 0; i < ts.size() && i < 4; ++i) {
                names += (i ? (identical ? " = " : ", ") : "") + quotedPath(ckpt.tensors[ts[i]].path);
            }
            if (ts.size() > 4) {
                names += ", ...";
            }
            examples += std::string(g ? "; " : "") + names +
                        (identical  ? " (the same view: tied)"
                         : someTied ? " (different views, some of them the same: tied)"
                                    : " (different views)");
        }
        for (auto t : ts) {
            f.paths.push_back(ckpt.tensors[t].path);
        }
    }
    f.title = plural(groups.size(), "storage is", "storages are") + " shared by several tensors";
    f.detail = examples + (groups.size() > kExamples ? "; ..." : "") +
               ". torch.load keeps them shared (tied weights stay tied). safetensors cannot share: an export keeps "
               "one name per tied group (" +
               plural(tied, "group", "groups") +
               ", the others recorded as aliases in __metadata__, as "
               "safetensors' save_model does) and writes each other view as a copy of its own (" +
               plural(partial, "group", "groups") + ").";
    out.push_back(std::move(f));
}

}  // namespace

// One DeepSpeed ZeRO-3 rank's model states read alone (its folder's other files absent, or the
// window's single file): `module` holds torch.empty(0) placeholders, and no conversion of this
// file can give weights it does not hold, so every other finding loses its fix.
void zero3Placeholders(const Checkpoint& ckpt, Findings& out)
{
    const NodeIndex module = ckpt.find("module");
    if (!module.valid() || !ckpt.find("param_shapes").valid() ||
        (!ckpt.find("ds_version").valid() && !ckpt.find("ds_config").valid())) {
        return;
    }
    std::vector<std::string> paths;
    for (const auto& t : ckpt.tensors) {
        if (t.path.starts_with("module/") && t.numel == 0 && t.shape.size() == 1) {
            paths.push_back(t.path);
        }
    }
    if (paths.empty()) {
        return;
    }
    const std::filesystem::path dir = std::filesystem::path(ckpt.path).parent_path();
    bool optimBeside = false;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir.empty() ? "." : dir, ec)) {
        optimBeside = optimBeside || e.path().filename().string().ends_with("_optim_states.pt");
    }
    const std::string folder = dir.empty() ? std::string(".") : dir.string();
    Finding f;
    f.code = "zero3-placeholder-module";
    f.severity = Severity::Warning;
    f.title = "The model states hold ZeRO-3 placeholders, not weights";
    f.detail = plural(paths.size(), "tensor", "tensors") +
               " under `module` have 0 elements: ZeRO-3 frees each partitioned parameter to torch.empty(0) before "
               "saving, so load_state_dict with them fails with size mismatch ... torch.Size([0]) "
               "(transformers#20082), and no conversion of this file alone can give weights it does not hold. The "
               "weights are the fp32 partitions in every rank's *_optim_states.pt, saved in the same folder (" +
               (optimBeside ? "some are beside it in " + folder
                            : "none is beside it in " + folder + ": copy them from the training nodes") +
               "). Open the folder, not this file: `ckptscope convert " + folder +
               " -o model.pt` writes the weights, as zero_to_fp32.py does.";
    f.paths = std::move(paths);
    for (auto& other : out) {
        other.fix.reset();  // an export of this file would write the placeholders
    }
    out.push_back(std::move(f));
}

void storageRules(const Checkpoint& ckpt, Findings& out)
{
    archiveMember(ckpt, out);
    modelFolder(ckpt, out);
    compressedFile(ckpt, out);
    legacyFormat(ckpt, out);
    torchScript(ckpt, out);
    exportArchive(ckpt, out);
    const auto users = tensorsByStorage(ckpt);
    if (ckpt.truncation.salvaged) {
        truncatedArchive(ckpt, users, out);
    } else {
        missingStorages(ckpt, users, out);
    }
    unreadableStorages(ckpt, users, out);
    storageBloat(ckpt, users, out);
    sharedStorage(ckpt, users, out);
}

void zeroRules(const Checkpoint& ckpt, Findings& out)
{
    zero3Placeholders(ckpt, out);
}

}  // namespace ckpt::diagnose
