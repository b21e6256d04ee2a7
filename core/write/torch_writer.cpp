// Plan -> torch zip archive, records as torch.save lays them out (docs/format.md §2.1, §2.3): data.pkl,
// byteorder, data/<key> (in the input's order, see writeOrder), version. Storage bytes go from the
// input file to the output with copy_file_range; only deflated input members pass through memory,
// one record at a time. Into a stream (a sink that cannot be patched) the same bytes go in order.
#include "archive/zip.h"
#include "checkpoint/record_crc.h"
#include "pickle/pickler.h"
#include "write/output_file.h"
#include "write/writers.h"

#include <algorithm>
#include <span>

namespace ckpt::write::detail {

namespace {

// torch's rule (docs/format.md §2.1): the output's basename without its last extension; `archive` when
// that leaves nothing (torch itself refuses such a name).
std::string archiveFolderFor(const std::string& outPath)
{
    const auto slash = outPath.rfind('/');
    std::string base = slash == std::string::npos ? outPath : outPath.substr(slash + 1);
    const auto dot = base.rfind('.');
    if (dot != std::string::npos) {
        base.erase(dot);
    }
    return base.empty() ? std::string("archive") : base;
}

std::uint64_t declaredBytes(const pickle::StorageRef& ref)
{
    return ref.untyped ? ref.numel : ref.numel * elementSize(ref.dtype);
}

// torch.load reads exactly numel x element size bytes per record and fails on any other size, so
// a plan that disagrees with its own pickle is a bug caught here rather than in the user's load.
Expected<void> checkPlanConsistent(const transform::Plan& plan)
{
    if (plan.storages.size() != plan.arena.storages.size()) {
        return makeError(ErrorCode::Internal, "the plan lists " + std::to_string(plan.storages.size()) +
                                                  " storages but its pickle " +
                                                  std::to_string(plan.arena.storages.size()));
    }
    for (std::size_t i = 0; i < plan.storages.size(); ++i) {
        const auto& out = plan.storages[i];
        const auto& ref = plan.arena.storages[i];
        if (out.key != ref.key) {
            return makeError(ErrorCode::Internal, "plan storage " + std::to_string(i) + " is keyed '" + out.key +
                                                      "' but its pickle says '" + ref.key + "'");
        }
        if (elementSize(ref.dtype) != 0 && declaredBytes(ref) != out.nbytes) {
            return makeError(ErrorCode::Internal, "plan storage '" + out.key + "' has " + std::to_string(out.nbytes) +
                                                      " bytes but its pickle declares " +
                                                      std::to_string(declaredBytes(ref)));
        }
    }
    return {};
}

// Storages whose bytes are a range of the input file are written first, in the input's order, so
// neighbours can share one copy (torch.save writes keys in string order, "10" before "2", while
// the plan numbers them in pickle order); the rest follow in plan order. torch.load finds records
// by name, so their order is free.
struct WriteOrder {
    std::vector<archive::FileRecord> fromFile;
    std::vector<std::size_t> fromMemory;  // plan indices
};

WriteOrder writeOrder(const Checkpoint& in, const transform::Plan& plan, const std::string& folder)
{
    WriteOrder w;
    for (std::size_t i = 0; i < plan.storages.size(); ++i) {
        const auto& s = plan.storages[i];
        if (auto offset = fileOffsetOf(in, s)) {
            w.fromFile.push_back(
                {folder + "data/" + s.key, *offset, s.nbytes, wholeRecordCrc(in, s.source, s.byteOffset, s.nbytes)});
        } else {
            w.fromMemory.push_back(i);
        }
    }
    std::stable_sort(
        w.fromFile.begin(), w.fromFile.end(),
        [](const archive::FileRecord& a, const archive::FileRecord& b) { return a.srcOffset < b.srcOffset; });
    return w;
}

// A record whose bytes are not a plain range of the input file (a deflated member, an input read
// from memory), streamed a chunk at a time: a 4 MB deflate bomb never becomes 4 GB of memory.
// `meter` advances as the bytes go, so a record of gigabytes read from a set or over HTTP is no
// silence on a progress line.
Expected<void> writeStreamedRecord(archive::ZipWriter& zip, const Checkpoint& in, const transform::OutStorage& s,
                                   const std::string& name, const std::stop_token& stop, ProgressMeter& meter)
{
    // A set read in place: a storage whole in one member file is copied from it file to file.
    if (auto span = inputSpanOf(in, s); span && span->member) {
        const archive::FileRecord one{name, span->offset, s.nbytes, span->crc};
        auto added = zip.addRecordsFromFile({&one, 1}, span->fd, [&](std::uint64_t n) {
            meter.advance(n);
            return !stop.stop_requested();
        });
        if (!added) {
            return added.error();
        }
        return {};
    }
    if (auto ok = zip.beginRecord(name, s.nbytes); !ok) {
        return ok;
    }
    if (s.computed && s.byteOffset == 0 && s.nbytes == s.computed->size()) {
        Expected<void> written;
        auto made = s.computed->stream(in, [&](Bytes piece) {
            written = zip.writeChunk(piece);
            return written.ok() && !stop.stop_requested();
        });
        if (!written) {
            return written;
        }
        if (!made) {
            return made;
        }
        return zip.endRecord();
    }
    if (s.madeByPlan()) {
        std::vector<std::byte> unused;
        auto bytes = sourceBytes(in, s, unused);
        if (!bytes) {
            return bytes.error();
        }
        if (auto ok = zip.writeChunk(*bytes); !ok) {
            return ok;
        }
        meter.advance(bytes->size());
        return zip.endRecord();
    }
    Expected<void> written;
    auto read = in.streamStorage(s.source, s.byteOffset, s.nbytes, [&](Bytes piece) {
        written = zip.writeChunk(piece);
        meter.advance(piece.size());
        return written.ok() && !stop.stop_requested();
    });
    if (!written) {
        return written;
    }
    if (!read) {
        return read;
    }
    return zip.endRecord();
}

}  // namespace

Expected<std::uint64_t> writeTorch(const Checkpoint& in, const transform::Plan& plan, ByteSink& out,
                                   const std::string& target, const std::function<void(const WriteProgress&)>& progress,
                                   const std::stop_token& stop, std::vector<std::string>& /*notes*/)
{
    if (auto ok = checkPlanConsistent(plan); !ok) {
        return ok.error();
    }
    for (const auto& s : plan.storages) {
        if (auto ok = checkSourceRange(in, s); !ok) {
            return ok.error();
        }
    }
    auto pickled = pickle::picklePersistent(plan.arena, plan.root);
    if (!pickled) {
        return pickled.error();
    }

    static constexpr std::string_view kVersion = "3\n";
    const std::string byteorder = in.byteorder.empty() ? std::string("little") : in.byteorder;
    std::uint64_t total = pickled->size() + byteorder.size() + kVersion.size();
    for (const auto& s : plan.storages) {
        total += s.nbytes;
    }
    ProgressMeter meter(progress, total);
    // The archive's own bytes besides the records' (headers, padding, descriptors, the directory)
    // are a few hundred bytes a record; a big stretch copied in one go may pad up to 64 KiB.
    static constexpr std::uint64_t kPerRecord = 4096;
    static constexpr std::uint64_t kArchiveSlack = 1U << 20;
    out.expectSize(total + (plan.storages.size() + 3) * kPerRecord + kArchiveSlack);

    const std::string folder = archiveFolderFor(target) + "/";
    archive::ZipWriter zip(out);
    auto fail = [&](Error e) -> Expected<std::uint64_t> { return onTarget(std::move(e), target); };

    if (auto ok = zip.addRecord(folder + "data.pkl", asBytes(*pickled)); !ok) {
        return fail(ok.error());
    }
    meter.advance(pickled->size());
    // A big-endian input keeps its mark: the bytes are copied as they are and torch >= 2.1 swaps them.
    if (auto ok = zip.addRecord(folder + "byteorder", asBytes(byteorder)); !ok) {
        return fail(ok.error());
    }
    meter.advance(byteorder.size());

    const WriteOrder order = writeOrder(in, plan, folder);
    const std::span<const archive::FileRecord> fromFile(order.fromFile);
    for (std::size_t i = 0; i < fromFile.size();) {
        if (stop.stop_requested()) {
            return cancelled(target);
        }
        // Progress counts the copy's bytes, gaps between records included (a few hundred bytes per
        // record); finish() settles the total.
        auto step = [&](std::uint64_t n) {
            meter.advance(n);
            return !stop.stop_requested();
        };
        auto added = zip.addRecordsFromFile(fromFile.subspan(i), in.file->fd(), step);
        if (!added) {
            return added.error().code == ErrorCode::Cancelled ? Expected<std::uint64_t>(cancelled(target))
                                                              : fail(added.error());
        }
        i += *added;
    }
    for (const std::size_t i : order.fromMemory) {
        if (stop.stop_requested()) {
            return cancelled(target);
        }
        const auto& s = plan.storages[i];
        if (auto ok = writeStreamedRecord(zip, in, s, folder + "data/" + s.key, stop, meter); !ok) {
            return ok.error().code == ErrorCode::Cancelled ? Expected<std::uint64_t>(cancelled(target))
                                                           : fail(ok.error());
        }
    }
    if (auto ok = zip.addRecord(folder + "version", asBytes(kVersion)); !ok) {
        return fail(ok.error());
    }
    meter.advance(kVersion.size());
    if (auto ok = zip.finish(); !ok) {
        return fail(ok.error());
    }
    meter.finish();
    return zip.bytesWritten();
}

}  // namespace ckpt::write::detail
