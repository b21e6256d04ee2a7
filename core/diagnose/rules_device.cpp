// Where storages come back when torch.load runs without map_location (docs/format.md §4.3): on the
// device they were saved from. The messages quoted are torch's own (validate_cuda_device).
#include "diagnose/rules.h"
#include "util/device_name.h"

#include <algorithm>
#include <map>

namespace ckpt::diagnose {
namespace {

// A location tag as the rules read it: a device name, or a tag that is none, kept whole (torch's
// deserializers take no such tag either).
DeviceName locationOf(std::string_view tag)
{
    if (auto d = parseDeviceName(tag)) {
        return *d;
    }
    return {std::string(tag), std::nullopt};
}

bool isHostOrVirtual(const std::string& type)
{
    return type == "cpu" || type == "meta";
}

struct DeviceUse {
    std::uint64_t bytes = 0;
    std::uint32_t storages = 0;
};

std::string perDevice(const std::vector<std::pair<std::string, DeviceUse>>& uses)
{
    std::string out;
    for (const auto& [loc, use] : uses) {
        if (!out.empty()) {
            out += ", ";
        }
        out += loc + ": " + humanBytes(use.bytes) + " in " + plural(use.storages, "storage", "storages");
    }
    return out;
}

}  // namespace

void deviceRules(const Checkpoint& ckpt, Findings& out)
{
    // Storages in the order torch restores them (the order the pickle first names them).
    std::map<std::string, DeviceUse> byLoc;
    std::vector<std::pair<std::string, DeviceUse>> ordered;
    std::int64_t firstBeyondOne = -1;  // the device torch names when only one GPU exists
    std::int64_t highest = -1;
    std::uint64_t pinnedBytes = 0;
    std::uint32_t pinnedStorages = 0;
    bool anyCuda = false;
    bool anyMps = false;
    std::vector<std::string> pinnedPaths;
    for (const auto& s : ckpt.storages) {
        auto& use = byLoc[s.location];
        use.bytes += s.nbytes;
        ++use.storages;
        const auto loc = locationOf(s.location);
        if (isHostOrVirtual(loc.type)) {
            continue;
        }
        pinnedBytes += s.nbytes;
        ++pinnedStorages;
        anyMps = anyMps || loc.type == "mps";
        if (loc.type == "cuda") {
            anyCuda = true;
            const std::int64_t index = loc.index.value_or(0);
            highest = std::max(highest, index);
            if (firstBeyondOne < 0 && index >= 1) {
                firstBeyondOne = index;
            }
        }
    }
    for (const auto& t : ckpt.tensors) {
        if (!isHostOrVirtual(locationOf(t.location).type) && !t.location.empty()) {
            pinnedPaths.push_back(t.path);
        }
    }
    // "cpu" first, then by name, as bytesByLocation orders them.
    for (const auto& [loc, use] : byLoc) {
        if (loc == "cpu") {
            ordered.insert(ordered.begin(), {loc, use});
        } else {
            ordered.emplace_back(loc, use);
        }
    }

    if (pinnedStorages > 0) {
        Finding f;
        f.code = "device-pinned";
        f.severity = Severity::Warning;
        std::vector<std::string> devs;
        for (const auto& [loc, use] : ordered) {
            if (!isHostOrVirtual(locationOf(loc).type)) {
                devs.push_back(loc);
            }
        }
        std::string devList;
        for (const auto& d : devs) {
            devList += (devList.empty() ? "" : ", ") + d;
        }
        f.title = "Storages are pinned to " + devList + ": torch.load without map_location puts them back there";
        f.detail = plural(pinnedStorages, "storage", "storages") + " holding " + bytesText(pinnedBytes) +
                   " were saved on " + devList + " (" + perDevice(ordered) +
                   "), and torch.load without map_location recreates each one on the device it names.";
        if (anyCuda) {
            f.detail += " On a machine without CUDA it fails with \"RuntimeError: " + cudaUnavailableText() + "\"";
            if (firstBeyondOne >= 0) {
                f.detail += " On a machine with fewer than " + std::to_string(highest + 1) +
                            " GPUs (the highest index saved is cuda:" + std::to_string(highest) +
                            ") it fails; with one GPU: \"RuntimeError: " + cudaDeviceCountText(firstBeyondOne, 1) +
                            "\"";
            }
            // Every DDP rank that loads without map_location allocates the whole saved layout on the
            // saved devices, so cuda:0 carries N copies.
            std::string busiest = "cuda:0";
            std::uint64_t busiestBytes = 0;
            if (auto it = byLoc.find("cuda:0"); it != byLoc.end()) {
                busiestBytes = it->second.bytes;
            } else {
                for (const auto& [loc, use] : byLoc) {
                    if (locationOf(loc).type == "cuda" && use.bytes > busiestBytes) {
                        busiest = loc;
                        busiestBytes = use.bytes;
                    }
                }
            }
            f.detail += " Under DDP, every rank that calls torch.load without map_location allocates these "
                        "storages on " +
                        busiest + " before moving anything to its own GPU: " + busiest + " then holds";
            for (int n : {2, 4, 8}) {
                f.detail += std::string(n == 2 ? " " : ", ") + humanBytes(busiestBytes * static_cast<unsigned>(n)) +
                            " with " + std::to_string(n) + " ranks";
            }
            f.detail +=
                " (N x " + humanBytes(busiestBytes) + "), on top of each rank's model, and often runs out of memory.";
        }
        if (anyMps) {
            f.detail += " Storages tagged mps load only on Apple-silicon machines with MPS available.";
        }
        f.detail += " Fix: map every storage to cpu (torch.load(..., map_location='cpu') does the same at load "
                    "time); the model's .to(device) then places it.";
        f.paths = pinnedPaths;
        transform::Options fix;
        fix.mapLocation.all = "cpu";
        f.fix = fix;
        out.push_back(std::move(f));
    }

    // A model-parallel save spreads storages over several accelerators; cpu next to one GPU (a
    // step counter, an RNG state) is ordinary and already covered by device-pinned.
    std::size_t real = 0;
    for (const auto& [loc, use] : ordered) {
        real += isHostOrVirtual(locationOf(loc).type) ? 0 : 1;
    }
    if (real > 1) {
        Finding f;
        f.code = "mixed-devices";
        f.severity = Severity::Warning;
        f.title = "Storages are spread over " + std::to_string(real) + " GPUs";
        f.detail = "The storages were saved from " + std::to_string(real) + " devices (" + perDevice(ordered) +
                   "), as a model-parallel or pipeline model is. torch.load without map_location needs every one "
                   "of them, and the loaded tensors stay split across devices; map them to one device (cpu) to "
                   "load anywhere and place them yourself.";
        for (const auto& t : ckpt.tensors) {
            if (t.location != "cpu" && t.location != "meta" && !t.location.empty()) {
                f.paths.push_back(t.path);
            }
        }
        transform::Options fix;
        fix.mapLocation.all = "cpu";
        f.fix = fix;
        out.push_back(std::move(f));
    }
}

}  // namespace ckpt::diagnose
