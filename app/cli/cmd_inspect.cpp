#include "cli/cmd_inspect.h"

#include "checkpoint/block_quant.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/dtensor.h"
#include "checkpoint/file_formats.h"
#include "checkpoint/layout.h"
#include "checkpoint/model_folder.h"
#include "checkpoint/script_state_dict.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/json_out.h"
#include "cli/parse.h"
#include "cli/remote_cli.h"
#include "cli/sharded_cli.h"
#include "sharded/listing.h"
#include "util/json_text.h"
#include "util/printable.h"
#include "util/shape_text.h"

#include <algorithm>
#include <ostream>
#include <sstream>

namespace ckpt::cli {
namespace {

// What the KIND column says: the node kind, or an object's qualified type.
std::string kindText(const Checkpoint& c, const Node& n)
{
    switch (n.kind) {
    case NodeKind::Tensor:
        return c.tensors[n.tensor].isParameter ? "Parameter" : "tensor";
    case NodeKind::Module:
    case NodeKind::Object:
        return c.objects[n.object].type;
    case NodeKind::Scalar:
        return std::string(pickle::kindName(c.arena[n.value].kind));
    default:
        return std::string(nodeKindName(n.kind)) + (n.stateDictLike ? " (state dict)" : "");
    }
}

// Lists of plain numbers (an optimizer's `params`, a `milestones` list) read better as one line.
bool allScalarSequence(const Checkpoint& c, const Node& n)
{
    if (n.kind != NodeKind::List && n.kind != NodeKind::Tuple) {
        return false;
    }
    for (std::uint32_t row = 0; row < n.childCount; ++row) {
        const NodeIndex k = n.child(row);
        if (c.nodes[k].kind != NodeKind::Scalar) {
            return false;
        }
    }
    return true;
}

// Whether every tensor under `node` is a meta tensor (nothing in the file holds their values).
bool hasNoData(const Checkpoint& c, NodeIndex node)
{
    const auto& n = c.nodes[node];
    if (n.kind == NodeKind::Tensor) {
        return !c.tensors[n.tensor].hasData();
    }
    for (std::uint32_t row = 0; row < n.childCount; ++row) {
        const auto& k = c.nodes[n.child(row)];
        if (k.tensorCount > 0 && !hasNoData(c, n.child(row))) {
            return false;
        }
    }
    return n.tensorCount > 0;
}

struct Row {
    std::string key;
    std::string kind;
    std::string dtype;
    std::string shape;
    std::string device;
    std::string size;
};

// Calls `visit` with each row in reading order. The table is walked twice (column widths, then
// the rows) rather than kept: 40 000 keys made 50 000 rows of six strings, a sixth of the peak.
template <class Visit> void forEachRow(const Checkpoint& c, NodeIndex node, int depth, int maxDepth, Visit&& visit)
{
    // Depth-first for reading; the node table itself is breadth-first.
    struct Item {
        NodeIndex node;
        int depth;
    };
    std::vector<Item> stack{{node, depth}};
    while (!stack.empty()) {
        const Item it = stack.back();
        stack.pop_back();
        const Node& n = c.nodes[it.node];
        if (it.node != kRootNode) {
            Row r;
            r.key = std::string(static_cast<std::size_t>(2 * (it.depth - 1)), ' ') + displayText(n.name);
            r.kind = displayText(kindText(c, n));
            if (n.kind == NodeKind::Tensor) {
                const auto& t = c.tensors[n.tensor];
                r.dtype = dtypeName(t.dtype);
                r.shape = tensorShapeText(c, t);
                r.device = displayText(t.location);
                r.size = t.hasData() ? humanBytes(t.nbytes) : std::string("no data");
                // A DTensor holds one rank's piece: its shape and bytes, the global shape beside them.
                if (const auto piece = dtensor::localPiece(c.arena, pickle::tensorOf(c.arena, t.value))) {
                    r.shape = shapeText(piece->shape) + " of " + shapeText(t.shape) + " " + piece->placements;
                    r.size = humanBytes(piece->bytes);
                }
            } else if (const auto value = leafValueText(c, it.node)) {
                r.shape = displayText(*value);
            } else if (allScalarSequence(c, n)) {
                r.shape = displayText(pickle::shortRepr(c.arena, n.value, 60));
            } else if (n.tensorCount > 0) {
                r.size = n.bytes == 0 && hasNoData(c, it.node) ? std::string("no data") : humanBytes(n.bytes);
                r.shape = std::to_string(n.tensorCount) + (n.tensorCount == 1 ? " tensor" : " tensors");
            } else {
                r.shape = std::to_string(n.childCount) + (n.childCount == 1 ? " entry" : " entries");
            }
            visit(r);
        }
        if ((maxDepth >= 0 && it.depth >= maxDepth) || (it.node != kRootNode && allScalarSequence(c, n))) {
            continue;
        }
        for (std::uint32_t k = n.childCount; k-- > 0;) {
            stack.push_back({n.child(k), it.depth + 1});
        }
    }
}

// What the table cannot show of some tensors, each kind under its own heading: names restored as
// ties (config.json), FP8 weights with their block scales, quantized tensors' scales and zero
// points, tensors without data.
void printTensorFacts(const Checkpoint& c, std::ostream& out)
{
    if (!c.ties.restored.empty()) {
        out << "\nTied names restored (" << displayText(c.ties.architecture) << " ties them; "
            << displayText(c.ties.decidedBy) << "), not stored in the file:\n";
        for (const auto& t : c.ties.restored) {
            out << "  " << displayText(t.name) << " -> " << displayText(t.source) << '\n';
        }
    }
    const BlockQuantization q = blockQuantization(c);
    if (!q.weights.empty()) {
        out << "\nFP8 block-quantized weights (" << q.weights.size();
        if (q.config) {
            out << "; config.json quantization_config: " << displayText(q.config->method)
                << (q.config->format.empty() ? "" : ", " + displayText(q.config->format));
        }
        out << "):\n";
        for (const auto& b : q.weights) {
            const auto& w = c.tensors[b.weight];
            out << "  " << displayText(w.path) << "  " << dtypeName(w.dtype) << " "
                << shapeText(std::vector<std::int64_t>(w.shape.begin(), w.shape.end())) << "  "
                << displayText(blockScaleText(c, b)) << '\n';
        }
    }
    for (const auto t : q.unscaled) {
        out << "FP8 weight without a scale: " << displayText(c.tensors[t].path) << '\n';
    }
    bool heading = false;
    for (const auto& t : c.tensors) {
        if (const auto qz = quantizerOf(c, t)) {
            if (!heading) {
                out << "\nQuantized tensors (values = (q - zero point) x scale):\n";
                heading = true;
            }
            out << "  " << displayText(t.path) << "  " << dtypeName(t.dtype) << "  " << displayText(qz->summary())
                << '\n';
        }
    }
    const auto meta = static_cast<std::size_t>(
        std::count_if(c.tensors.begin(), c.tensors.end(), [](const TensorEntry& t) { return !t.hasData(); }));
    if (meta > 0) {
        out << '\n'
            << meta << (meta == 1 ? " tensor holds" : " tensors hold")
            << " no data: saved from the meta device (shape and dtype only; `ckptscope check` says more)\n";
    }
}

// A TorchScript archive's tree is its data.pkl objects; below it, the keys torch.jit.load(f)
// .state_dict() gives, which is what `convert` writes.
void printScriptStateDict(const Checkpoint& c, std::ostream& out)
{
    const auto sd = scriptStateDict(c);
    if (!sd) {
        out << "\nTorchScript state dict: " << displayText(sd.error().message) << '\n';
        return;
    }
    out << "\nTorchScript state dict (torch.jit.load(f).state_dict()): " << sd->entries.size() << " tensors\n";
    std::size_t wKey = 3;
    for (const auto& e : sd->entries) {
        wKey = std::max(wKey, std::min<std::size_t>(displayText(e.key).size(), 64));
    }
    for (const auto& e : sd->entries) {
        const auto& t = c.tensors[e.tensor];
        const std::string key = displayText(e.key);
        out << "  " << key << std::string(key.size() < wKey ? wKey - key.size() : 0, ' ') << "  " << dtypeName(t.dtype)
            << "  " << tensorShapeText(c, t) << '\n';
    }
    for (const auto& s : sd->skipped) {
        out << "  left out: " << displayText(s.path) << " (" << displayText(s.type)
            << "): holds tensors torch.jit's state_dict() does not reach\n";
    }
}

void printText(const Checkpoint& c, int maxDepth, std::ostream& out)
{
    // What the file holds: a DTensor counts its local piece, with the global total beside it.
    std::uint64_t heldBytes = 0;
    std::uint64_t globalBytes = 0;
    for (const auto& t : c.tensors) {
        heldBytes += dtensor::heldBytes(c.arena, pickle::tensorOf(c.arena, t.value), t.dataBytes());
        globalBytes += t.dataBytes();
    }
    if (c.folder) {
        out << "opened " << displayText(c.folder->model())
            << (c.folder->adapter() ? ", the adapter (it needs its base model) of " : ", the model of ")
            << displayText(c.folder->layout) << " " << displayText(c.folder->dir)
            << "; its files: " << displayText(c.folder->memberList()) << "\n";
        if (c.folder->adapterConfig) {
            out << "the adapter's " << displayText(adapterSummary(*c.folder->adapterConfig)) << "\n";
        }
        out << "\n";
    }
    out << displayText(c.path) << ": " << formatName(c.format) << ", " << c.tensors.size() << " tensors ("
        << humanBytes(heldBytes)
        << (heldBytes == globalBytes ? std::string()
                                     : " held: this rank's DTensor pieces of " + humanBytes(globalBytes) + " global")
        << "), " << c.storages.size() << " storages, " << c.objects.size() << " objects";
    if (!c.exportLayout.empty()) {
        out << ", a torch.export archive (" << c.exportLayout << "): its state dict, [constants], [graph_signature]";
    } else if (fileFormat(c.format).pickled) {
        out << ", pickle protocol " << c.pickleProtocol;
    }
    out << "\n\n";

    std::size_t wKey = 3;
    std::size_t wKind = 4;
    std::size_t wDtype = 5;
    std::size_t wShape = 5;
    std::size_t wDev = 6;
    forEachRow(c, kRootNode, 0, maxDepth, [&](const Row& r) {
        wKey = std::max(wKey, std::min<std::size_t>(r.key.size(), 64));
        wKind = std::max(wKind, std::min<std::size_t>(r.kind.size(), 32));
        wDtype = std::max(wDtype, r.dtype.size());
        wShape = std::max(wShape, std::min<std::size_t>(r.shape.size(), 40));
        wDev = std::max(wDev, r.device.size());
    });
    auto cell = [&](const std::string& s, std::size_t w) {
        out << s;
        out << std::string(s.size() < w ? w - s.size() : 0, ' ') << "  ";
    };
    cell("KEY", wKey);
    cell("KIND", wKind);
    cell("DTYPE", wDtype);
    cell("SHAPE/VALUE", wShape);
    cell("DEVICE", wDev);
    out << "SIZE\n";
    forEachRow(c, kRootNode, 0, maxDepth, [&](const Row& r) {
        cell(r.key, wKey);
        cell(r.kind, wKind);
        cell(r.dtype, wDtype);
        cell(r.shape, wShape);
        cell(r.device, wDev);
        out << r.size << '\n';
    });
    if (c.torchScript) {
        printScriptStateDict(c, out);
    }
    printTensorFacts(c, out);
    out << "\nStorage bytes by location:";
    for (const auto& [loc, n] : c.bytesByLocation()) {
        out << "  " << displayText(loc) << " " << humanBytes(n);
    }
    out << '\n';
    for (const auto& w : c.warnings) {
        out << "warning: " << displayText(w) << '\n';
    }
}

}  // namespace

int cmdInspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)
{
    CLI::App app{"Show a checkpoint's key tree, tensors (dtype, shape, device, size), storages and objects, "
                 "read without running its pickle.",
                 "ckptscope inspect"};
    std::vector<std::string> inputs;
    bool json = false;
    bool fileOnly = false;
    int depth = -1;
    app.add_option("FILE", inputs, "one or more of: " + inputKindsHelp() + "; globs allowed")->required();
    app.add_flag("--json", json, jsonFlagHelp());
    app.add_option("--depth", depth, "show the text tree only down to this depth")->type_name("N");
    app.add_flag("--file-only", fileOnly,
                 "a shard, index or rank file: read this file alone, not the multi-file checkpoint it belongs to");
    RemoteSession remote;
    remote.addOptions(app);
    app.footer("Examples:\n"
               "  ckptscope inspect model.pt\n"
               "  ckptscope inspect hf://openai-community/gpt2/model.safetensors   (reads only the header)\n"
               "  ckptscope inspect --json model.pt | jq '.totals.by_location'\n"
               "  ckptscope inspect --depth 1 'runs/*.ckpt'\n"
               "Exit codes: 0 read, 2 a file could not be read.");
    if (const auto done = parseCommand(app, args, "inspect", out, err)) {
        return *done;
    }
    remote.showProgress(err, json);

    const auto files = expandInputs(inputs);
    const bool several = files.size() > 1;
    int rc = kExitOk;
    if (json && several) {
        out << "{\"schema\": " << kJsonSchema << ", \"files\": [\n";
    }
    bool first = true;
    for (const auto& file : files) {
        const bool isRemote = RemoteSession::isRemote(file);
        if (!several && !fileOnly && !isRemote) {
            if (const auto setRc = inspectSet(file, json, out, err)) {
                return *setRc;  // a folder, index or shard of a multi-file checkpoint (core/sharded)
            }
        }
        Expected<CheckpointPtr> ck = CheckpointPtr();
        if (isRemote) {
            auto in = remote.openInput(file);
            if (in && in->set && !several) {  // a sharded set over HTTP: listed as a local set is
                std::ostringstream listing;
                printSet(*in->set, file, json, listing);
                out << (json ? remote.withJson(listing.str()) : listing.str());
                if (!json) {
                    remote.report(err);
                }
                return kExitOk;
            }
            ck = in ? in->checkpoint : Expected<CheckpointPtr>(in.error());
        } else {
            ck = openCheckpoint(file);
        }
        if (!ck) {
            printError(err, ck.error());
            rc = kExitBadInput;
            if (!(json && several)) {
                continue;
            }
        }
        if (!first) {
            out << (json ? ",\n" : "\n");
        }
        first = false;
        if (!ck) {
            out << dumpJson(errorJson(ck.error()));
        } else if (json && isRemote) {
            std::ostringstream one;
            writeInspectJson(**ck, one);
            out << remote.withJson(one.str());
        } else if (json) {
            writeInspectJson(**ck, out);
        } else {
            printText(**ck, depth, out);
        }
    }
    if (json) {
        out << (several ? "\n]}\n" : (first ? "" : "\n"));
    } else {
        remote.report(err);
    }
    return rc;
}

}  // namespace ckpt::cli
