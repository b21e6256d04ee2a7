// When a storage's bytes can keep their zip CRC-32: the one rule for every writer that copies a
// stored torch zip record file to file (convert's torch writer, a set's consolidation, a set read in
// place).
#pragma once

#include "checkpoint/checkpoint.h"
#include "checkpoint/file_formats.h"

#include <cstdint>
#include <optional>

namespace ckpt {

// The CRC-32 of bytes [offset, offset + bytes) of storage `s` of `c` when they are the whole of its
// stored torch zip record, as they lie in the mapping (a record that holds just this storage, as
// torch.save leaves a tensor, a DCP chunk or a ZeRO partition): such bytes can go file to file with
// that CRC. A CRC of 0 on a non-empty record most likely means the writer skipped CRCs (torch's
// set_crc32_options(False)): none then, so one is computed.
[[nodiscard]] inline std::optional<std::uint32_t> wholeRecordCrc(const Checkpoint& c, StorageIndex s,
                                                                 std::uint64_t offset, std::uint64_t bytes)
{
    const StorageEntry& se = c.storages[s];
    if (!fileFormat(c.format).zipArchive || se.record.empty() || !se.inMapping() || offset != 0 ||
        bytes != se.storedBytes || (se.crc32 == 0 && bytes != 0)) {
        return std::nullopt;
    }
    return se.crc32;
}

}  // namespace ckpt
