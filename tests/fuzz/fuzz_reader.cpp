// libFuzzer over the whole reader: sniffing, zip/legacy/safetensors containers, the unpickler,
// the key-tree index and the C-order gather of every tensor.
#include "checkpoint/checkpoint.h"
#include "checkpoint/tensor_bytes.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const ckpt::Bytes bytes(reinterpret_cast<const std::byte*>(data), size);  // NOLINT
    auto ck = ckpt::readCheckpoint(bytes, "fuzz");
    if (!ck) {
        return 0;
    }
    std::size_t budget = std::size_t{64} << 20U;
    for (const auto& t : (*ck)->tensors) {
        if (t.nbytes > budget) {
            break;
        }
        budget -= t.nbytes;
        (void)ckpt::forEachTensorChunk(
            **ck, t, [](ckpt::Bytes) { return true; }, 4096);
    }
    return 0;
}
