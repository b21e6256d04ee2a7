// Edits -> Plan: the exact effect of the options on one checkpoint (every rename, remap, drop and
// conversion), computed before anything is written; the writer only executes a Plan.
#pragma once

#include "checkpoint/checkpoint.h"
#include "pickle/value.h"
#include "transform/options.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::transform {

enum class StepKind : std::uint8_t { Select, Rename, Remap, Drop, Convert, Unwrap, Compact, Note };
[[nodiscard]] std::string_view stepKindName(StepKind k);  // "select", "rename", ...

struct PlanStep {
    StepKind kind = StepKind::Note;
    std::string path;    // key path in the input
    std::string before;  // old key / location / type
    std::string after;   // new key / location / replacement ("" when dropped)
    std::string detail;
    // A Remap: how many storages it moves from `before` to `after` (`path` is the first key among
    // them); 0 for the other steps.
    std::uint64_t count = 0;
};

// Bytes the plan computes from input storages as they are written (a block-quantized FP8 weight
// dequantized, transform/dequantize.cpp): handed on in order, a piece at a time, so a write holds
// one piece of them, never the tensor or the file.
class ComputedBytes {
public:
    ComputedBytes() = default;
    ComputedBytes(const ComputedBytes&) = delete;
    ComputedBytes& operator=(const ComputedBytes&) = delete;
    ComputedBytes(ComputedBytes&&) = delete;
    ComputedBytes& operator=(ComputedBytes&&) = delete;
    virtual ~ComputedBytes() = default;
    [[nodiscard]] virtual std::uint64_t size() const = 0;
    // Bytes [0, size()) of the result to `sink`, in order; `sink` returning false stops with Cancelled.
    // Errors name the input's storage they could not read.
    virtual Expected<void> stream(const Checkpoint& in, const std::function<bool(Bytes)>& sink) const = 0;
};

// One storage of the output: where its bytes come from.
struct OutStorage {
    StorageIndex source{0};        // the input's storage
    std::uint64_t byteOffset = 0;  // first byte taken from the source (compact)
    std::uint64_t nbytes = 0;      // bytes written
    std::string key;               // output key ("0", "1", ...)
    std::string location;          // output location
    // Bytes the plan made itself (a numpy array kept as a tensor), written instead of a range of
    // the input; `source` is then meaningless.
    std::shared_ptr<const std::string> inlineBytes;
    // Bytes computed from the input as they are written (ComputedBytes); `source` is then meaningless.
    std::shared_ptr<const ComputedBytes> computed;
    // Neither a range of an input storage nor anything else the input file holds as it is.
    [[nodiscard]] bool madeByPlan() const { return inlineBytes != nullptr || computed != nullptr; }
};

struct Plan {
    Options options;
    std::vector<PlanStep> steps;
    pickle::Arena arena;  // the output value tree (Arena::storages rewritten)
    pickle::ValueId root;
    std::vector<OutStorage> storages;  // parallel to arena.storages
    std::uint64_t tensorCount = 0;     // distinct tensors the output holds
    // The strip prefixes (options.stripPrefixes, in its order) that took something off a key or
    // renamed a _metadata entry: with only these every key is renamed the same (a strip that matched
    // nothing left each key as the next one found it), and _metadata as torch's
    // consume_prefix_in_state_dict_if_present renames it (the window's presets show these).
    std::vector<std::string> stripPrefixesUsed;
    [[nodiscard]] bool changesNothing() const;
    [[nodiscard]] std::uint64_t droppedCount() const;  // values left out (drop steps)
    [[nodiscard]] std::string toJson() const;
};

Expected<Plan> makePlan(const Checkpoint& in, const Options& opts);

// The note a torch output's plan carries for the names a model ties that the input does not store
// (TieReport::restored, but those `dropped` says the plan leaves out): which names are written as
// views of which tensor, and what decided the tie; `input` is "the file" or "the set". nullopt when
// no such name is written. A set's consolidation, which makes no plan, prints the same note.
std::optional<PlanStep> restoredTiesNote(const TieReport& ties, std::string_view input,
                                         const std::function<bool(const std::string&)>& dropped = {});

}  // namespace ckpt::transform
