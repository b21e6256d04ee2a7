// The one rule for a file a folder names as its own (a set's shard or rank file, the model of an
// accelerate or Trainer folder): a plain file name whose file, once symlinks are resolved, is a
// regular file inside that folder. A crafted folder then cannot make ckptscope read, print the
// bytes of, or copy into its output /etc/passwd or a neighbouring checkpoint.
#pragma once

#include "util/error.h"

#include <string>

namespace ckpt {

// The path of the member `name` of `folder`: `name` must be a plain file name, and the file, once
// resolved, must sit in `folder` (or be a blob of the Hugging Face hub cache, whose
// snapshots/REV/ files are symlinks to ../../blobs/) and be a regular file. A missing file is
// returned as it is: each format reports those as its own finding. Corrupt otherwise, saying that
// `entry` (".metadata's storage_data", "latest") named `name` and where it leads.
Expected<std::string> memberOfFolder(const std::string& folder, const std::string& name, const std::string& entry);

}  // namespace ckpt
