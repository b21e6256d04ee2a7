#include "write/write.h"

#include "write/output_file.h"
#include "write/targets.h"
#include "write/writers.h"

namespace ckpt::write {

Expected<WriteResult> writeCheckpoint(const Checkpoint& in, const transform::Plan& plan, const std::string& outPath,
                                      const std::function<void(const WriteProgress&)>& progress, std::stop_token stop,
                                      const WriteOptions& options)
{
    if (outPath.empty()) {
        return makeError(ErrorCode::Usage, "no output path given");
    }
    auto target = resolveTarget(outPath);
    if (!target) {
        return target.error();
    }
    if (auto ok = detail::checkTarget(in, *target); !ok) {
        return ok.error();
    }
    if (stop.stop_requested()) {
        return detail::cancelled(outPath);
    }
    auto out = detail::OutputFile::create(*target, options.durability);
    if (!out) {
        return out.error();
    }
    // `out` unlinks the temporary file on the way out unless it is committed.
    auto result = writeCheckpointTo(in, plan, *out, outPath, progress, stop, options);
    if (!result) {
        return result;
    }
    if (auto ok = out->commit(); !ok) {
        return ok.error();
    }
    return result;
}

Expected<WriteResult> writeCheckpointTo(const Checkpoint& in, const transform::Plan& plan, ByteSink& sink,
                                        const std::string& outPath,
                                        const std::function<void(const WriteProgress&)>& progress, std::stop_token stop,
                                        const WriteOptions& options)
{
    WriteResult result;
    result.path = outPath;
    auto written =
        plan.options.format == transform::OutputFormat::Safetensors
            ? detail::writeSafetensors(in, plan, sink, outPath, progress, stop, result.notes, options.allowExpand)
            : detail::writeTorch(in, plan, sink, outPath, progress, stop, result.notes);
    // Bytes read from an input that shrank meanwhile are zeros, not data: never commit them.
    if (auto same = in.checkUnchanged(); !same) {
        return same.error();
    }
    if (!written) {
        // What could not be written for what the input holds (a corrupt record, a dtype the format
        // lacks) is about the input; only a failed write or a cancel is about the output.
        Error e = written.error();
        if (e.code != ErrorCode::WriteFailed && e.code != ErrorCode::Cancelled) {
            e.path = in.path;
        }
        return e;
    }
    // Last chance to cancel: once committed, the output exists.
    if (stop.stop_requested()) {
        return detail::cancelled(outPath);
    }
    result.bytes = *written;
    return result;
}

}  // namespace ckpt::write
