// A tensor's elements in C order, gathered from its storage's mapped bytes in bounded chunks, so
// hashing, scanning and materialising views never needs the whole tensor in memory.
#pragma once

#include "checkpoint/checkpoint.h"

#include <functional>

namespace ckpt {

// torch's is_contiguous for a strided view: C order (size-1 dimensions may have any stride), and
// every tensor with no elements counts as contiguous.
[[nodiscard]] bool isCContiguous(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& stride);

// Calls `sink` with consecutive chunks of the tensor's C-order bytes (contiguous tensors get views
// straight into the mapping; strided views are gathered into a buffer of about `chunkBytes`).
// Storage-less tensors (meta, sparse, quantized wrappers) give an Unsupported error.
Expected<void> forEachTensorChunk(const Checkpoint& c, const TensorEntry& t, const std::function<bool(Bytes)>& sink,
                                  std::size_t chunkBytes = std::size_t{8} << 20U);

}  // namespace ckpt
