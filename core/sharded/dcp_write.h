// One checkpoint -> a single-rank torch.distributed.checkpoint (DCP) folder, as
// `dcp.save(state_dict, checkpoint_id=DIR, no_dist=True)` or format_utils.torch_save_to_dcp write
// it with PyTorch 2.4+'s DefaultSavePlanner and FileSystemWriter (docs/format.md §12).
#pragma once

#include "checkpoint/checkpoint.h"
#include "transform/transform.h"
#include "util/error.h"
#include "write/write.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ckpt::sharded {

struct DcpWriteResult {
    std::string dir;
    std::vector<std::string> files;  // "__0_0.distcp", ".metadata"
    std::size_t tensors = 0;
    std::size_t values = 0;  // BYTE_IO items: every non-tensor leaf
    std::uint64_t bytes = 0;
};

// Writes the plan's root, a dict, into `outDir`: the tree flattened as _nested_dict.flatten_state_dict
// does over _traverse.traverse_state_dict (every mapping descended, str(key) path elements; lists
// and tuples are leaves unless a list holds a tensor or a container that is not a leaf; keys joined
// by '.'), each tensor one chunk at zero offsets written as `torch.save(tensor)` at its offset of
// `__0_0.distcp`, each other leaf `torch.save(obj)` as a BYTE_IO item, and `.metadata` pickled last
// with the real classes' module paths and state. Everything goes into a hidden folder beside
// `outDir` first and is moved in once complete.
// Errors: Usage (the root is no dict; a key is no str, int or bool; two paths flatten to one key;
// `outDir` is no folder or already holds a DCP set), Unsupported (a tensor that is not a plain
// strided tensor), WriteFailed. `progress`: bytes of the data file written so far, of about its size.
Expected<DcpWriteResult> writeDcpFolder(const Checkpoint& in, const transform::Plan& plan, const std::string& outDir,
                                        const write::WriteOptions& options,
                                        const std::function<void(const write::WriteProgress&)>& progress = {});

}  // namespace ckpt::sharded
