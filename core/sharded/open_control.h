// Stop and progress for reading a set's member files, which is what takes time when a set opens
// (hundreds of shards, rank files of optimizer state on a slow disk). readSet, listSet, openView and
// consolidateSet install the caller's OpenControl for their thread while they run; each format opens
// its member files through openMember, which says which file it reads and ends the read with
// Cancelled once a stop is requested. Without a control installed, openMember is openCheckpoint.
#pragma once

#include "checkpoint/checkpoint.h"

#include <cstddef>
#include <functional>
#include <stop_token>
#include <string>

namespace ckpt::sharded {

struct OpenControl {
    std::stop_token stop;
    // Before each member file is read: its index among `total`, and its path.
    std::function<void(std::size_t index, std::size_t total, const std::string& path)> progress;
};

// Installs `control` for this thread for the scope's life (scopes nest; the inner one wins).
class ScopedOpenControl {
public:
    explicit ScopedOpenControl(const OpenControl& control);
    ScopedOpenControl(const ScopedOpenControl&) = delete;
    ScopedOpenControl& operator=(const ScopedOpenControl&) = delete;
    ScopedOpenControl(ScopedOpenControl&&) = delete;
    ScopedOpenControl& operator=(ScopedOpenControl&&) = delete;
    ~ScopedOpenControl();

private:
    const OpenControl* previous_;
};

// The error of an open ended by a stop request, naming `path`.
[[nodiscard]] Error openCancelled(const std::string& path);

// Opens member file `index` of `total` of a set: Cancelled when a stop was requested, otherwise
// openCheckpoint(path) after telling the installed control's progress.
Expected<CheckpointPtr> openMember(const std::string& path, std::size_t index, std::size_t total);

}  // namespace ckpt::sharded
