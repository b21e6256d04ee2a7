// `ckptscope diff A B` and the window's compare view: two checkpoints matched key by key the way
// a user means them (wrapper prefixes such as DataParallel's `module.` aligned, moved tensors found
// by their bytes), and every matched tensor compared by value, as float64 across dtypes.
//
// The question it answers is "are these the same weights?": the same keys, and every tensor with
// the same dtype, shape and values (every other value equal too). How the same weights are kept
// (the saved device, a view's strides or a shared storage, a container's class, the file format)
// is shown but makes no difference (Verdict::SameWeights); Verdict::Equal is the strict answer.
//
// Keys are the leaves of the key tree (tensors, scalars, empty containers) under the selected
// node, as key paths relative to it. Tensor bytes are read from the mappings in C order, a block
// at a time, on every core; nothing is copied for a contiguous stored tensor.
#pragma once

#include "checkpoint/checkpoint.h"
#include "sharded/open_control.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

namespace ckpt::diff {

struct Options {
    std::string selectA;  // key path of the subtree compared in A ("" = the root)
    std::string selectB;
    double rtol = 1e-5;  // torch.allclose's defaults
    double atol = 1e-8;
    bool alignPrefixes = true;  // strip wrapper prefixes (transform::kWrapperSegments) before matching
    unsigned threads = 0;       // 0: one per core
};

enum class Status : std::uint8_t { OnlyA, OnlyB, Renamed, Changed, Equal };
[[nodiscard]] std::string_view statusName(Status s);  // "only_a", "only_b", "renamed", "changed", "equal"

// What was found comparing two tensors' elements. Differences are a - b, relative ones |a - b| / |b|
// over the elements where b != 0, as torch.allclose(a, b) measures against b.
struct ValueDiff {
    bool compared = false;        // the elements were read (false: a dtype without a value, or shapes differ)
    bool identicalBytes = false;  // same dtype and the same C-order bytes
    std::uint64_t differing = 0;  // elements whose values differ (NaN against NaN counts as equal)
    double maxAbs = 0;
    double maxRel = 0;
    bool allclose = false;    // every |a - b| <= atol + rtol * |b|, NaN never close (equal_nan=False)
    std::string note;         // why the values were not compared
    bool unreadable = false;  // a side's bytes could not be read (truncated, corrupt): the input is bad
};

// Change flags of a matched pair of tensors.
enum Change : std::uint8_t {
    kDType = 1U << 0U,
    kShape = 1U << 1U,
    kStride = 1U << 2U,
    kDevice = 1U << 3U,
    kValues = 1U << 4U,
    kKind = 1U << 5U,       // a tensor on one side, another value on the other
    kQuantizer = 1U << 6U,  // a quantized tensor's scheme, scale(s) or zero point(s)
    kType = 1U << 7U,       // a container's or object's class (argparse.Namespace -> dict): valueA/B name them
};

// The changes that keep the weights as they are and change only how they are stored: the device a
// storage was saved on, a view's strides (a transposed view, a storage shared with another
// tensor), the class of a container or of a value with the same repr (a numpy scalar saved as a
// float). Every other change (dtype, shape, values, quantizer, a tensor against another value)
// is one in the weights.
inline constexpr std::uint8_t kStorageChanges = kStride | kDevice | kType;

struct Entry {
    Status status = Status::Equal;
    std::uint32_t partA = 0;  // which of the side's files holds the key (Side::parts)
    std::uint32_t partB = 0;
    std::string key;   // relative key path in A (B's for only-B), as the file writes it
    std::string keyB;  // B's when both exist
    NodeIndex nodeA;   // invalid when absent
    NodeIndex nodeB;
    TensorIndex tensorA;  // invalid when not a tensor
    TensorIndex tensorB;
    std::uint8_t changes = 0;  // Change flags
    ValueDiff values;
    std::string valueA;  // a short repr of non-tensor values (with kType, the class)
    std::string valueB;
    std::string quantizerA;  // how a quantized tensor's integers map to values ("" when not quantized)
    std::string quantizerB;
    // Changed, but only in how the same weights are stored (kStorageChanges).
    [[nodiscard]] bool storedDifferently() const
    {
        return status == Status::Changed && changes != 0 && (changes & ~kStorageChanges) == 0;
    }
};

// One side of a comparison: one file, or a sharded set whose files each hold whole tensors (a
// Hugging Face set), compared as the one state dict they make up. Node and tensor indices of an
// Entry are into the part it names.
struct Side {
    std::string path;    // as the user named it
    std::string format;  // "torch-zip", ..., "Hugging Face sharded checkpoint (4 files, assembled ...)"
    std::vector<CheckpointPtr> parts;
    [[nodiscard]] const Checkpoint& part(std::uint32_t i) const { return *parts.at(i); }
    // The files it is read from: a set's members, or 1 per part.
    [[nodiscard]] std::size_t files() const
    {
        std::size_t n = 0;
        for (const auto& p : parts) {
            n += p && !p->setFiles.empty() ? p->setFiles.size() : 1;
        }
        return n;
    }
    // A side viewing `c`, which must outlive it when it is not owned elsewhere.
    [[nodiscard]] static Side of(const Checkpoint& c);
    [[nodiscard]] static Side of(CheckpointPtr c);
};

// Opens what `path` names as a side: a single checkpoint file, or the set of any format a folder,
// index or member stands for (sharded::wholeSetInput; it must be complete), opened as one
// checkpoint read in place (sharded/set_view.h), or, for a Hugging Face set that is no one
// checkpoint, its shards; a set that cannot be read is its error. `control` is told of each member
// file a set opens (sharded::OpenControl).
Expected<Side> openSide(const std::string& path, const sharded::OpenControl& control = {});

struct Counts {
    std::uint64_t onlyA = 0;
    std::uint64_t onlyB = 0;
    std::uint64_t renamed = 0;
    std::uint64_t changed = 0;
    std::uint64_t equal = 0;
    std::uint64_t unreadable = 0;         // tensor pairs whose bytes could not be read (ValueDiff::unreadable)
    std::uint64_t storedDifferently = 0;  // of `changed`, those changed only in how they are stored
    std::uint64_t valuesDiffer = 0;       // tensor pairs whose values were compared and differ
    std::uint64_t valuesAllclose = 0;     // of those, the pairs within rtol/atol
};

// The answer to "are these the same weights?". Equal: nothing differs at all. SameWeights: the
// same keys, dtypes, shapes and values, stored differently (Entry::storedDifferently). Differ:
// anything else (a key only on one side, a rename, a dtype, shape or value).
enum class Verdict : std::uint8_t { Equal, SameWeights, Differ };

struct Result {
    std::string pathA;
    std::string pathB;
    std::string selectA;
    std::string selectB;
    // Wrapper prefixes taken off key-path components on each side before matching ("module."); empty
    // when the two sides carried the same ones.
    std::vector<std::string> prefixesA;
    std::vector<std::string> prefixesB;
    std::vector<Entry> entries;  // A's order, then B's only-B keys
    Counts counts;
    std::uint64_t comparedBytes = 0;  // tensor bytes read on side A
    double rtol = 0;                  // the tolerances the values were compared with (Options)
    double atol = 0;
    // Nothing differs, not even how the weights are stored: `ckptscope diff --strict`'s exit 0.
    [[nodiscard]] bool equal() const
    {
        return counts.onlyA == 0 && counts.onlyB == 0 && counts.renamed == 0 && counts.changed == 0;
    }
    // The same weights, however they are stored: `ckptscope diff`'s exit 0.
    [[nodiscard]] bool sameWeights() const
    {
        return counts.onlyA == 0 && counts.onlyB == 0 && counts.renamed == 0 &&
               counts.changed == counts.storedDifferently;
    }
    [[nodiscard]] Verdict verdict() const
    {
        return equal() ? Verdict::Equal : (sameWeights() ? Verdict::SameWeights : Verdict::Differ);
    }
};

// Bytes read so far of the total to read; called from worker threads.
using ProgressFn = std::function<void(std::uint64_t done, std::uint64_t total)>;

// Errors: a select path that names nothing (Usage), a storage that cannot be read (its file's
// error), a file that changed size while read, Cancelled when `stop` was requested.
Expected<Result> compare(const Side& a, const Side& b, const Options& opts, std::stop_token stop = {},
                         const ProgressFn& progress = {});
Expected<Result> compare(const Checkpoint& a, const Checkpoint& b, const Options& opts, std::stop_token stop = {},
                         const ProgressFn& progress = {});

// The histogram of a - b over a matched pair of the same shape, in `bins` equal bins over
// [low, high] (the result's range, which is symmetric around 0 and covers every finite difference).
struct DiffHistogram {
    std::vector<std::uint64_t> counts;
    double low = 0;
    double high = 0;
};
Expected<DiffHistogram> differenceHistogram(const Checkpoint& a, TensorIndex ta, const Checkpoint& b, TensorIndex tb,
                                            std::size_t bins = 32, std::stop_token stop = {});

// Reports: text for people, JSON (util/json_text.h kJsonSchema) for scripts, one line for a file pair.
struct TextOptions {
    bool listEqual = false;  // name every equal key, not only count them
};
[[nodiscard]] std::string renderText(const Result& r, const Side& a, const Side& b, const TextOptions& opts = {});
[[nodiscard]] std::string renderJson(const Result& r, const Side& a, const Side& b);
[[nodiscard]] std::string renderText(const Result& r, const Checkpoint& a, const Checkpoint& b,
                                     const TextOptions& opts = {});
[[nodiscard]] std::string renderJson(const Result& r, const Checkpoint& a, const Checkpoint& b);
[[nodiscard]] std::string renderSummary(const Result& r);
// "equal", "same weights", "differ": the verdict as the text reports say it.
[[nodiscard]] std::string_view verdictText(Verdict v);

}  // namespace ckpt::diff
