// One flat description of any multi-file checkpoint ckptscope reads, for views that show a set
// without knowing its format (the window's set tab): every consolidated tensor with where its
// bytes are stored, and the set's findings.
#pragma once

#include "sharded/open_control.h"
#include "sharded/sharded.h"
#include "sharded/zero.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace ckpt::sharded {

namespace dcp {
struct Set;
}
namespace fsdp {
struct Set;
}

// A box of a tensor's global shape and the file whose bytes hold it: a DCP chunk, an FSDP rank's
// local shard. Formats that split a tensor by bytes only (a ZeRO flat partition) or not at all (a
// Hugging Face shard) have none.
struct SetPiece {
    std::uint32_t file = 0;  // into SetListing::files
    std::vector<std::int64_t> offsets;
    std::vector<std::int64_t> sizes;
    std::uint64_t bytes = 0;  // the piece's own bytes (its box's elements)
    // The byte range of the file it is read from, where the format records one (a DCP chunk's
    // torch.save record); none for an FSDP shard, which is a tensor inside a rank's pickle.
    std::optional<std::uint64_t> fileOffset;
    std::uint64_t fileLength = 0;
};

struct SetRow {
    std::string key;  // the consolidated state-dict key
    DType dtype = DType::Unknown;
    std::vector<std::int64_t> shape;  // global
    std::string location;             // saved device
    std::uint64_t nbytes = 0;
    std::string storedIn;  // "pytorch_model-00001-of-00002.bin", "3 chunks: __0_0.distcp, ..."
    // The key whose bytes these are, for a second name of one tensor (a tied head restored from
    // config.json or the index metadata, a ZeRO shared_params alias); "" for a stored tensor.
    std::string tiedTo;
    // What the writer saved it as, where a format saves more than one kind ("DTensor",
    // "ShardedTensor", "tensor" in FSDP rank files); "" otherwise.
    std::string storedAs;
    std::vector<std::uint32_t> storedInFiles;  // into SetListing::files, each once, in first use
    std::vector<SetPiece> pieces;
};

// A value that is no tensor (a DCP BYTE_IO item: a step count, an RNG state), shown by its repr.
struct SetValue {
    std::string key;
    std::optional<std::uint32_t> file;  // into SetListing::files; none when the metadata points nowhere
    std::string value;
};

struct SetListing {
    SetKind kind = SetKind::None;
    std::string dir;
    std::string index;  // the file that describes the set ("" when none)
    std::vector<std::string> files;
    // Parallel to files where the format reads each on its own (Hugging Face shards, DCP data
    // files): why one could not be read, "" when it was; empty when not tracked per file.
    std::vector<std::string> fileErrors;
    std::vector<SetRow> rows;
    std::vector<SetFinding> findings;
    std::vector<SetValue> values;
    // What a person reads after the kind in the text header, where the format says more ("version
    // 2.4.0", "rank 1 of 2 opened alone ..."); "" otherwise.
    std::string summary;
    // Format facts a script may want beside the common fields: a DCP folder's metadata version, an
    // FSDP rank file opened alone.
    std::vector<std::pair<std::string, std::variant<bool, std::string, std::int64_t>>> facts;
    // Stored bytes: a tied name's are its key's, counted once.
    [[nodiscard]] std::uint64_t totalBytes() const;
};

// The stable identifier of a set kind in JSON ("huggingface", "deepspeed-zero", "dcp", "megatron",
// "fsdp-ranks"); setKindName() is the phrase for people.
[[nodiscard]] std::string_view setKindId(SetKind k);

// What reads the set as it is, for words that must not say torch.load does (torch.load reads one
// file, never a set's folder): "transformers' from_pretrained(DIR) (safetensors.torch.load_file per
// shard)", "torch.distributed.checkpoint.load (dcp.load) into a model's state dict, or
// dcp_to_torch_save into one file", ... by kind, from the listing's files and facts.
[[nodiscard]] std::string whatLoadsSet(const SetListing& l);

// The listing of a set already open, for front ends that opened it themselves.
[[nodiscard]] SetListing listingOf(const ShardedSet& set);
[[nodiscard]] SetListing listingOf(const dcp::Set& set);
[[nodiscard]] SetListing listingOf(const fsdp::Set& set);
Expected<SetListing> listingOf(const zero::Set& set);

// What a front end opens when it is given `path`: the set it stands for (a folder, an index, a
// shard, a ZeRO rank file whose folder opens as a set), one member read alone (`alone`: an FSDP
// rank file, its rank's local shards), or nothing: an ordinary file, or a ZeRO rank file whose
// folder zero::opensAsSet() refuses, which is a torch.save file of its own. The one place that
// choice is made for the command line, diff, testload and the window.
[[nodiscard]] std::optional<SetLocation> setInput(const std::string& path);
// setInput(path) when it is a whole set: what openInput, diff's sides and testload read as one.
[[nodiscard]] std::optional<SetLocation> wholeSetInput(const std::string& path);

// Whether listSet() reads sets of this kind; the others (Megatron legacy) are only named.
[[nodiscard]] bool listsAsSet(SetKind kind);

// Errors: the formats openSet refuses, with its message.
// `control`, as readSet takes it (formats.h): told of each member file, and a stop ends the read.
Expected<SetListing> listSet(const SetLocation& loc, const OpenControl& control = {});

// Writes the set as one torch file, as `ckptscope convert DIR -o OUT` does: a Hugging Face set
// streamed storage by storage, a ZeRO folder as zero_to_fp32.py rebuilds it (or, with
// Weights::Module, the 16-bit weights of a stage 1/2 `module`; or with its optimizer state). Errors: the set is
// incomplete (nothing is written), or its format is not consolidated.
Expected<ConsolidateResult> consolidateSet(const SetLocation& loc, const std::string& outPath,
                                           const zero::Options& zeroOptions = {}, const OpenControl& control = {});
// Whether consolidateSet refused because a value it would copy calls code when unpickled (a DCP
// BYTE_IO value with os.system): convert then reads the set as one checkpoint (openView), whose plan
// drops the call and says so, as it does for a file.
[[nodiscard]] bool wouldCopyCode(const Error& e);

}  // namespace ckpt::sharded
