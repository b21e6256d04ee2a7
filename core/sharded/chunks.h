// What the readers of sets whose tensors are chunks spread over several files share (dcp.cpp,
// fsdp.cpp; consolidate.cpp's Hugging Face set and ZeRO partitions for the refusal and the archive
// name): a global tensor's element count, whether a set's findings let it be consolidated, and how
// a chunk's bytes reach the consolidated torch zip.
#pragma once

#include "archive/zip.h"
#include "checkpoint/record_crc.h"
#include "pickle/value.h"
#include "sharded/consolidate_progress.h"
#include "sharded/sharded.h"
#include "util/checked.h"
#include "util/dtype.h"
#include "write/output_file.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::sharded::detail {

// A negative size (a corrupt file) counts as no elements rather than wrapping around, and one that
// overflows as UINT64_MAX (the readers check sizes with util/checked.h first).
[[nodiscard]] inline std::uint64_t numelOf(const std::vector<std::int64_t>& size)
{
    std::uint64_t n = 1;
    for (const auto d : size) {
        if (!checkedMul(n, static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0)), n)) {
            return UINT64_MAX;
        }
    }
    return n;
}

[[nodiscard]] inline bool noErrors(const std::vector<SetFinding>& findings)
{
    return std::none_of(findings.begin(), findings.end(), stopsTheRead);
}

// Why a set is not read as one checkpoint, nor consolidated: `what` ("the set is incomplete") and
// the codes of the findings that stop the read, which `ckptscope check` explains.
[[nodiscard]] inline Error incomplete(const std::string& what, const std::vector<SetFinding>& findings,
                                      const std::string& path)
{
    const std::string codes = stoppingCodes(findings);
    Error e = makeError(ErrorCode::Corrupt, what + " (" + codes + "; see `ckptscope check`)");
    e.path = path;
    return e;
}

// The folder every record of the written torch zip sits in, named after the output file without its
// extension as PyTorch's writer names it (inline_container.h: archive_name.zip holds archive_name/);
// "archive" when nothing is left.
[[nodiscard]] inline std::string archiveFolderFor(const std::string& outPath)
{
    std::string base = std::filesystem::path(outPath).filename().string();
    const auto dot = base.rfind('.');
    if (dot != std::string::npos) {
        base.erase(dot);
    }
    return base.empty() ? std::string("archive") : base;
}

// Streams `length` bytes of storage `s` of `c` from `offset` into the record `zw` has open, one
// piece at a time. Errors: the read's, or the write's.
inline Expected<void> streamInto(archive::ZipWriter& zw, const Checkpoint& c, StorageIndex s, std::uint64_t offset,
                                 std::uint64_t length)
{
    std::optional<Error> failed;
    auto streamed = c.streamStorage(s, offset, length, [&](Bytes piece) {
        if (auto w = zw.writeChunk(piece); !w) {
            failed = w.error();
        } else if (!consolidationGoesOn(zw.bytesWritten())) {
            failed = consolidationCancelled();
        }
        return !failed;
    });
    if (failed) {
        return *failed;
    }
    return streamed;
}

// One consolidated tensor as the zip record `record` of `nbytes`: streamed straight through by
// `stream` when its chunks are slabs in order (it returns false, having written nothing, when they
// are not), else assembled in memory by `place(buffer)` and written at once.
template <class Stream, class Place>
Expected<void> writeRecord(archive::ZipWriter& zw, const std::string& record, std::uint64_t nbytes,
                           const Stream& stream, const Place& place)
{
    if (auto r = zw.beginRecord(record, nbytes); !r) {
        return r;
    }
    Expected<bool> streamed = stream();
    if (!streamed) {
        return streamed.error();
    }
    if (!*streamed) {
        std::vector<std::byte> buffer;
        try {
            buffer.resize(static_cast<std::size_t>(nbytes));
        } catch (const std::bad_alloc&) {
            // One tensor is the assembly's whole memory; one too large for this machine is a
            // one-line error, not "internal error: out of memory".
            return makeError(ErrorCode::Limit, "cannot hold the " + std::to_string(nbytes) +
                                                   "-byte tensor in memory to assemble it from its chunks");
        }
        if (auto r = place(buffer); !r) {
            return r;
        }
        if (auto r = zw.writeChunk(Bytes(buffer.data(), buffer.size())); !r) {
            return r;
        }
    }
    return zw.endRecord();
}

// The bytes of the storages `a` declares: the records a torch zip written from it holds.
[[nodiscard]] inline std::uint64_t storageBytes(const pickle::Arena& a)
{
    std::uint64_t n = 0;
    for (const auto& s : a.storages) {
        n += s.untyped ? s.numel : s.numel * elementSize(s.dtype);
    }
    return n;
}

// A consolidated set as one torch zip at `target`, the skeleton every set's consolidation shares:
// data.pkl (`pickled`), byteorder, one `data/<i>` record per storage written by
// `writeStorage(zw, i, record)` (which opens, fills and closes it), version; then `unchanged()`
// checks that no source changed under the read before the file is committed in place. Returns
// the written file's size (0 when it cannot be read back). `recordBytes` (storageBytes of the
// pickle's arena) sizes the progress the scope reports (consolidate_progress.h).
template <class WriteStorage, class Unchanged>
Expected<std::uint64_t> writeTorchArchive(const std::string& target, const std::string& pickled,
                                          std::size_t storageCount, std::uint64_t recordBytes,
                                          const WriteStorage& writeStorage, const Unchanged& unchanged)
{
    expectConsolidated(pickled.size() + recordBytes);
    auto file = write::detail::OutputFile::create(target, write::Durability::Lazy);
    if (!file) {
        return file.error();
    }
    const std::string folder = archiveFolderFor(target);
    archive::ZipWriter zw(file->fd());
    auto fail = [&](const Error& e) { return write::detail::onTarget(e, target); };
    if (auto r = zw.addRecord(folder + "/data.pkl", asBytes(pickled)); !r) {
        return fail(r.error());
    }
    if (auto r = zw.addRecord(folder + "/byteorder", asBytes("little")); !r) {
        return fail(r.error());
    }
    for (std::size_t i = 0; i < storageCount; ++i) {
        if (!consolidationGoesOn(zw.bytesWritten())) {
            return fail(consolidationCancelled());
        }
        if (auto r = writeStorage(zw, i, folder + "/data/" + std::to_string(i)); !r) {
            return fail(r.error());
        }
    }
    if (auto r = zw.addRecord(folder + "/version", asBytes("3\n")); !r) {
        return fail(r.error());
    }
    if (auto r = zw.finish(); !r) {
        return fail(r.error());
    }
    if (auto r = unchanged(); !r) {
        return r.error();
    }
    if (auto r = file->commit(); !r) {
        return r.error();
    }
    std::error_code ec;
    const auto size = std::filesystem::file_size(target, ec);
    return ec ? std::uint64_t{0} : static_cast<std::uint64_t>(size);
}

}  // namespace ckpt::sharded::detail
