// Plan -> file: a torch zip archive or a safetensors file, streamed from the mapped input, written
// to a temporary file beside the target and renamed into place; never a partial file.
#pragma once

#include "checkpoint/checkpoint.h"
#include "transform/transform.h"
#include "util/byte_sink.h"

#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <vector>

namespace ckpt::write {

struct WriteProgress {
    std::uint64_t bytesDone = 0;
    std::uint64_t bytesTotal = 0;
    // The file being written, where one write makes several (a split's shards); "" otherwise.
    std::string file;
};

// When the output counts as written. Lazy is what `cp` and torch.save do: the bytes are in the
// page cache and the kernel flushes them; the temporary-file-and-rename still means a crash leaves
// the old target or the new one, never a mix (ext4 and xfs flush a file renamed over another).
// Durable also fsyncs the file before the rename and the directory after it, and starts writeback
// as it goes; on a 1 GiB export that is 0.6 s of waiting for the disk here.
enum class Durability { Lazy, Durable };

struct WriteOptions {
    Durability durability = Durability::Lazy;
    // Views that repeat elements (stride 0, expand()) are written out in full where the format
    // cannot share storage (safetensors): a 454-byte file can ask for 4 TiB. An output beyond 4x
    // the input's storage bytes (and 64 MiB more) is refused unless this is set.
    bool allowExpand = false;
};

struct WriteResult {
    std::string path;
    std::uint64_t bytes = 0;
    std::vector<std::string> notes;  // e.g. safetensors aliases, materialised views
};

// Torch: records data.pkl, byteorder, data/<key> (plan order), version = "3\n", under the output's
// basename without its last extension; stored bytes are copied with copy_file_range (CRC carried
// for whole unchanged zip records); deflated input members are inflated one at a time.
// Safetensors: tensor names are the key-path components joined by '.' (a state-dict root keeps its
// keys); identical views are stored once with `removed -> kept` in __metadata__; other views of a
// shared storage are written as copies; top-level scalars become __metadata__ strings next to
// "format": "pt"; unsupported dtypes/forms fail naming the tensor. `notes` says what was changed.
// Errors: Usage (OUT is the input, or a directory), WriteFailed (strerror text), Cancelled
// (`stop` is checked between records and chunks); on any error no output file exists.
Expected<WriteResult> writeCheckpoint(const Checkpoint& in, const transform::Plan& plan, const std::string& outPath,
                                      const std::function<void(const WriteProgress&)>& progress = {},
                                      std::stop_token stop = {}, const WriteOptions& options = {});

// The same bytes into `sink` instead of a file: what writeCheckpoint writes for `outPath` (the
// torch archive's folder is named after it), byte for byte, into a sink that may take them in order
// only (an S3 multipart upload, remote/s3_upload.h). The caller completes or abandons the sink: on
// an error nothing here undoes what was appended. Errors as writeCheckpoint's.
Expected<WriteResult> writeCheckpointTo(const Checkpoint& in, const transform::Plan& plan, ByteSink& sink,
                                        const std::string& outPath,
                                        const std::function<void(const WriteProgress&)>& progress = {},
                                        std::stop_token stop = {}, const WriteOptions& options = {});

}  // namespace ckpt::write
