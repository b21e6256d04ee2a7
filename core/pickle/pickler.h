// Pickler: writes an Arena back as a protocol-2 pickle that torch.load, and torch.load with
// weights_only=True, accept (docs/format.md §5.3 opcodes only: no FRAME, MEMOIZE, STACK_GLOBAL,
// BINBYTES, SHORT_BINUNICODE). Storages are written as zip persistent ids
// ('storage', GLOBAL torch <Class>, key, location, numel) from Arena::storages as they stand, so
// callers rewrite keys/locations there before pickling. Values shared in the arena are memoised,
// so identity (tied weights) survives.
#pragma once

#include "pickle/value.h"
#include "util/error.h"

#include <string>

namespace ckpt::pickle {

Expected<std::string> picklePersistent(const Arena& arena, ValueId root);

}  // namespace ckpt::pickle
