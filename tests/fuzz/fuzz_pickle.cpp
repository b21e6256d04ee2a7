// libFuzzer entry for the restricted unpickler and the pickler: any input must give a value tree
// or an error, never a crash, hang or sanitizer report; whatever reads must also write, and what
// is written must read again.
#include "pickle/pickler.h"
#include "pickle/unpickler.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace ckpt::pickle;
    UnpickleOptions opts;
    opts.budget = ckpt::MemoryBudget{size};
    opts.legacyPersistentIds = size > 0 && (data[size - 1] & 1U) != 0;
    Arena arena;
    auto r = unpickle(ckpt::Bytes(reinterpret_cast<const std::byte*>(data), size), arena, opts);  // NOLINT
    if (!r.ok()) {
        return 0;
    }
    (void)shortRepr(arena, r->root, 120);
    (void)keyText(arena, r->root);
    NumpyInfo np;
    (void)decodeNumpy(arena, r->root, np);
    auto p = picklePersistent(arena, r->root);
    if (!p.ok()) {
        return 0;  // e.g. an object that contains itself in its arguments
    }
    Arena again;
    auto r2 = unpickle(ckpt::asBytes(*p), again);
    if (!r2.ok()) {
        std::abort();  // our own output must always read back
    }
    return 0;
}
