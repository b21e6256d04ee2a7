// The text of a busy bar, by the rule the command line's progress line follows (util/progress.h):
// nothing for work under a second, then at most ten updates a second, each saying the bytes done of
// the total, the rate and the time left ("Writing: 1.21 GiB of 8.00 GiB (15%), 1.43 GB/s, 5 s
// left"). The window's export and test-load use it, so what a user reads there is what a terminal
// shows for the same work.
#pragma once

#include "util/progress.h"

#include <QString>

#include <cstdint>
#include <optional>
#include <string>

namespace ckpt::ui {

// One per piece of work, on the thread that does it.
class BusyText {
public:
    explicit BusyText(std::string label);
    // The text for `done` of `total` bytes (`detail` after the figures), or nullopt when no update
    // is due yet.
    std::optional<QString> due(std::uint64_t done, std::uint64_t total, const std::string& detail = {});

private:
    std::string label_;
    progress::Meter meter_;
};

}  // namespace ckpt::ui
