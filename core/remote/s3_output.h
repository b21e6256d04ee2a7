// `convert INPUT -o s3://BUCKET/KEY`: a plan written straight into an S3 object as a multipart upload
// (s3_upload.h), the same bytes the local file would hold (write::writeCheckpointTo), with no local
// copy. Nothing is visible at the key until the upload completes; on any error or a stop the upload
// is aborted. An object already at the key is replaced only when asked (--force): it is looked for
// (HEAD) before the input is read, and the completion carries If-None-Match: * so one that appears
// meanwhile is not replaced either.
#pragma once

#include "checkpoint/checkpoint.h"
#include "remote/http_client.h"
#include "transform/transform.h"
#include "write/write.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>

namespace ckpt::remote {

struct S3OutputOptions {
    bool noSignRequest = false;  // --no-sign-request
    bool replace = false;        // --force
    HttpOptions http = HttpOptions::fromEnvironment();
    std::shared_ptr<TransferStats> stats;
    unsigned partsInFlight = 4;
};

struct S3Written {
    write::WriteResult result;
    std::uint64_t partSize = 0;
    int parts = 0;
};

// Whether `output` names an object store's object (s3://...).
[[nodiscard]] bool isS3Output(const std::string& output);

// What can be refused before the input is read: a name that is no object key (a prefix: sets are not
// written to object stores), settings that cannot be found, and, unless `replace`, an object
// already at the key (Usage, "add --force").
Expected<void> checkS3Output(const std::string& output, const S3OutputOptions& options);

// Writes `plan` into the object `output` names. `stop` ends it (Cancelled) and aborts the upload.
Expected<S3Written> writeS3Object(const Checkpoint& in, const transform::Plan& plan, const std::string& output,
                                  const std::function<void(const write::WriteProgress&)>& progress,
                                  const std::stop_token& stop, const write::WriteOptions& writeOptions,
                                  const S3OutputOptions& options);

}  // namespace ckpt::remote
