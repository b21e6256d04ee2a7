#include "cli/cmd_testload.h"

#include "checkpoint/checkpoint.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/json_out.h"
#include "cli/parse.h"
#include "cli/progress.h"
#include "cli/remote_cli.h"
#include "cli/sharded_cli.h"
#include "device/ddp_replay.h"
#include "device/nvml.h"
#include "device/sha256.h"
#include "device/testload.h"
#include "sharded/listing.h"
#include "sharded/out_dir.h"
#include "sharded/set_view.h"
#include "util/json_text.h"
#include "util/printable.h"
#include "write/output_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>

namespace ckpt::cli {
namespace {

using ojson = nlohmann::ordered_json;

// What a remote input names, downloaded for the engines (which map local files) into a new hidden
// folder in $TMPDIR, removed when the run ends or is stopped by a signal.
struct ForEngines {
    sharded::detail::TempDir dir;
    remote::Downloaded got;
};

Expected<ForEngines> downloadForEngines(RemoteSession& remote, const std::string& url, bool fileOnly)
{
    auto dir = sharded::detail::TempDir::create(remote::downloadDirectory() + "/remote");
    if (!dir) {
        return dir.error();
    }
    auto got = remote.download(url, dir->path(), fileOnly);
    if (!got) {
        return got.error();
    }
    return ForEngines{std::move(*dir), std::move(*got)};
}

ojson timelineJson(const device::Timeline& t)
{
    ojson j;
    j["interval_ms"] = t.intervalMs;
    j["devices"] = t.devices;
    j["uuids"] = t.uuids;
    j["total_bytes"] = t.totalBytes;
    auto samples = ojson::array();
    for (const auto& s : t.samples) {
        samples.push_back(
            ojson{{"t_ms", std::round(s.tMs * 1000) / 1000}, {"used_bytes", s.usedBytes}, {"own_bytes", s.ownBytes}});
    }
    j["samples"] = std::move(samples);
    return j;
}

// Every device with each of its identities: a GPU's UUID, PCI bus id, NVML index (and MIG index)
// and CUDA ordinal in this process, null where it has none (a GPU CUDA does not see here has no
// ordinal; `id` is then "nvml:I").
ojson inventoryJson(const device::Inventory& inv)
{
    auto orNull = [](int v) { return v >= 0 ? ojson(v) : ojson(nullptr); };
    auto rows = ojson::array();
    for (const auto& d : inv.devices) {
        ojson r{{"id", d.id}, {"name", d.name}, {"total_bytes", d.totalBytes}, {"used_bytes", d.usedBytes}};
        if (d.id != "cpu") {
            r["uuid"] = d.uuid.empty() ? ojson(nullptr) : ojson(d.uuid);
            r["pci_bus_id"] = d.pciBusId.empty() ? ojson(nullptr) : ojson(d.pciBusId);
            r["nvml_index"] = orNull(d.index);
            r["mig_index"] = orNull(d.mig);
            r["cuda_ordinal"] = orNull(d.cudaOrdinal);
        }
        rows.push_back(std::move(r));
    }
    return rows;
}

ojson placementJson(const device::TorchLoadPlacement& p)
{
    auto rows = ojson::array();
    for (const auto& r : p.rows) {
        ojson row{{"location", r.location}, {"bytes", r.bytes}, {"fails", r.fails}};
        if (!r.reason.empty()) {
            row["reason"] = r.reason;
        }
        rows.push_back(std::move(row));
    }
    return ojson{{"would_fail", p.wouldFail}, {"by_location", std::move(rows)}};
}

// --verify's findings: every storage's hash as loaded (equal to the file's, or the load failed)
// and each tensor's C-order hash, or why it has none.
void addChecksJson(ojson& j, const device::TestloadReport& r)
{
    auto storages = ojson::array();
    for (const auto& c : r.storageChecks) {
        storages.push_back(
            ojson{{"storage", c.storage}, {"bytes", c.bytes}, {"sha256", c.sha256}, {"matches_file", c.matchesFile}});
    }
    j["storage_checks"] = std::move(storages);
    auto tensors = ojson::array();
    for (const auto& c : r.checks) {
        ojson t{{"path", c.path}, {"storage", c.storage}};
        if (!c.sha256.empty()) {
            t["sha256"] = c.sha256;
        } else {
            t["note"] = c.note;
        }
        tensors.push_back(std::move(t));
    }
    j["checks"] = std::move(tensors);
}

ojson reportJson(const device::TestloadReport& r, bool verify)
{
    ojson j;
    j["device"] = r.device;
    if (!r.deviceUuid.empty()) {
        j["device_uuid"] = r.deviceUuid;
    }
    j["tensors_loaded"] = r.tensorsLoaded;
    j["storages_loaded"] = r.storagesLoaded;
    j["bytes"] = r.bytes;
    j["seconds"] = r.seconds;
    j["gb_per_s"] = r.gbPerS;
    // Never a 0 B measurement: a peak nobody measured is null, with the source saying so.
    j["peak_bytes"] = r.peakBytes > 0 || r.bytes == 0 ? ojson(r.peakBytes) : ojson(nullptr);
    j["peak_source"] = r.peakSource;
    if (!r.peakNote.empty()) {
        j["peak_note"] = r.peakNote;
    }
    j["engine"] = r.engine;
    if (!r.deviceName.empty()) {
        j["device_name"] = r.deviceName;
    }
    if (r.engine == "cuda") {
        const bool contextKnown = r.contextSource != "unknown";
        j["context_bytes"] = contextKnown ? ojson(r.contextBytes) : ojson(nullptr);
        j["context_source"] = r.contextSource;
        j["pid_hidden"] = r.pidHidden;
        j["torch_load_peak_bytes"] = contextKnown ? ojson(r.torchPeakBytes) : ojson(nullptr);
        j["torch_load_reserved_bytes"] = r.torchReservedBytes;
        j["torch_alloc_conf"] = r.torchAllocConf;
    }
    j["other_devices_touched"] = r.otherDevicesTouched;
    auto others = ojson::array();
    for (const auto& d : r.otherDevices) {
        others.push_back(ojson{{"device", d.device},
                               {"uuid", d.uuid},
                               {"rise_bytes", d.riseBytes},
                               {"own_bytes", d.ownBytes},
                               {"by", d.by}});
    }
    j["other_devices"] = std::move(others);
    if (!r.otherDevicesDoubt.empty()) {
        j["other_devices_doubt"] = r.otherDevicesDoubt;
    }
    auto skipped = ojson::array();
    for (const auto& s : r.skipped) {
        skipped.push_back(ojson{{"path", s.path}, {"reason", s.reason}});
    }
    j["skipped"] = std::move(skipped);
    if (verify) {
        addChecksJson(j, r);
    }
    j["helper"] = ojson{{"path", r.helperPath},
                        {"torch_version", r.torchVersion},
                        {"cuda", r.helperHasCuda},
                        {"wall_seconds", r.helperSeconds}};
    j["timeline"] = timelineJson(r.timeline);
    return j;
}

void printPlacement(std::ostream& out, const device::TorchLoadPlacement& p)
{
    out << "plain torch.load (no map_location) would place:\n";
    for (const auto& r : p.rows) {
        out << "  " << std::left << std::setw(10) << displayText(r.location) << ' ' << std::setw(10)
            << humanBytes(r.bytes);
        if (r.fails) {
            out << "  FAILS: " << displayText(r.reason);
        } else if (!r.reason.empty()) {
            out << "  (" << displayText(r.reason) << ")";
        }
        out << '\n';
    }
    if (p.wouldFail) {
        out << "  -> torch.load would fail here; pass map_location (or convert with --map-location)\n";
    }
}

void printReport(std::ostream& out, const std::string& file, const device::TestloadReport& r)
{
    std::ostringstream rate;
    rate << std::fixed << std::setprecision(2) << r.gbPerS;
    std::ostringstream secs;
    secs << std::fixed << std::setprecision(3) << r.seconds;
    out << displayText(file) << ": loaded " << r.tensorsLoaded << (r.tensorsLoaded == 1 ? " tensor" : " tensors")
        << " (" << humanBytes(r.bytes) << " in " << r.storagesLoaded
        << (r.storagesLoaded == 1 ? " storage" : " storages") << ") onto " << r.device << " in " << secs.str() << " s, "
        << rate.str() << " GB/s\n";
    out << "peak memory on " << r.device << ": "
        << (r.peakBytes > 0 || r.bytes == 0 ? humanBytes(r.peakBytes) : std::string("not measured"));
    if (!r.peakSource.empty()) {
        out << " (" << r.peakSource << ")";
    }
    out << '\n';
    if (!r.peakNote.empty()) {
        out << "  note: " << displayText(r.peakNote) << '\n';
    }
    if (r.engine == "cuda") {
        const bool contextKnown = r.contextSource != "unknown";
        out << "CUDA context: " << (contextKnown ? humanBytes(r.contextBytes) : std::string("unknown"));
        if (contextKnown) {
            out << "; torch.load(map_location='" << r.device << "') would peak at " << humanBytes(r.torchPeakBytes)
                << " (context + " << humanBytes(r.torchReservedBytes) << " of caching-allocator segments";
        } else {
            out << "; torch.load(map_location='" << r.device << "') would reserve " << humanBytes(r.torchReservedBytes)
                << " of caching-allocator segments (plus its context";
        }
        out << ", " << displayText(r.torchAllocConf.empty() ? "default allocator settings" : r.torchAllocConf) << ")\n";
    }
    std::string others;
    std::string strangers;
    for (const auto& d : r.otherDevices) {
        (d.by == "this load" ? others : strangers) +=
            " " + d.device + " +" + humanBytes(d.riseBytes) + (d.by == "this load" ? "" : " (" + d.by + ")");
    }
    if (r.timeline.devices.size() <= 1) {
        out << "other GPUs: none to watch\n";
    } else if (r.otherDevicesTouched) {
        out << "WARNING: this load put memory on other devices:" << others << '\n';
    } else {
        out << "other GPUs untouched by this load (" << r.timeline.samples.size() << " samples every "
            << r.timeline.intervalMs << " ms)\n";
    }
    if (!r.otherDevicesDoubt.empty()) {
        out << "NOTE: " << displayText(r.otherDevicesDoubt) << '\n';
    } else if (!strangers.empty()) {
        out << "other processes moved:" << strangers << '\n';
    }
    for (const auto& s : r.skipped) {
        out << "skipped " << displayText(s.path) << ": " << displayText(s.reason) << '\n';
    }
}

void printChecks(std::ostream& out, const device::TestloadReport& r)
{
    std::uint64_t bytes = 0;
    for (const auto& c : r.storageChecks) {
        bytes += c.bytes;
    }
    const auto hashed = static_cast<std::size_t>(
        std::count_if(r.checks.begin(), r.checks.end(), [](const auto& c) { return !c.sha256.empty(); }));
    out << "verified: " << r.storageChecks.size() << (r.storageChecks.size() == 1 ? " storage" : " storages") << " ("
        << humanBytes(bytes) << ") equal to the file (sha256)";
    if (!r.checks.empty()) {
        out << "; " << hashed << " of " << r.checks.size() << " tensors hashed in C order";
    }
    out << '\n';
    for (const auto& c : r.checks) {
        if (c.sha256.empty()) {
            out << "  " << c.path << ": " << c.note << '\n';
        }
    }
}

// No driver, no GPU or no such device is bad input (2); a load that ran out of memory or broke, 1.
int failureExit(ErrorCode code)
{
    if (code == ErrorCode::DeviceUnavailable) {
        return kExitBadInput;
    }
    const int rc = exitCodeFor(code);
    return rc == kExitOk ? kExitProblems : rc;
}

ojson replayJson(const device::ReplayReport& r)
{
    ojson j;
    auto ranks = ojson::array();
    for (const auto& rank : r.ranks) {
        ojson row{{"rank", rank.rank},
                  {"device", rank.device},
                  {"context_bytes", rank.contextBytes},
                  {"bytes_by_device", rank.bytesByDevice},
                  {"uuids", rank.uuids}};
        if (!rank.error.empty()) {
            row["error"] = rank.error;
            row["bytes_placed"] = rank.bytesPlaced;
            row["total_bytes"] = rank.totalBytes;
        }
        ranks.push_back(std::move(row));
    }
    j["ranks"] = std::move(ranks);
    auto devices = ojson::array();
    for (const auto& d : r.devices) {
        devices.push_back(ojson{{"device", d.device},
                                {"uuid", d.uuid},
                                {"contexts", d.contexts},
                                {"context_bytes", d.contextBytes},
                                {"context_source", d.contextSource},
                                {"weight_copies", d.weightCopies},
                                {"expected_bytes", d.expectedBytes},
                                {"measured_peak_bytes", d.measuredPeakBytes}});
    }
    j["devices"] = std::move(devices);
    j["weight_bytes"] = r.weightBytes;
    j["context_bytes"] = r.contextBytes;
    j["verdict"] = r.verdict;
    j["failed_ranks"] = r.failedRanks;
    j["timeline"] = timelineJson(r.timeline);
    return j;
}

// A set is test-loaded as the one checkpoint `convert DIR -o OUT` writes from it, read in place: the
// engine opens the same view (sharded::openInput) and reads each storage from the files that hold
// it, so loading it puts on the device exactly what loading that file would, and nothing is written.
void printSetNote(std::ostream& out, sharded::SetKind kind, const Checkpoint& view)
{
    out << "(a " << sharded::setKindName(kind) << " of " << view.setFiles.size() << " files: test-loaded as the one "
        << humanBytes(view.fileSize)
        << " checkpoint `ckptscope convert` writes from it, each storage read in place from the files that hold it)\n";
}

ojson setJson(sharded::SetKind kind, const Checkpoint& view)
{
    // `kind` is the identifier inspect's set object carries (huggingface, deepspeed-zero, ...), `what` the phrase.
    return {{"kind", std::string(sharded::setKindId(kind))},
            {"what", std::string(sharded::setKindName(kind))},
            {"files", view.setFiles.size()},
            {"consolidated_bytes", view.fileSize}};
}

int runReplay(const std::string& file, bool set, int ranks, const std::string& mapLocation, const std::string& select,
              int intervalMs, bool json, const std::shared_ptr<const device::Nvml>& nvml, std::ostream& out,
              std::ostream& err)
{
    device::ReplayRequest req;
    req.path = file;
    req.set = set;
    req.ranks = ranks;
    req.mapLocation = mapLocation;
    req.select = select;
    req.interval = std::chrono::milliseconds(intervalMs);
    ProgressLine progress(err, json, "testload");
    auto report = device::ddpReplay(
        req,
        [&](int loaded) { progress.status(std::to_string(loaded) + " of " + std::to_string(ranks) + " ranks loaded"); },
        {}, nvml);
    progress.finish();
    if (!report) {
        printError(err, report.error(), file);
        return failureExit(report.error().code);
    }
    if (json) {
        ojson j;
        j["schema"] = kJsonSchema;
        j["file"] = file;
        j["ddp_ranks"] = ranks;
        j["map_location"] = mapLocation.empty() ? ojson(nullptr) : ojson(mapLocation);
        const ojson body = replayJson(*report);
        for (const auto& [k, v] : body.items()) {
            j[k] = v;
        }
        out << dumpJson(j, 2) << '\n';
        return report->failedRanks > 0 ? kExitProblems : kExitOk;
    }
    out << displayText(file) << ": " << ranks << " DDP ranks, torch.load("
        << (mapLocation.empty() ? std::string("no map_location") : "map_location=" + displayText(mapLocation)) << ")\n";
    for (const auto& d : report->devices) {
        out << "  " << d.device << ": " << d.contexts << (d.contexts == 1 ? " context, " : " contexts, ")
            << d.weightCopies << (d.weightCopies == 1 ? " copy" : " copies") << " of the weights, expected "
            << humanBytes(d.expectedBytes) << ", measured peak " << humanBytes(d.measuredPeakBytes) << '\n';
    }
    for (const auto& r : report->ranks) {
        if (!r.error.empty()) {
            out << "  rank " << r.rank << " on " << r.device << " FAILED after placing " << humanBytes(r.bytesPlaced)
                << " of " << humanBytes(r.totalBytes) << ": " << displayText(r.error) << '\n';
        }
    }
    out << displayText(report->verdict) << '\n';
    return report->failedRanks > 0 ? kExitProblems : kExitOk;
}

}  // namespace

std::function<Expected<std::string>(const std::string&)> fileStorageHasher(CheckpointPtr ck)
{
    return [ck = std::move(ck)](const std::string& key) -> Expected<std::string> {
        for (std::uint32_t i = 0; i < ck->storages.size(); ++i) {
            const StorageIndex s{i};
            if (ck->storages[s].key != key) {
                continue;
            }
            // Streamed: a set's storage (read from its member files) or a deflated one is never
            // held whole.
            device::Sha256 h;
            if (auto read = ck->streamStorage(s, 0, ck->storages[s].nbytes,
                                              [&h](Bytes piece) {
                                                  h.update(piece);
                                                  return true;
                                              });
                !read) {
                return read.error();
            }
            return h.hexDigest();
        }
        Error e = makeError(ErrorCode::LoadFailed,
                            "the test-load helper checked a storage '" + key + "' that this file does not have");
        e.path = ck->path;
        return e;
    };
}

int cmdTestload(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)
{
    CLI::App app{"Load every storage of a checkpoint onto a device (in a helper process: the CUDA driver for cuda:N, "
                 "LibTorch for cpu) while watching every GPU's memory; reports time, GB/s, peak memory and whether "
                 "any other GPU moved.",
                 "ckptscope testload"};
    std::string file;
    std::string deviceText = "cpu";
    std::string select;
    bool json = false;
    bool fileOnly = false;
    bool compare = false;
    bool verify = false;
    int intervalMs = 20;
    std::string engineText = "auto";
    int ddpRanks = 0;
    std::string mapLocation;
    app.add_option("FILE", file,
                   inputKindsHelp() +
                       "; a set is test-loaded as the one checkpoint convert writes from it, each storage read in "
                       "place from the files that hold it; a remote file or set is downloaded whole into $TMPDIR first "
                       "(the engines map local files; a set member by member) and removed when the run ends")
        ->required();
    app.add_option("--engine", engineText,
                   "cuda (the driver alone; the default for cuda:N), torch (LibTorch, from the ckptscope-torch "
                   "package; the default for cpu) or auto")
        ->type_name("ENGINE")
        ->check(CLI::IsMember({"auto", "cuda", "torch"}));
    app.add_option("--ddp-ranks", ddpRanks,
                   "replay N DDP ranks each calling torch.load without map_location (rank r on cuda:(r mod GPUs)) "
                   "and report every GPU's peak")
        ->type_name("N")
        ->check(CLI::Range(1, 64));
    app.add_option("--map-location", mapLocation,
                   "with --ddp-ranks: the map_location each rank passes (cpu, cuda:1, "
                   "pairs cuda:0=cuda:1)")
        ->type_name("SPEC");
    app.add_option("--device", deviceText, "cpu or cuda:N (default cpu)")->type_name("DEVICE");
    app.add_option("--select", select, "only the tensors at or under this key path")->type_name("PATH");
    app.add_flag("--json", json, jsonFlagHelp());
    app.add_flag("--file-only", fileOnly,
                 "a shard, index or rank file: read this file alone, not the multi-file checkpoint it belongs to");
    app.add_option("--interval-ms", intervalMs, "memory sampling interval in milliseconds (default 20)")
        ->type_name("MS")
        ->check(CLI::Range(1, 60000));
    app.add_flag("--compare-torch-load", compare,
                 "also show where plain torch.load (no map_location) would put each storage");
    app.add_flag("--verify", verify,
                 "read every storage back after loading and compare its sha256 with the file's; hash each "
                 "tensor's C-order bytes too, unless it is an expanded view bigger than its storage");
    app.footer("Examples:\n"
               "  ckptscope testload model.pt --device cuda:1\n"
               "  ckptscope testload model.pt --device cuda:0 --select model --json | jq .other_devices_touched\n"
               "  ckptscope testload ddp.pt --ddp-ranks 4                # GPU 0 piles up\n"
               "  ckptscope testload ddp.pt --ddp-ranks 4 --map-location cpu\n"
               "Environment: CKPTSCOPE_CUDA_ENGINE and CKPTSCOPE_TORCH_HELPER name the engines; "
               "CKPTSCOPE_HELPER_TIMEOUT the seconds it may\n"
               "stay silent before it is killed (default 30); CKPTSCOPE_NVML_LIBRARY the NVML library.\n"
               "Exit codes: 0 loaded, 1 failed to load, 2 bad input.");
    RemoteSession remote;
    remote.addOptions(app, false);
    if (const auto done = parseCommand(app, args, "testload", out, err)) {
        return *done;
    }
    if (!mapLocation.empty() && ddpRanks == 0) {
        err << "ckptscope testload: --map-location goes with --ddp-ranks (see ckptscope testload --help)\n";
        return kExitBadInput;
    }
    const auto device = device::parseDevice(deviceText);
    if (!device) {
        err << "ckptscope testload: unknown device '" << displayText(deviceText) << "': use cpu or cuda:N\n";
        return kExitBadInput;
    }

    std::string input = file;
    // A remote file or set (s3://, http(s)://, hf://): the engines map local files, so it is
    // downloaded whole into a temporary folder in $TMPDIR, removed when the run ends (or is stopped
    // by a signal), and read from there.
    std::optional<ForEngines> downloaded;
    if (RemoteSession::isRemote(file)) {
        remote.showProgress(err, json);
        auto got = downloadForEngines(remote, file, fileOnly);
        remote.report(err);
        if (!got) {
            printError(err, got.error());
            return exitCodeFor(got.error().code);
        }
        downloaded.emplace(std::move(*got));
        input = downloaded->got.path;
    }
    const auto loc = fileOnly || (downloaded && !downloaded->got.set) ? std::nullopt : sharded::wholeSetInput(input);
    const bool set = loc.has_value();
    if (set && !json) {
        noteSetOfFile(file, loc, out);
    }

    // Read the file (or the set, as the engine will: sharded::openInput) here first: an unreadable
    // one is bad input (exit 2) without starting an engine.
    auto ck = sharded::openInput(input, set);
    if (!ck) {
        printError(err, ck.error());
        if (json) {
            out << dumpJson(errorJson(ck.error()), 2) << '\n';
        }
        return exitCodeFor(ck.error().code);
    }
    if (!set && (*ck)->folder) {
        input = (*ck)->path;  // a folder's model (model_folder.h): the engines open it by its path
    }
    if (!select.empty() && !(*ck)->find(select).valid()) {
        Error e = makeError(ErrorCode::Usage, "no key path '" + select + "' in this file");
        e.path = file;
        printError(err, e);
        return kExitBadInput;
    }

    std::shared_ptr<const device::Nvml> nvml;
    if (auto loaded = device::Nvml::load()) {
        nvml = *loaded;
    }
    const auto inventory = device::queryInventory(nvml);
    std::optional<device::TorchLoadPlacement> placement;
    if (compare) {
        // What torch.cuda.device_count() says here: CUDA's count under CUDA_VISIBLE_DEVICES, not NVML's.
        placement = device::torchLoadPlacement((*ck)->bytesByLocation(), inventory.cudaCount());
    }

    if (ddpRanks > 0) {
        if (set && !json) {
            printSetNote(out, loc->kind, **ck);
        }
        return runReplay(input, set, ddpRanks, mapLocation, select, intervalMs, json, nvml, out, err);
    }

    device::TestloadRequest req;
    req.engine = engineText == "cuda"    ? device::Engine::Cuda
                 : engineText == "torch" ? device::Engine::Torch
                                         : device::Engine::Auto;
    req.path = input;
    req.set = set;
    req.device = *device;
    req.select = select;
    req.verify = verify;
    if (verify) {
        req.fileStorageSha256 = fileStorageHasher(*ck);
    }
    req.interval = std::chrono::milliseconds(intervalMs);
    ProgressLine progress(err, json, "loading onto " + *device);
    auto report = device::testLoad(
        req,
        [&](const device::TestloadProgress& p) {
            if (p.totalBytes > 0) {
                progress.update(p.bytes, p.totalBytes, std::to_string(p.tensors) + " tensors");
            }
        },
        {}, nvml);
    progress.finish();

    if (!report) {
        Error e = report.error();
        e.path = file;
        printError(err, e);
        if (json) {
            ojson j = errorJson(e);
            j["device"] = *device;
            j["gpus"] = inventoryJson(inventory);
            if (placement) {
                j["torch_load"] = placementJson(*placement);
            }
            out << dumpJson(j, 2) << '\n';
        } else if (placement) {
            printPlacement(out, *placement);
        }
        return failureExit(e.code);
    }

    if (json) {
        ojson j;
        j["schema"] = kJsonSchema;
        j["file"] = file;
        const ojson body = reportJson(*report, verify);  // named: items() of a temporary would dangle
        for (const auto& [k, v] : body.items()) {
            j[k] = v;
        }
        j["gpus"] = inventoryJson(inventory);
        if (!inventory.gpuNote.empty()) {
            j["gpu_note"] = inventory.gpuNote;
        }
        if (!inventory.unreachableNote.empty()) {
            j["gpus_left_out"] = inventory.unreachableNote;
        }
        if (!inventory.cudaNote.empty()) {
            j["cuda_note"] = inventory.cudaNote;
        }
        if (placement) {
            j["torch_load"] = placementJson(*placement);
        }
        if (set) {
            j["set"] = setJson(loc->kind, **ck);
        }
        out << dumpJson(j, 2) << '\n';
    } else {
        if (set) {
            printSetNote(out, loc->kind, **ck);
        }
        if (!inventory.gpuNote.empty()) {
            out << "GPUs: " << inventory.gpuNote << '\n';
        }
        if (!inventory.unreachableNote.empty()) {
            out << "GPUs: " << inventory.unreachableNote << '\n';
        }
        printReport(out, file, *report);
        if (verify) {
            printChecks(out, *report);
        }
        if (placement) {
            printPlacement(out, *placement);
        }
    }
    return kExitOk;
}

}  // namespace ckpt::cli
