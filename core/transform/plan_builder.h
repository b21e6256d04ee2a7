// Shared state of makePlan's passes (transform.cpp runs them in order: select, drop, unwrap,
// sanitize, prefixes, storages). Each pass edits Plan::arena in place and records its steps.
#pragma once

#include "transform/transform.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace ckpt::transform::detail {

struct Builder {
    const Checkpoint& in;
    const Options& opts;
    Plan& plan;
    std::string rootPath;                          // input key path of the output root
    std::unordered_set<std::uint32_t> stateDicts;  // dict values whose keys are state-dict keys
    // Storages the plan added (arena storage index -> bytes): numpy arrays made tensors.
    std::unordered_map<std::uint32_t, std::shared_ptr<const std::string>> inlineStorages;
    // Storages the plan computes as they are written (arena storage index -> how): dequantized weights.
    std::unordered_map<std::uint32_t, std::shared_ptr<const ComputedBytes>> computedStorages;
    // Which of opts.stripPrefixes took something off a key or a _metadata entry (prefix.cpp).
    std::vector<bool> stripUsed;

    void step(StepKind kind, std::string path, std::string before, std::string after, std::string detail = {})
    {
        plan.steps.push_back({kind, std::move(path), std::move(before), std::move(after), std::move(detail)});
    }
    pickle::Arena& arena() { return plan.arena; }
};

// How deep the passes follow nested values. Each level costs a few frames of their recursion, about
// 1 KiB (4 KiB under ASan): 1000 levels fit any thread's stack, where the 10 000 the reader accepts
// overflowed the 8 MiB main stack from about 7 700 on.
inline constexpr std::uint32_t kMaxRewriteDepth = 1000;
[[nodiscard]] Error tooDeepToRewrite();

[[nodiscard]] std::string joinPath(const std::string& parent, const std::string& name);

// The dict items of an object's BUILD state, where it has a dict (or a (dict, slots) pair).
[[nodiscard]] std::vector<pickle::ValueId> objectStateItems(const pickle::Arena& a, const pickle::ObjectInfo& o);

// Rewrites a strided tensor's original argument tuple from its fields, so a pickler that writes
// either form writes the edited tensor.
void refreshStridedArgs(pickle::Arena& a, pickle::ValueId tensor);

// Removes the input's node `idx` from its container in the plan's arena; `path` names it in errors.
Expected<void> removeNode(Builder& b, NodeIndex idx, const std::string& path);  // select.cpp

Expected<void> selectRoot(Builder& b);     // select.cpp
Expected<void> dropPaths(Builder& b);      // select.cpp
Expected<void> unwrapModules(Builder& b);  // unwrap.cpp
Expected<void> sanitize(Builder& b);       // weights_only.cpp
Expected<void> editPrefixes(Builder& b);   // prefix.cpp
Expected<void> dequantize(Builder& b);     // dequantize.cpp
void planStorages(Builder& b);             // storages.cpp

}  // namespace ckpt::transform::detail
