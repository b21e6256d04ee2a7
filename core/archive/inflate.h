// Reading a zip record's payload a chunk at a time, whatever its size: a deflated storage record
// of 4 MB can declare 4 GB, and nothing that scans or copies it needs more than one chunk.
#pragma once

#include "archive/zip.h"
#include "util/bytes.h"
#include "util/error.h"

#include <cstdint>
#include <functional>

namespace ckpt::archive {

// Receives the next piece of the payload; false stops with a Cancelled error.
using ChunkSink = std::function<bool(Bytes)>;

// Hands `sink` bytes [offset, offset + length) of the record's uncompressed payload, in pieces of
// at most `chunk` bytes. `file` is the whole archive. Stored records are handed out as views of
// the file; deflated ones are inflated through one chunk-sized buffer, and when the whole payload
// is read its size and CRC-32 are checked against the directory. Errors name the record and what
// torch.load would also fail on: an unsupported method (12 = bzip2, 14 = LZMA, ...), a corrupt
// deflate stream, a size that lies, a CRC mismatch (Corrupt/Unsupported).
Expected<void> readRecord(Bytes file, const ZipRecord& r, std::uint64_t offset, std::uint64_t length,
                          const ChunkSink& sink, std::size_t chunk = 4U << 20);

// Reads the whole payload and discards it: the check that torch.load could read the record.
Expected<void> verifyRecord(Bytes file, const ZipRecord& r);

// "stored", "deflate", "bzip2", "LZMA", "zstd", "xz" or "method N".
[[nodiscard]] std::string methodName(std::uint16_t method);

}  // namespace ckpt::archive
