// Where a conversion may write, decided before anything is written: a target that exists must be a
// regular file (a device node, FIFO or socket would be replaced by the rename, and /dev/null with
// it), never an input, and a batch of conversions must not write two outputs to one file.
#pragma once

#include "util/error.h"

#include <optional>
#include <string>
#include <vector>

namespace ckpt::write {

// The path the output is renamed onto. A symlink to a regular file is followed, so the file it
// points to is replaced and the link stays, as `cp` and torch.save do. Errors (Usage): the target
// is a directory, or exists and is not a regular file.
Expected<std::string> resolveTarget(const std::string& target);

struct Conversion {
    std::string input;
    std::string output;
};

// Checks a whole batch before its first write: every target resolves, no output is any input (by
// inode, so links count, or by resolved path) and no two outputs are the same file. The error names
// the offending pair; nothing is written when it fails.
Expected<void> checkConversions(const std::vector<Conversion>& batch);

// Which of `files` the path `target` names, as checkConversions compares: by inode (hard links and
// symlinks count) or by resolved path (for one not written yet). nullopt when none.
std::optional<std::size_t> sameFileAs(const std::string& target, const std::vector<std::string>& files);

// An output whose name says the other format: a safetensors file named .pt/.pth/.bin/.ckpt/.th/.pkl,
// which torch.load fails on with "invalid load key", or a torch.save zip named .safetensors, which
// safetensors cannot read; `check` of either says nothing, since the bytes are right. The window asks
// before such a write, `convert` refuses it. Any other name (no extension, .model) says nothing.
struct ExtensionMismatch {
    // "llama.pt is a torch.save name, but the file would be safetensors, which torch.load cannot read"
    std::string message;
    std::string agreeing;  // the same path with the format's extension: "llama.safetensors"
};
[[nodiscard]] std::optional<ExtensionMismatch> extensionMismatch(const std::string& target, bool safetensors);

// Temporary files: `.<name>.ckptscope-<pid>-<6 random>` beside the target, <name> shortened so the
// whole stays within the directory's NAME_MAX.
namespace detail {

[[nodiscard]] std::string tempPrefix(const std::string& dir, const std::string& name);

// Removes temporaries a killed conversion to the same target left behind: names of our pattern
// whose process is gone and which nobody holds locked. Best effort; returns how many went.
int removeStaleTemps(const std::string& dir, const std::string& name);

// The temporaries of this process, so a signal handler can remove them (async-signal-safe: fixed
// slots, no allocation). register returns a slot, or -1 when all are taken.
int registerTemp(const std::string& path);
// A temporary folder (a sharded set being written): the handler empties it and removes it.
int registerTempDir(const std::string& path);
void unregisterTemp(int slot);
void removeRegisteredTemps();  // async-signal-safe

}  // namespace detail

// SIGINT, SIGTERM and SIGHUP remove this process's temporary outputs, then exit with 128 + the
// signal (130, 143, 129), as a shell reports it. For executables that write outputs.
void removeTempsOnSignals();

}  // namespace ckpt::write
