// The rules behind check(): each appends the findings of one family. Internal to the stage.
#pragma once

#include "diagnose/diagnose.h"

#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <vector>

namespace ckpt::diagnose {

using Findings = std::vector<Finding>;

void prefixRules(const Checkpoint& ckpt, Findings& out);  // module/nested/compile/fsdp/mixed-prefix
void deviceRules(const Checkpoint& ckpt, Findings& out);  // device-pinned, mixed-devices
void pickleRules(const Checkpoint& ckpt,
                 Findings& out);  // not-weights-only, unsafe-callable, whole-model, undecodable-text,
                                  // dtensor-rank-files
void storageRules(const Checkpoint& ckpt, Findings& out);  // archive-member, model-folder, compressed-file,
                                                           // legacy-format, torchscript-archive, storage-bloat,
                                                           // shared-storage, truncated-or-missing-storage,
                                                           // unreadable-storage, truncated-archive
// tied-weight-missing and tie-unknown (a safetensors model's ties), meta-tensors, fp8-block-scale
void tensorRules(const Checkpoint& ckpt, Findings& out);
// zero3-placeholder-module on one ZeRO-3 rank's model states read alone; run after the other rules,
// whose fixes it takes away (an export of the file would write its placeholders).
void zeroRules(const Checkpoint& ckpt, Findings& out);
// nonfinite-values; `progress` as CheckOptions::valueProgress.
Expected<void> valueRules(const Checkpoint& ckpt, Findings& out, std::stop_token stop,
                          const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

// Helpers shared by the rules.
[[nodiscard]] std::string quotedPath(const std::string& path);  // `model/fc.weight`, "the root" for ""
[[nodiscard]] std::string joinPath(const std::string& dict, const std::string& key);
[[nodiscard]] std::string plural(std::uint64_t n, std::string_view one, std::string_view many);
[[nodiscard]] std::string withCommas(std::uint64_t n);  // 1,234,567
[[nodiscard]] std::string bytesText(std::uint64_t n);   // "1.5 GiB (1,610,612,736 bytes)"

}  // namespace ckpt::diagnose
