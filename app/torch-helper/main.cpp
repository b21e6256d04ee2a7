// ckptscope-torch-helper: the one process that links LibTorch (docs/design.md "LibTorch lives in a
// helper process"). It reads one JSON request line on stdin, opens the checkpoint itself with the
// Qt-free reader (no pickle is ever executed; a set as its view, read from its member files), and answers with JSON
// event lines on stdout; the protocol is documented in core/device/testload.h.
#include "checkpoint/checkpoint.h"
#include "device/helper_protocol.h"
#include "device/load_selection.h"
#include "load_plan.h"
#include "sharded/set_view.h"

#include <algorithm>
#include <csignal>
#include <string>
#include <sys/prctl.h>

namespace {

using nlohmann::json;
using namespace ckpt;
namespace protocol = ckpt::device::protocol;

// The shared selection (which storages, in torch.load's order) with the bytes of each, as the
// LibTorch half wants them.
helper::LoadPlan makePlan(const Checkpoint& ck, const device::LoadSelection& sel)
{
    constexpr std::size_t kPiece = 64U << 20;
    helper::LoadPlan plan;
    for (const auto& s : sel.storages) {
        const StorageEntry& st = ck.storages[s.storage];
        helper::StoragePlan sp{st.key,
                               st.nbytes,
                               [&ck, storage = s.storage, n = st.nbytes](const std::function<bool(Bytes)>& sink) {
                                   return ck.streamStorage(storage, 0, n, sink, kPiece);
                               },
                               {}};
        plan.totalBytes += sp.nbytes;
        for (const TensorIndex ti : s.tensors) {
            const TensorEntry& t = ck.tensors[ti];
            sp.tensors.push_back(static_cast<std::uint32_t>(plan.tensors.size()));
            plan.tensors.push_back({t.path, static_cast<std::uint32_t>(plan.storages.size()), t.dtype,
                                    elementSize(t.dtype), t.shape, t.stride, t.storageOffset, t.nbytes});
        }
        plan.storages.push_back(std::move(sp));
    }
    return plan;
}

int run()
{
    // The client puts us in a process group of our own (so a timeout kills all we start), which
    // also keeps a terminal's Ctrl-C from reaching us: die with the client instead of holding
    // GPU memory on.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    auto req = protocol::readRequest("ckptscope-torch-helper", "testload");
    if (!req) {
        return 2;
    }
    auto opened = sharded::openInput(protocol::textField(*req, "path"), req->value("set", false));
    if (!opened) {
        return protocol::emitError(opened.error().code, opened.error().describe());
    }
    const Checkpoint& ck = **opened;
    auto sel = device::selectForLoad(ck, protocol::textField(*req, "select"));
    if (!sel) {
        return protocol::emitError(sel.error().code, sel.error().describe());
    }
    auto plan = makePlan(ck, *sel);
    plan.device = req->value("device", std::string("cpu"));
    plan.verify = req->value("verify", false);
    return helper::runLoad(plan, [&sel](const json& ev) {
        if (ev.value("event", std::string()) == "result") {
            // One event each, before the result: a result line stays small however many there are.
            for (const auto& s : sel->skipped) {
                protocol::emit({{"event", "skipped"}, {"path", s.path}, {"reason", s.reason}});
            }
        }
        protocol::emit(ev);
    });
}

}  // namespace

int main()
{
    // A request with a field of the wrong type (json::type_error) or a failed allocation must still
    // end in an error event the client can report, not in std::terminate.
    try {
        return run();
    } catch (const std::exception& e) {
        return protocol::emitError(ErrorCode::Internal, std::string("ckptscope-torch-helper: ") + e.what());
    }
}
