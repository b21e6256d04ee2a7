// Every finding code ckptscope reports: the single-file rules (diagnose), --against, and the sets'
// own findings (core/sharded). The codes are stable; README's table and docs/findings.md describe
// each, and tests/cli/tst_docs.cpp holds both, and every code the sources write, to this list.
#pragma once

#include <array>
#include <string_view>

namespace ckpt::diagnose {

inline constexpr std::array<std::string_view, 56> kFindingCodes{
    // Wrapper prefixes (rules_prefix.cpp, rules_pickle.cpp)
    "module-prefix", "nested-prefix", "compile-prefix", "opacus-prefix", "fsdp-prefix", "mixed-prefix",
    // Devices (rules_device.cpp)
    "device-pinned", "mixed-devices",
    // What the pickle asks for (rules_pickle.cpp)
    "unsafe-callable", "not-weights-only", "whole-model", "undecodable-text",
    // Container and storages (rules_storage.cpp)
    "legacy-format", "duplicate-member", "archive-member", "model-folder", "compressed-file", "torchscript-archive",
    "export-archive", "truncated-archive", "truncated-or-missing-storage", "unreadable-storage", "storage-bloat",
    "shared-storage",
    // What a tensor's values need beyond its bytes (rules_tensors.cpp)
    "meta-tensors", "tie-unknown", "fp8-block-quantized", "fp8-scale-shape", "fp8-scale-missing",
    // Values (values.cpp, with --values)
    "nonfinite-values", "values-unscanned",
    // Against the model (against.cpp, with --against)
    "missing-keys", "unexpected-keys", "size-mismatch", "strict-load-ok",
    // Hugging Face sets (sharded/hf_set.cpp; shard-missing for DCP too)
    "shard-missing", "shard-unreadable", "index-missing-tensor", "index-unlisted-tensor", "index-total-size",
    "shard-count-mismatch", "tied-weight-missing",
    // DeepSpeed ZeRO (sharded/zero.cpp)
    "zero-rank-missing", "zero3-placeholder-module",
    // DCP folders and FSDP rank files (sharded/dcp.cpp, sharded/fsdp.cpp, checkpoint/dtensor.h)
    "chunk-out-of-bounds", "chunk-overlap", "chunk-hole", "dcp-rank-local-metadata", "dcp-item-unreadable",
    "dcp-storage-missing", "dcp-safetensors-format", "megatron-torch-dist", "extra-state", "world-size-mismatch",
    "dtensor-rank-files", "needs-process-group"};

}  // namespace ckpt::diagnose
