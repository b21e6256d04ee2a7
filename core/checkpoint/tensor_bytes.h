// A tensor's elements in C order, gathered from its storage's mapped bytes in bounded chunks, so
// hashing, scanning and materialising views never needs the whole tensor in memory.
#pragma once

#include "checkpoint/checkpoint.h"

#include <functional>

namespace ckpt {

// Calls `sink` with consecutive chunks of the tensor's C-order bytes (contiguous tensors get views
// straight into the mapping; strided views are gathered into a buffer of about `chunkBytes`).
// Storage-less tensors (meta, sparse, quantized wrappers) give an Unsupported error.
Expected<void> forEachTensorChunk(const Checkpoint& c, const TensorEntry& t, const std::function<bool(Bytes)>& sink,
                                  std::size_t chunkBytes = std::size_t{8} << 20U);

}  // namespace ckpt
