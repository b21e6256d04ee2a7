// The torch half of the unpickler: what torch.load's own unpickler makes of the GLOBALs and
// persistent ids it knows (tensor rebuild functions, storages, OrderedDict, torch.Size/dtype/
// device, _codecs.encode bytes, set/frozenset/bytearray, pre-1.0 tensors). The pickle machine
// (unpickler.cpp) runs the opcodes and asks this for every global, call, BUILD and persistent id;
// a rebuild function torch adds is a change to torch_globals.cpp alone. Private to core/pickle.
#pragma once

#include "pickle/value.h"
#include "util/error.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::pickle::detail {

// What one unpickle reports, shared by the machine and the torch half: the first error (which
// stops the run, at the offset of the opcode being run) and the first 100 warnings.
struct Problems {
    std::optional<Error> error;
    std::vector<std::string> warnings;
    std::size_t opStart = 0;

    // Records the error unless one is already there; false, so a step can `return fail(...)`.
    bool fail(ErrorCode code, std::string message);
    void warn(std::string warning);
};

class TorchGlobals {
public:
    // `pickleBytes` sizes the tables for the pickle about to run; `legacyPersistentIds` takes
    // torch < 1.6's 6-tuple storage ids and ('module', ...) class ids.
    TorchGlobals(Arena& arena, Problems& problems, bool legacyPersistentIds, std::size_t pickleBytes);
    TorchGlobals(const TorchGlobals&) = delete;
    TorchGlobals& operator=(const TorchGlobals&) = delete;
    TorchGlobals(TorchGlobals&&) = delete;
    TorchGlobals& operator=(TorchGlobals&&) = delete;
    ~TorchGlobals();

    // A GLOBAL as a value: a dtype for `torch.float32` and its canonical kin, else a Global.
    ValueId global(GlobalRef g);
    // What calling `callable` with the tuple `args` (and `kwargs`, if any) makes in torch's loader
    // when it is a call it knows; nullopt leaves an opaque Object to the machine (also after an
    // error, which is then in the Problems).
    std::optional<ValueId> call(ValueId callable, ValueId args, ValueId kwargs, ObjectForm form);
    // BUILD of `state` on `target` where torch gives it a meaning: a pre-1.0 tensor's `set_`
    // arguments, a Parameter's or a tensor subclass's state. False when it has none here (the
    // machine then treats it as a plain pickle BUILD) or after an error.
    bool build(ValueId target, ValueId state);
    // A persistent id: a storage of the file, a legacy module's class, or else an opaque
    // PersistentId value.
    ValueId persistentLoad(ValueId pid);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace ckpt::pickle::detail
