// Which GLOBALs a loader trusts: PyTorch 2.6's default weights_only allowlist (docs/format.md §5.2),
// and the callables whose call runs code (os.system & kin). Shared by diagnose (findings
// `weights-only-rejects`, `unsafe-callable`) and transform (--weights-only, the always-on drop), so
// both say the same thing about the same file.
#pragma once

#include <string_view>

namespace ckpt::transform {

// `module.name` (Python 3 spelling) accepted by torch.load(weights_only=True) in PyTorch 2.6 by
// default: OrderedDict, Counter, set, complex, bytearray, _codecs.encode, Parameter, Tensor, Size,
// device, _get_layout, dtypes, qschemes, tensor and storage classes, torch._utils rebuild functions.
[[nodiscard]] bool weightsOnlyAllowed(std::string_view qualified);

// A GLOBAL whose call (or import) can run arbitrary code: modules blocklisted by torch itself
// (os, posix, nt, sys), process/shell/import/eval gadgets, and loaders that unpickle again.
// Never written by convert, whatever the options.
[[nodiscard]] bool unsafeCallable(std::string_view qualified);

}  // namespace ckpt::transform
