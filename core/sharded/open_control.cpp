#include "sharded/open_control.h"

#include "util/progress.h"

namespace ckpt::sharded {
namespace {

thread_local const OpenControl* t_control = nullptr;

}  // namespace

ScopedOpenControl::ScopedOpenControl(const OpenControl& control) : previous_(t_control)
{
    t_control = &control;
}

ScopedOpenControl::~ScopedOpenControl()
{
    t_control = previous_;
}

Error openCancelled(const std::string& path)
{
    Error e = makeError(ErrorCode::Cancelled, "opening cancelled");
    e.path = path;
    return e;
}

Expected<CheckpointPtr> openMember(const std::string& path, std::size_t index, std::size_t total)
{
    if (t_control != nullptr) {
        if (t_control->stop.stop_requested()) {
            return openCancelled(path);
        }
        if (t_control->progress) {
            t_control->progress(index, total, path);
        }
    }
    progress::noteReading(path);
    return openCheckpoint(path, OpenOptions{.modelConfig = false});  // the set ties its model
}

}  // namespace ckpt::sharded
