#include "remote/s3_output.h"

#include "remote/s3.h"
#include "remote/s3_upload.h"

namespace ckpt::remote {
namespace {

Error named(Error e, const std::string& output)
{
    e.path = output;
    return e;
}

struct Target {
    s3::ObjectName name;
    s3::Settings settings;
};

// The object `output` names, and the settings its requests go with; a prefix is refused.
Expected<Target> targetOf(const std::string& output, bool noSignRequest)
{
    auto name = s3::parseName(output);
    if (!name) {
        return name.error();
    }
    if (name->isPrefix()) {
        return named(makeError(ErrorCode::Usage, "names a folder (a prefix); convert writes one object to an object "
                                                 "store: give its key (s3://BUCKET/KEY). Sets and DCP folders are "
                                                 "written locally, then copied (aws s3 cp --recursive)"),
                     output);
    }
    auto settings = s3::findSettings(noSignRequest);
    if (!settings) {
        return named(settings.error(), output);
    }
    return Target{std::move(*name), std::move(*settings)};
}

}  // namespace

bool isS3Output(const std::string& output)
{
    return output.starts_with(s3::kScheme);
}

Expected<void> checkS3Output(const std::string& output, const S3OutputOptions& options)
{
    auto target = targetOf(output, options.noSignRequest);
    if (!target) {
        return target.error();
    }
    if (options.replace) {
        return {};
    }
    auto exists = s3::objectExists(target->settings, target->name, options.http, options.stats);
    if (!exists) {
        return named(exists.error(), output);
    }
    if (*exists) {
        return named(makeError(ErrorCode::Usage, "an object is already at this key; nothing written: add --force "
                                                 "to replace it"),
                     output);
    }
    return {};
}

Expected<S3Written> writeS3Object(const Checkpoint& in, const transform::Plan& plan, const std::string& output,
                                  const std::function<void(const write::WriteProgress&)>& progress,
                                  const std::stop_token& stop, const write::WriteOptions& writeOptions,
                                  const S3OutputOptions& options)
{
    auto target = targetOf(output, options.noSignRequest);
    if (!target) {
        return target.error();
    }
    s3::UploadOptions uploadOptions{options.http, options.stats, options.partsInFlight};
    uploadOptions.http.stop = stop;  // a stop ends the parts being sent too
    auto upload = s3::Upload::create(target->settings, target->name, uploadOptions);
    if (!upload) {
        return named(upload.error(), output);
    }
    // The writers name the torch archive's folder after the output's name, as for a local file.
    auto written = write::writeCheckpointTo(in, plan, **upload, output, progress, stop, writeOptions);
    if (!written) {
        return (*upload)->abandon(written.error());
    }
    if (auto done = (*upload)->complete(options.replace); !done) {
        return named(done.error(), output);
    }
    S3Written out;
    out.result = std::move(*written);
    out.partSize = (*upload)->partSize();
    out.parts = (*upload)->parts();
    return out;
}

}  // namespace ckpt::remote
