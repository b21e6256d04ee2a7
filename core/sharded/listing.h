// One flat description of any multi-file checkpoint ckptscope reads, for views that show a set
// without knowing its format (the window's set tab): every consolidated tensor with where its
// bytes are stored, and the set's findings.
#pragma once

#include "sharded/sharded.h"
#include "sharded/zero.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ckpt::sharded {

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
};

struct SetListing {
    SetKind kind = SetKind::None;
    std::string dir;
    std::string index;  // the file that describes the set ("" when none)
    std::vector<std::string> files;
    std::vector<SetRow> rows;
    std::vector<SetFinding> findings;
    // Stored bytes: a tied name's are its key's, counted once.
    [[nodiscard]] std::uint64_t totalBytes() const;
};

// Whether `path` (which detectSet placed at `loc`) is read as its whole set: not for a single file,
// an FSDP rank file, or a ZeRO rank file whose
// folder zero::opensAsSet() refuses; each of those is a torch.save file of its own.
[[nodiscard]] bool readAsSet(const SetLocation& loc, const std::string& path);

// Whether listSet() reads sets of this kind; the others (Megatron legacy) are only named.
[[nodiscard]] bool listsAsSet(SetKind kind);

// Errors: the formats openSet refuses, with its message.
Expected<SetListing> listSet(const SetLocation& loc);

// Writes the set as one torch file, as `ckptscope convert DIR -o OUT` does: a Hugging Face set
// streamed storage by storage, a ZeRO folder as zero_to_fp32.py rebuilds it (or, with
// Weights::Module, the 16-bit weights of a stage 1/2 `module`; or with its optimizer state). Errors: the set is
// incomplete (nothing is written), or its format is not consolidated.
Expected<ConsolidateResult> consolidateSet(const SetLocation& loc, const std::string& outPath,
                                           const zero::Options& zeroOptions = {});

}  // namespace ckpt::sharded
