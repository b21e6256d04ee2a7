// What the pickle itself asks the loader to do: globals outside torch's weights-only allowlist,
// globals that run code, and whole pickled nn.Modules (docs/format.md §5, §9).
#include "checkpoint/dtensor.h"
#include "checkpoint/file_formats.h"
#include "diagnose/rules.h"
#include "diagnose/safety.h"

#include <algorithm>
#include <cctype>

namespace ckpt::diagnose {
namespace {

constexpr std::size_t kMaxPathsShown = 3;

std::string pathsText(const std::vector<std::string>& paths)
{
    if (paths.empty()) {
        return "(not reachable from the root)";
    }
    std::string out;
    for (std::size_t i = 0; i < paths.size() && i < kMaxPathsShown; ++i) {
        out += (i ? ", " : "") + quotedPath(paths[i]);
    }
    if (paths.size() > kMaxPathsShown) {
        out += " and " + std::to_string(paths.size() - kMaxPathsShown) + " more";
    }
    return out;
}

std::string lastComponent(const std::string& qualified)
{
    const auto dot = qualified.rfind('.');
    return dot == std::string::npos ? qualified : qualified.substr(dot + 1);
}

std::string moduleOf(const std::string& qualified)
{
    const auto dot = qualified.rfind('.');
    return dot == std::string::npos ? std::string() : qualified.substr(0, dot);
}

// How to replace a non-allowlisted value with something weights_only accepts.
std::string remedyFor(const std::string& q, const Checkpoint& ckpt)
{
    if (q == "argparse.Namespace") {
        return "a dict of its attributes";
    }
    if (q.starts_with("numpy.")) {
        return "Python numbers or tensors";
    }
    for (const auto& o : ckpt.objects) {
        if (o.type == q && o.isModule) {
            return "its state dict";
        }
    }
    if (q.starts_with("torch.storage._load_from_bytes")) {
        return "tensors (it is a storage pickled by plain pickle)";
    }
    return "plain values, or dropped";
}

// Legacy whole-model saves carry ('module', class, file, source) persistent ids, which the
// weights-only loader refuses ("Only persistent_load of storage is allowed, but got module").
std::vector<std::string> legacyModulePids(const Checkpoint& ckpt)
{
    std::vector<std::string> out;
    const auto& a = ckpt.arena;
    for (std::uint32_t i = 0; i < a.size(); ++i) {
        const auto& v = a[pickle::ValueId{i}];
        if (v.kind != pickle::Kind::PersistentId || v.items.empty()) {
            continue;
        }
        const auto& pid = a[v.items[0]];
        if (pid.kind != pickle::Kind::Tuple || pid.items.size() < 2) {
            continue;
        }
        const auto& tag = a[pid.items[0]];
        if ((tag.kind == pickle::Kind::Str || tag.kind == pickle::Kind::Bytes) && tag.text == "module") {
            const auto& cls = a[pid.items[1]];
            out.push_back(cls.kind == pickle::Kind::Global ? pickle::globalOf(a, pid.items[1]).qualified()
                                                           : std::string("?"));
        }
    }
    return out;
}

// Every GLOBAL inside a key (a class used as a dict key, as Lightning 1.x keys `callbacks` by the
// callback class), shallowly through tuples: the key tree shows keys as text, so the index's
// global uses miss them, but the loader meets them like any other value.
void globalsInKey(const pickle::Arena& a, pickle::ValueId key, std::vector<std::string>& out, int depth = 0)
{
    if (!key.valid() || depth > 8) {
        return;
    }
    const auto& k = a[key];
    if (k.kind == pickle::Kind::Global) {
        out.push_back(pickle::globalOf(a, key).qualified());
    } else if (k.kind == pickle::Kind::Object) {
        out.push_back(pickle::objectOf(a, key).callable.qualified());
    } else if (k.kind == pickle::Kind::Tuple) {
        for (auto item : k.items) {
            globalsInKey(a, item, out, depth + 1);
        }
    }
}

std::vector<GlobalUse> keyGlobals(const Checkpoint& ckpt)
{
    const auto& a = ckpt.arena;
    std::vector<GlobalUse> uses;
    auto add = [&](const std::string& q, const std::string& path) {
        auto it = std::find_if(uses.begin(), uses.end(), [&](const GlobalUse& u) { return u.qualified == q; });
        if (it == uses.end()) {
            uses.push_back({q, {}});
            it = uses.end() - 1;
        }
        it->paths.push_back(path);
    };
    std::vector<std::string> found;
    for (std::uint32_t i = 0; i < ckpt.nodes.size(); ++i) {
        const Node& n = ckpt.nodes[NodeIndex{i}];
        if (!n.value.valid() || n.childCount == 0) {
            continue;
        }
        std::vector<pickle::ValueId> items;
        const auto& v = a[n.value];
        if (v.kind == pickle::Kind::Dict) {
            items = v.items;
        } else if (v.kind == pickle::Kind::Object) {
            const auto& o = pickle::objectOf(a, n.value);
            if (o.state.valid() && a[o.state].kind == pickle::Kind::Dict) {
                items = a[o.state].items;
            }
            items.insert(items.end(), o.dictItems.begin(), o.dictItems.end());
        }
        for (std::size_t k = 0; k + 1 < items.size(); k += 2) {
            found.clear();
            globalsInKey(a, items[k], found);
            for (const auto& q : found) {
                add(q, joinPath(ckpt.pathOf(NodeIndex{i}), pickle::keyText(a, items[k])));
            }
        }
    }
    return uses;
}

// A class that appears only as a dict key (the index never meets keys): convert keys the dict by
// its qualified name instead.
bool usedOnlyAsKey(const Checkpoint& ckpt, const GlobalUse& g)
{
    return std::none_of(ckpt.globals.begin(), ckpt.globals.end(),
                        [&](const GlobalUse& u) { return u.qualified == g.qualified; });
}

// The index's global uses plus those in keys.
std::vector<GlobalUse> allGlobals(const Checkpoint& ckpt)
{
    std::vector<GlobalUse> all = ckpt.globals;
    for (auto& k : keyGlobals(ckpt)) {
        auto it = std::find_if(all.begin(), all.end(), [&](const GlobalUse& u) { return u.qualified == k.qualified; });
        if (it == all.end()) {
            all.push_back(std::move(k));
        } else {
            it->paths.insert(it->paths.end(), k.paths.begin(), k.paths.end());
        }
    }
    return all;
}

void notWeightsOnly(const Checkpoint& ckpt, const std::vector<GlobalUse>& globals, Findings& out)
{
    if (ckpt.torchScript) {
        return;  // torch.load refuses the whole archive first; torchscript-archive says so and how to fix it
    }
    std::vector<const GlobalUse*> refused;
    for (const auto& g : globals) {
        if (!isWeightsOnlyAllowed(g.qualified)) {
            refused.push_back(&g);
        }
    }
    const auto ops = refusedOpcodes(ckpt.opcodesSeen);
    const auto modulePids = legacyModulePids(ckpt);
    const bool tarFile = ckpt.format == Format::TorchTar;
    if (refused.empty() && ops.empty() && modulePids.empty() && !tarFile) {
        return;
    }
    Finding f;
    f.code = "not-weights-only";
    f.severity = Severity::Warning;
    f.title = "torch.load(weights_only=True), the default since PyTorch 2.6, refuses this file";
    std::string first;
    if (!ops.empty()) {
        f.detail += "The pickle uses opcodes the weights-only unpickler does not implement: ";
        for (std::size_t i = 0; i < ops.size(); ++i) {
            f.detail += (i ? ", " : "") + std::string(ops[i].name) + " (" + std::to_string(ops[i].code) + ")";
        }
        f.detail += " (it was written with pickle protocol " + std::to_string(ckpt.pickleProtocol) +
                    "; torch only ever reads protocol 2's opcodes there, up to at least 2.10).";
        // FRAME comes right after PROTO in protocol 4/5 pickles, so it is what torch trips on first.
        const auto frame = std::find_if(ops.begin(), ops.end(), [](const RefusedOpcode& o) { return o.code == 0x95; });
        first = "WeightsUnpickler error: Unsupported operand " +
                std::to_string((frame != ops.end() ? *frame : ops[0]).code);
    }
    if (!refused.empty()) {
        f.detail += std::string(f.detail.empty() ? "" : " ") + "It names " +
                    plural(refused.size(), "global", "globals") + " outside the default allowlist: ";
        for (std::size_t i = 0; i < refused.size(); ++i) {
            const auto& g = *refused[i];
            f.detail +=
                (i ? "; " : "") + g.qualified + " at " + pathsText(g.paths) + " (make it " +
                (usedOnlyAsKey(ckpt, g) ? std::string("a dict key: keyed by its name") : remedyFor(g.qualified, ckpt)) +
                ")";
            f.paths.insert(f.paths.end(), g.paths.begin(), g.paths.end());
        }
        f.detail += ".";
        if (first.empty()) {
            const auto& q = refused.front()->qualified;
            first = "WeightsUnpickler error: Unsupported global: GLOBAL " + q +
                    " was not an allowed global by default. Please use `torch.serialization.add_safe_globals([" +
                    lastComponent(q) + "])` or the `torch.serialization.safe_globals([" + lastComponent(q) +
                    "])` context manager to allowlist this global if you trust this class/function.";
        }
    }
    if (tarFile) {
        f.detail += std::string(f.detail.empty() ? "" : " ") +
                    "It is a tar-format file (PyTorch < 0.1.10), which torch.load reads only with "
                    "weights_only=False.";
        if (first.empty()) {
            first = "Cannot use ``weights_only=True`` with files saved in the legacy .tar format.";
        }
    }
    if (!modulePids.empty()) {
        f.detail += std::string(f.detail.empty() ? "" : " ") +
                    "Its legacy format embeds module classes as persistent ids (" + modulePids.front() +
                    (modulePids.size() > 1 ? " and " + std::to_string(modulePids.size() - 1) + " more" : "") +
                    "), which the weights-only loader refuses.";
        if (first.empty()) {
            first = "WeightsUnpickler error: Only persistent_load of storage is allowed, but got module";
        }
    }
    f.detail += " PyTorch 2.6+ stops with \"Weights only load failed. ... " + first +
                "\"; loading with weights_only=False instead runs whatever the pickle names. Fix: convert those "
                "values to plain ones or drop them and rewrite the file at pickle protocol 2.";
    std::sort(f.paths.begin(), f.paths.end());
    f.paths.erase(std::unique(f.paths.begin(), f.paths.end()), f.paths.end());
    transform::Options fix;
    fix.weightsOnly = true;
    f.fix = fix;
    out.push_back(std::move(f));
}

std::string callText(const Checkpoint& ckpt, const std::string& qualified)
{
    for (const auto& o : ckpt.objects) {
        if (o.type != qualified || !ckpt.nodes.contains(o.node)) {
            continue;
        }
        const auto id = ckpt.nodes[o.node].value;
        if (!id.valid() || id.v >= ckpt.arena.size() || ckpt.arena[id].kind != pickle::Kind::Object) {
            continue;
        }
        const auto& info = pickle::objectOf(ckpt.arena, id);
        if (info.args.valid()) {
            auto args = pickle::shortRepr(ckpt.arena, info.args, 160);
            if (args.size() >= 2 && args.front() == '(' && args.ends_with(",)")) {
                args.erase(args.size() - 2, 1);  // a one-element tuple reads better as a call
            }
            return qualified + args;
        }
    }
    return {};
}

// `builtins.getattr(C, 'name')` on a global C is the global `C.name`, which the pickle could have
// named itself: an enum member pickled by name reads so (DeepSpeed's ZeroStageEnum in every ZeRO
// rank file, torch.memory_format values). Such a call reaches code only when C.name does. True
// when every call of getattr the pickle makes (reachable or not: the unpickler would make them all)
// is one on a harmless global and a public name, and getattr is never handed on as a value (to
// map(), a constructor, ...), where it could be called on anything.
bool onlyHarmlessAttributes(const Checkpoint& ckpt, const GlobalUse& g)
{
    using pickle::Kind;
    if (g.qualified != "builtins.getattr") {
        return false;
    }
    const auto& a = ckpt.arena;
    auto isGetattr = [&](pickle::ValueId id) {
        return id.valid() && id.v < a.size() && a[id].kind == Kind::Global &&
               pickle::globalOf(a, id).qualified() == g.qualified;
    };
    for (const auto& o : a.objects) {
        if (o.callable.qualified() != g.qualified) {
            continue;
        }
        if (!o.args.valid() || a[o.args].kind != Kind::Tuple || a[o.args].items.size() != 2 || o.kwargs.valid()) {
            return false;
        }
        const auto of = a[o.args].items[0];
        const auto name = a[o.args].items[1];
        if (a[of].kind != Kind::Global || a[name].kind != Kind::Str) {
            return false;
        }
        const std::string_view attr = a[name].text.view();
        const bool identifier =
            !attr.empty() && attr.front() != '_' && std::all_of(attr.begin(), attr.end(), [](char c) {
                return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
            });
        const auto target = pickle::globalOf(a, of).qualified();
        if (!identifier || unsafeReason(target) || unsafeReason(target + "." + std::string(attr))) {
            return false;
        }
    }
    // Handed on: any value referring to getattr itself (a GLOBAL consumed by REDUCE is referred to
    // by no value).
    if (isGetattr(ckpt.root)) {
        return false;
    }
    auto any = [&](const auto& ids) { return std::any_of(ids.begin(), ids.end(), isGetattr); };
    for (std::uint32_t i = 0; i < a.size(); ++i) {
        const pickle::Value& v = a[pickle::ValueId{i}];
        if (isGetattr(v.attrs) || any(v.items)) {
            return false;
        }
        if (v.kind == Kind::Object) {
            const auto& o = pickle::objectOf(a, pickle::ValueId{i});
            if (isGetattr(o.args) || isGetattr(o.kwargs) || isGetattr(o.state) || any(o.listItems) ||
                any(o.dictItems)) {
                return false;
            }
        } else if (v.kind == Kind::Tensor) {
            const auto& t = pickle::tensorOf(a, pickle::ValueId{i});
            for (const auto id : {t.rawArgs, t.metadata, t.backwardHooks, t.parameterHooks, t.parameterState,
                                  t.subclassType, t.subclassState}) {
                if (isGetattr(id)) {
                    return false;
                }
            }
        }
    }
    return true;
}

void unsafeCallables(const Checkpoint& ckpt, const std::vector<GlobalUse>& globals, Findings& out)
{
    for (const auto& g : globals) {
        const auto reason = unsafeReason(g.qualified);
        if (!reason || onlyHarmlessAttributes(ckpt, g)) {
            continue;
        }
        Finding f;
        f.code = "unsafe-callable";
        f.severity = Severity::Error;
        f.title = "The pickle calls " + g.qualified + ", which " + std::string(*reason);
        const auto call = callText(ckpt, g.qualified);
        f.detail = "The pickle names `" + g.qualified + "`" +
                   (call.empty() ? std::string() : ", as the call `" + call + "`,") + " at " + pathsText(g.paths) +
                   "; it " + std::string(*reason) +
                   ". ckptscope read it without running it, but plain torch.load (weights_only=False, the default "
                   "before PyTorch 2.6 and what people fall back to when 2.6 refuses a file) or pickle.load would "
                   "run it while loading, with your user's rights. Do not load this file with Python unless you "
                   "trust its source.";
        f.paths = g.paths;
        const bool droppable = !g.paths.empty() && std::none_of(g.paths.begin(), g.paths.end(),
                                                                [](const std::string& p) { return p.empty(); });
        if (droppable) {
            f.detail += " Fix: drop the values that carry it and write the rest as a weights-only file.";
            transform::Options fix;
            fix.drop = g.paths;
            fix.weightsOnly = true;
            f.fix = fix;
        } else {
            f.detail += " It sits at the root of the file, so nothing remains to keep without it.";
        }
        out.push_back(std::move(f));
    }
}

bool hasModuleAncestor(const Checkpoint& ckpt, NodeIndex node)
{
    for (auto p = ckpt.nodes[node].parent; p.valid(); p = ckpt.nodes[p].parent) {
        if (ckpt.nodes[p].kind == NodeKind::Module) {
            return true;
        }
    }
    return false;
}

// A pickled DataParallel/DDP model has no state-dict keys yet, but the state dict it yields does.
Finding wrappedModelPrefix(const ObjectEntry& o, const transform::Options& fix)
{
    Finding f;
    f.code = "module-prefix";
    f.severity = Severity::Warning;
    f.title = "The pickled model is wrapped in " + lastComponent(o.type) + ": its state dict keys carry `module.`";
    f.detail = (o.path.empty() ? std::string("The root") : quotedPath(o.path)) + " is a " + lastComponent(o.type) +
               " holding the real model under `_modules/module`, so model.state_dict() names every key "
               "`module.<name>`, and load_state_dict into the bare model reports every one as an unexpected key. "
               "Fix: extract the state dict and strip `module.`; keep the prefix only to load into a wrapped model.";
    f.paths = {o.path};
    f.fix = fix;
    return f;
}

void wholeModel(const Checkpoint& ckpt, Findings& out)
{
    for (const auto& o : ckpt.objects) {
        if (!o.isModule || !ckpt.nodes.contains(o.node) || hasModuleAncestor(ckpt, o.node)) {
            continue;
        }
        const auto& n = ckpt.nodes[o.node];
        const bool wrapped = o.type.ends_with("DataParallel");
        Finding f;
        f.code = "whole-model";
        f.severity = Severity::Warning;
        f.title = "A whole pickled model (" + o.type + ") at " + quotedPath(o.path) + ", not a state dict";
        const auto cls = lastComponent(o.type);
        const auto mod = moduleOf(o.type);
        auto where = quotedPath(o.path);
        where[0] = where[0] == 't' ? 'T' : where[0];  // "the root" starts the sentence
        f.detail = where + " is a pickled nn.Module of class `" + o.type + "` holding " +
                   plural(n.tensorCount, "tensor", "tensors") + " (" + humanBytes(n.bytes) +
                   "), saved with torch.save(model). Loading it imports that class: without `" + mod +
                   "` on the path exactly as it was, torch.load fails with \"AttributeError: Can't get attribute '" +
                   cls + "' on <module '" + mod + "'>\" or \"ModuleNotFoundError: No module named '" + mod +
                   "'\", a changed class loads silently wrong, and under weights_only=True (the 2.6+ default) it "
                   "is refused (\"Unsupported global: GLOBAL " +
                   o.type + " was not an allowed global by default\").";
        transform::Options fix;
        fix.unwrapModules = true;
        if (wrapped) {
            f.detail += " The model inside is wrapped in " + cls +
                        " (under `_modules/module`), so its state dict keys start with `module.`: the fix strips it.";
            fix.stripPrefixes = {"module."};
        }
        f.detail += " Fix: extract its state dict (model.state_dict()), which loads into the model built in code.";
        f.paths = {o.path};
        f.fix = fix;
        out.push_back(std::move(f));
        if (wrapped) {
            out.push_back(wrappedModelPrefix(o, fix));
        }
    }
}

// torch.load decodes every pickled str as UTF-8 (its encoding='utf-8' default) and raises
// UnicodeDecodeError on the first that is not; a Python 2 str loads with encoding='latin1'.
void undecodableText(const Checkpoint& ckpt, Findings& out)
{
    const auto& u = ckpt.undecodable;
    if (u.count == 0) {
        return;
    }
    Finding f;
    f.code = "undecodable-text";
    f.severity = Severity::Error;
    f.title = std::to_string(u.count) + (u.count == 1 ? " string is" : " strings are") +
              " not valid UTF-8: torch.load raises UnicodeDecodeError";
    f.detail = "The first is at " + (u.firstAt.empty() ? std::string("an unknown place") : u.firstAt) +
               "; ckptscope shows the bytes it cannot decode as \\xNN. ";
    if (u.python2 == u.count) {
        f.detail += "They are Python 2 strs: torch.load(f, encoding='latin1') reads the file, and convert writes "
                    "them as their Latin-1 reading, which loads with the default encoding.";
    } else {
        f.detail += "Not Python 2 strs (which encoding='latin1' would read): the file is damaged, or was written "
                    "by something other than torch.save.";
    }
    f.paths = u.paths;
    if (f.paths.empty()) {
        f.paths.emplace_back();  // the file as a whole
    }
    out.push_back(std::move(f));
}

}  // namespace

// One rank's DTensors read as an ordinary file (a rank file renamed, opened alone, or with
// --file-only): the folder reader raises the same finding for a set.
void dtensors(const Checkpoint& ckpt, Findings& out)
{
    std::vector<std::string> paths;
    for (const auto& e : ckpt.tensors) {
        if (dtensor::partsOf(ckpt.arena, pickle::tensorOf(ckpt.arena, e.value))) {
            paths.push_back(e.path);
        }
    }
    if (paths.empty()) {
        return;
    }
    Finding f;
    f.code = dtensor::kRankFilesCode;
    f.severity = Severity::Warning;
    f.title = dtensor::kRankFilesTitle;
    f.detail = std::string(dtensor::kRankFilesDetail) + " This file alone holds one rank's piece of each of its " +
               plural(paths.size(), "DTensor", "DTensors") +
               " (inspect shows each piece's shape and bytes beside the global shape); a single-card export "
               "writes those pieces as plain tensors.";
    f.paths = std::move(paths);
    out.push_back(std::move(f));
}

void pickleRules(const Checkpoint& ckpt, Findings& out)
{
    if (!fileFormat(ckpt.format).pickled) {
        return;
    }
    undecodableText(ckpt, out);
    const auto globals = allGlobals(ckpt);
    unsafeCallables(ckpt, globals, out);
    notWeightsOnly(ckpt, globals, out);
    wholeModel(ckpt, out);
    dtensors(ckpt, out);
}

std::vector<Finding> unsafeCode(const Checkpoint& ckpt)
{
    Findings out;
    if (fileFormat(ckpt.format).pickled) {
        unsafeCallables(ckpt, allGlobals(ckpt), out);
    }
    return out;
}

}  // namespace ckpt::diagnose
