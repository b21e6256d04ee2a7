// What the readers of sets whose tensors are chunks spread over several files share (dcp.cpp,
// fsdp.cpp; consolidate.cpp's Hugging Face set and ZeRO partitions for the refusal and the archive
// name): a global tensor's element count, whether a set's findings let it be consolidated, and how
// a chunk's bytes reach the consolidated torch zip.
#pragma once

#include "archive/zip.h"
#include "sharded/sharded.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::sharded::detail {

// A negative size (a corrupt file) counts as no elements rather than wrapping around.
[[nodiscard]] inline std::uint64_t numelOf(const std::vector<std::int64_t>& size)
{
    std::uint64_t n = 1;
    for (const auto d : size) {
        n *= static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0));
    }
    return n;
}

[[nodiscard]] inline bool noErrors(const std::vector<SetFinding>& findings)
{
    return std::none_of(findings.begin(), findings.end(), [](const auto& f) { return f.severity == "error"; });
}

// Why nothing was written: `what` ("the set is incomplete") and the codes of the findings of
// severity error, which `ckptscope check` explains.
[[nodiscard]] inline Error incomplete(const std::string& what, const std::vector<SetFinding>& findings,
                                      const std::string& path)
{
    std::string codes;
    for (const auto& f : findings) {
        codes += f.severity == "error" ? (codes.empty() ? "" : ", ") + f.code : "";
    }
    Error e = makeError(ErrorCode::Corrupt, what + " (" + codes + "; see `ckptscope check`): nothing was written");
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
        std::vector<std::byte> buffer(static_cast<std::size_t>(nbytes));
        if (auto r = place(buffer); !r) {
            return r;
        }
        if (auto r = zw.writeChunk(Bytes(buffer.data(), buffer.size())); !r) {
            return r;
        }
    }
    return zw.endRecord();
}

}  // namespace ckpt::sharded::detail
