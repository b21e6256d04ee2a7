// Restricted unpickler: a small virtual machine over pickle opcodes (protocols 0-5) that builds
// an Arena of values and never calls, imports or evaluates anything.
//
// Byte layout it expects: an optional PROTO, then opcodes up to STOP (docs/format.md §4.1); protocol
// 4+ FRAMEs are read as inline data. Known GLOBALs become typed values (value.h; which ones and how
// is torch_globals.cpp's): tensor rebuild functions, storages from persistent ids, OrderedDict,
// torch.Size/dtype/device, _codecs.encode bytes, set/frozenset/bytearray. Every other GLOBAL stays
// an opaque Object. Limits keep hostile
// input bounded: stack and memo sizes are bounded by the input length, every declared length is
// checked against the remaining bytes, and errors carry the byte offset.
#pragma once

#include "pickle/value.h"
#include "util/budget.h"
#include "util/bytes.h"
#include "util/error.h"

#include <bitset>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::pickle {

struct UnpickleOptions {
    // Legacy streams use 6-tuple storage pids and ('module', cls, file, source) pids; zip uses 5.
    bool legacyPersistentIds = false;
    // Refuse pickles whose values take more memory than this (ErrorCode::Limit); unset: 64 MiB
    // plus 32 times the pickle's own size (util/budget.h).
    std::optional<MemoryBudget> budget;
    // A persistent id naming a value the caller has read already (a PyTorch 0.1 tar's tensors and
    // storages, read from their own members first), returned as torch's persistent_load returns it,
    // so what the pickle builds on it (a 0.1 Variable's BUILD) sees the tensor; nullopt: the usual rules.
    std::function<std::optional<ValueId>(ValueId pid)> resolvePersistentId;
};

struct UnpickleResult {
    ValueId root;
    int protocol = 0;              // PROTO argument, 0 when absent (protocol 0/1)
    std::bitset<256> opcodesSeen;  // for the weights-only check (docs/format.md §5.3)
    std::size_t consumed = 0;      // bytes read, STOP included
    std::vector<std::string> warnings;
    // Strings whose bytes are not UTF-8, which torch.load cannot decode (UnicodeDecodeError;
    // a Python 2 str loads with encoding='latin1'), and the offset of the first.
    std::size_t undecodableStrings = 0;
    std::size_t undecodablePython2 = 0;  // of which Python 2 strs
    std::size_t firstUndecodable = 0;
};

// Reads one pickle from the start of `data`, appending values to `arena`.
Expected<UnpickleResult> unpickle(Bytes data, Arena& arena, const UnpickleOptions& opts = {});

}  // namespace ckpt::pickle
