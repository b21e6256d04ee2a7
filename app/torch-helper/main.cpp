// ckptscope-torch-helper: the one process that links LibTorch (DESIGN.md "LibTorch lives in a
// helper process"). It reads one JSON request line on stdin, opens the checkpoint itself with the
// Qt-free reader (no pickle is ever executed), and answers with JSON event lines on stdout; the
// protocol is documented in core/device/testload.h.
#include "checkpoint/checkpoint.h"
#include "load_plan.h"
#include "util/printable.h"

#include <csignal>
#include <iostream>
#include <optional>
#include <string>
#include <sys/prctl.h>

namespace {

using nlohmann::json;
using namespace ckpt;

std::string_view codeName(ErrorCode c)
{
    switch (c) {
    case ErrorCode::Io:
        return "Io";
    case ErrorCode::NotCheckpoint:
        return "NotCheckpoint";
    case ErrorCode::Truncated:
        return "Truncated";
    case ErrorCode::Corrupt:
        return "Corrupt";
    case ErrorCode::Unsupported:
        return "Unsupported";
    case ErrorCode::Limit:
        return "Limit";
    case ErrorCode::Usage:
        return "Usage";
    case ErrorCode::OutOfMemory:
        return "OutOfMemory";
    case ErrorCode::DeviceUnavailable:
        return "DeviceUnavailable";
    case ErrorCode::Cancelled:
        return "Cancelled";
    default:
        return "LoadFailed";
    }
}

void emitLine(const json& j)
{
    // One write per event, flushed, so the client sees progress as it happens.
    std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << '\n' << std::flush;
}

int emitError(ErrorCode code, const std::string& message)
{
    emitLine({{"event", "error"}, {"code", codeName(code)}, {"message", message}});
    return code == ErrorCode::Usage ? 2 : 1;
}

bool underSelection(const std::string& path, const std::string& select)
{
    if (select.empty() || path == select) {
        return true;
    }
    return path.size() > select.size() && path.compare(0, select.size(), select) == 0 && path[select.size()] == '/';
}

// Chooses the tensors and the storages they view. Tensors without a strided storage (meta,
// sparse, nested, wrapper subclasses) have no bytes to place and are reported as skipped.
Expected<helper::LoadPlan> makePlan(const Checkpoint& ck, const std::string& select, std::vector<json>& skipped,
                                    std::vector<std::vector<std::byte>>& scratch)
{
    helper::LoadPlan plan;
    std::vector<std::optional<std::uint32_t>> planIndexOfStorage(ck.storages.size());  // into plan.storages
    bool any = false;
    for (const auto& t : ck.tensors) {
        if (!underSelection(t.path, select)) {
            continue;
        }
        any = true;
        if (!t.storage.valid() || (t.form != pickle::TensorForm::Strided && t.form != pickle::TensorForm::Quantized)) {
            skipped.push_back({{"path", t.path},
                               {"reason", "no storage to place (" + std::string(t.location) + " / non-strided form)"}});
            continue;
        }
        const auto& st = ck.storages[t.storage];
        const std::uint32_t esize = elementSize(t.dtype);
        if (esize == 0) {
            skipped.push_back({{"path", t.path}, {"reason", "unknown element type"}});
            continue;
        }
        // The furthest byte this view reaches must lie inside its storage.
        std::uint64_t extent = t.numel == 0 ? 0 : 1;
        for (std::size_t d = 0; d < t.shape.size() && t.numel > 0; ++d) {
            if (t.stride[d] < 0) {
                return Error{ErrorCode::Corrupt, t.path + " has a negative stride", ck.path, {}};
            }
            extent += static_cast<std::uint64_t>(t.shape[d] - 1) * static_cast<std::uint64_t>(t.stride[d]);
        }
        if (t.numel > 0 && (static_cast<std::uint64_t>(t.storageOffset) + extent) * esize > st.nbytes) {
            return Error{ErrorCode::Corrupt,
                         t.path + " reaches past the end of its storage " + st.key + " (" + std::to_string(st.nbytes) +
                             " bytes)",
                         ck.path,
                         {}};
        }
        if (!planIndexOfStorage[t.storage.value()]) {
            if (!st.present) {
                return Error{ErrorCode::Truncated,
                             "storage " + st.key + " (" + t.path + ") is missing from the file or shorter than its " +
                                 std::to_string(st.nbytes) + " bytes",
                             ck.path,
                             {}};
            }
            scratch.emplace_back();
            auto data = ck.storageData(t.storage, scratch.back());
            if (!data) {
                return data.error();
            }
            planIndexOfStorage[t.storage.value()] = static_cast<std::uint32_t>(plan.storages.size());
            plan.storages.push_back({st.key, data->first(std::min<std::size_t>(data->size(), st.nbytes)), {}});
            plan.totalBytes += plan.storages.back().bytes.size();
        }
        helper::TensorPlan tp;
        tp.path = t.path;
        tp.storage = *planIndexOfStorage[t.storage.value()];
        tp.dtype = t.dtype;
        tp.elementSize = esize;
        tp.shape = t.shape;
        tp.stride = t.stride;
        tp.storageOffset = t.storageOffset;
        tp.nbytes = t.nbytes;
        plan.storages[tp.storage].tensors.push_back(static_cast<std::uint32_t>(plan.tensors.size()));
        plan.tensors.push_back(std::move(tp));
    }
    if (!select.empty() && !any) {
        return Error{ErrorCode::Usage, "no tensor at or under '" + select + "'", ck.path, {}};
    }
    return plan;
}

int run()
{
    // The client puts us in a process group of our own (so a timeout kills all we start), which
    // also keeps a terminal's Ctrl-C from reaching us: die with the client instead of holding
    // GPU memory on.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    std::string line;
    if (!std::getline(std::cin, line)) {
        return emitError(ErrorCode::Usage, "ckptscope-torch-helper: expected one JSON request line on stdin");
    }
    const json req = json::parse(line, nullptr, false);
    if (req.is_discarded() || !req.is_object()) {
        return emitError(ErrorCode::Usage, "ckptscope-torch-helper: the request is not a JSON object");
    }
    const std::string cmd = req.value("cmd", std::string());
    if (cmd != "testload") {
        return emitError(ErrorCode::Usage, "ckptscope-torch-helper: unknown command '" + cmd + "'");
    }
    // Text that is not UTF-8 comes as <field>_hex (see core/device/testload.cpp).
    auto textField = [&req](const std::string& field) {
        if (auto hex = req.find(field + "_hex"); hex != req.end() && hex->is_string()) {
            return fromHex(hex->get<std::string>()).value_or(std::string());
        }
        return req.value(field, std::string());
    };
    const std::string path = textField("path");
    auto opened = openCheckpoint(path);
    if (!opened) {
        return emitError(opened.error().code, opened.error().describe());
    }
    const Checkpoint& ck = **opened;
    std::vector<json> skipped;
    std::vector<std::vector<std::byte>> scratch;
    auto plan = makePlan(ck, textField("select"), skipped, scratch);
    if (!plan) {
        return emitError(plan.error().code, plan.error().describe());
    }
    plan->device = req.value("device", std::string("cpu"));
    plan->verify = req.value("verify", false);
    return helper::runLoad(*plan, [&skipped](const json& ev) {
        if (ev.value("event", std::string()) == "result") {
            // One event each, before the result: a result line stays small however many there are.
            for (auto& s : skipped) {
                s["event"] = "skipped";
                emitLine(s);
            }
        }
        emitLine(ev);
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
        return emitError(ErrorCode::Internal, std::string("ckptscope-torch-helper: ") + e.what());
    }
}
