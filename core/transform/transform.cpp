// makePlan: the output value tree and the exact list of what changes, computed before anything is
// written. The passes run in the order a user reasons about them: choose the value (select, drop),
// turn whole models into state dicts (unwrap), make the rest loadable and safe (sanitize), rename
// keys (prefixes), then decide which storages are written, where they load and how many bytes.
#include "transform/plan_builder.h"
#include "util/json_text.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

namespace ckpt::transform {

using pickle::Arena;
using pickle::Kind;
using pickle::ValueId;

std::string_view stepKindName(StepKind k)
{
    switch (k) {
    case StepKind::Select:
        return "select";
    case StepKind::Rename:
        return "rename";
    case StepKind::Remap:
        return "remap";
    case StepKind::Drop:
        return "drop";
    case StepKind::Convert:
        return "convert";
    case StepKind::Unwrap:
        return "unwrap";
    case StepKind::Compact:
        return "compact";
    case StepKind::Note:
        return "note";
    }
    return "note";
}

namespace detail {

Error tooDeepToRewrite()
{
    return makeError(ErrorCode::Limit, "values nest deeper than " + std::to_string(kMaxRewriteDepth) +
                                           " levels; ckptscope does not rewrite them (no real checkpoint nests "
                                           "this deep)");
}

std::string joinPath(const std::string& parent, const std::string& name)
{
    return parent.empty() ? name : parent + "/" + name;
}

std::vector<ValueId> objectStateItems(const Arena& a, const pickle::ObjectInfo& o)
{
    std::vector<ValueId> items;
    if (!o.state.valid()) {
        return items;
    }
    const auto& st = a[o.state];
    if (st.kind == Kind::Dict) {
        return st.items;
    }
    if (st.kind == Kind::Tuple && st.items.size() == 2) {
        for (ValueId part : st.items) {
            if (a[part].kind == Kind::Dict) {
                items.insert(items.end(), a[part].items.begin(), a[part].items.end());
            }
        }
    }
    return items;
}

void refreshStridedArgs(Arena& a, ValueId tensor)
{
    auto& t = a.tensors[static_cast<std::size_t>(a[tensor].i)];
    if (t.form != pickle::TensorForm::Strided || !t.storage.valid()) {
        return;
    }
    auto ints = [&](const std::vector<std::int64_t>& v) {
        std::vector<ValueId> items;
        items.reserve(v.size());
        for (auto x : v) {
            items.push_back(a.integer(x));
        }
        return a.tuple(std::move(items));
    };
    const bool v3 = t.rebuild->name == "_rebuild_tensor_v3";
    const ValueId offset = a.integer(t.storageOffset);
    const ValueId shape = ints(t.shape);
    const ValueId stride = ints(t.stride);
    const ValueId grad = a.boolean(t.requiresGrad);
    ValueId hooks = t.backwardHooks;
    if (!hooks.valid()) {
        hooks = a.dict({}, true);
    }
    std::vector<ValueId> args{t.storage, offset, shape, stride, grad, hooks};
    if (v3) {
        args.push_back(a.dtype(t.dtype));
    }
    if (t.metadata.valid()) {
        args.push_back(t.metadata);
    }
    if (t.rebuild->name == "_rebuild_tensor") {
        args.resize(4);  // the old 4-argument form has no requires_grad/hooks
    }
    t.rawArgs = a.tuple(std::move(args));  // values grow; the tensor table (and `t`) does not move
}

}  // namespace detail

bool Plan::changesNothing() const
{
    return std::all_of(steps.begin(), steps.end(), [](const PlanStep& s) { return s.kind == StepKind::Note; });
}

std::uint64_t Plan::droppedCount() const
{
    return static_cast<std::uint64_t>(
        std::count_if(steps.begin(), steps.end(), [](const PlanStep& s) { return s.kind == StepKind::Drop; }));
}

std::string Plan::toJson() const
{
    nlohmann::ordered_json j;
    j["schema"] = kJsonSchema;
    j["options"] = nlohmann::ordered_json::parse(options.toJson());
    auto& steps_ = j["steps"] = nlohmann::ordered_json::array();
    for (const auto& s : steps) {
        steps_.push_back({{"kind", stepKindName(s.kind)},
                          {"path", s.path},
                          {"before", s.before},
                          {"after", s.after},
                          {"detail", s.detail}});
    }
    auto& st = j["storages"] = nlohmann::ordered_json::array();
    for (const auto& s : storages) {
        st.push_back({{"key", s.key},
                      {"source", s.source.value()},
                      {"location", s.location},
                      {"byte_offset", s.byteOffset},
                      {"nbytes", s.nbytes},
                      {"made_by_plan", s.madeByPlan()}});
    }
    j["tensors"] = tensorCount;
    j["dropped"] = droppedCount();
    j["changes_nothing"] = changesNothing();
    return dumpJson(j);
}

namespace {

// The names config.json's model ties that the reader restored (Checkpoint::ties): a torch output holds
// each as a second name of its source's tensor, which the input did not store, so the plan says
// so rather than "nothing to change". A safetensors output stores each tie once, as the input did.
void noteRestoredTies(detail::Builder& b)
{
    if (b.opts.format != OutputFormat::Torch || !b.rootPath.empty()) {
        return;
    }
    auto note =
        restoredTiesNote(b.in.ties, b.in.setFiles.empty() ? "the file" : "the set", [&](const std::string& name) {
            return std::any_of(b.plan.steps.begin(), b.plan.steps.end(),
                               [&](const PlanStep& s) { return s.kind == StepKind::Drop && s.path == name; });
        });
    if (note) {
        b.plan.steps.push_back(std::move(*note));
    }
}

}  // namespace

std::optional<PlanStep> restoredTiesNote(const TieReport& ties, std::string_view input,
                                         const std::function<bool(const std::string&)>& dropped)
{
    std::vector<std::string> written;
    for (const auto& t : ties.restored) {
        if (!dropped || !dropped(t.name)) {
            written.push_back("'" + t.name + "' = '" + t.source + "'");
        }
    }
    if (written.empty()) {
        return std::nullopt;
    }
    std::string list;
    for (const auto& w : written) {
        list += (list.empty() ? "" : ", ") + w;
    }
    return PlanStep{StepKind::Note, ties.restored.front().name, "", "",
                    std::to_string(written.size()) + (written.size() == 1 ? " name" : " names") + " " +
                        std::string(input) + " does not store, tied by the model (" + ties.architecture + ", " +
                        ties.decidedBy +
                        "), written as views of the tensor each is tied to, one storage, as "
                        "model.state_dict() holds them: " +
                        list};
}

Expected<Plan> makePlan(const Checkpoint& in, const Options& opts)
{
    Plan plan;
    plan.options = opts;
    plan.arena = in.arena;
    plan.root = in.root;
    // Every pass below recurses once per level: refuse a hostile nesting before any of them runs.
    if (pickle::nestingDepth(plan.arena, plan.root, detail::kMaxRewriteDepth) > detail::kMaxRewriteDepth) {
        Error e = detail::tooDeepToRewrite();
        e.path = in.path;
        return e;
    }
    detail::Builder b{in, opts, plan, "", {}, {}, {}, std::vector<bool>(opts.stripPrefixes.size(), false)};
    for (const auto& n : in.nodes) {
        if (n.stateDictLike) {
            b.stateDicts.insert(n.value.v);
        }
    }
    for (auto pass : {detail::selectRoot, detail::dropPaths, detail::dequantize, detail::unwrapModules,
                      detail::sanitize, detail::editPrefixes}) {
        if (auto ok = pass(b); !ok) {
            Error e = ok.error();
            e.path = in.path;
            return e;
        }
    }
    detail::planStorages(b);
    for (std::size_t i = 0; i < opts.stripPrefixes.size(); ++i) {
        if (b.stripUsed[i]) {
            plan.stripPrefixesUsed.push_back(opts.stripPrefixes[i]);
        }
    }
    noteRestoredTies(b);
    // Containers torch.load cannot read as they are (a gzip wrapper) or only without weights_only
    // (the 0.1 tar): the rewrite itself is the fix, so the plan says so.
    if (!in.compression.empty() || in.format == Format::TorchTar) {
        const std::string from = in.compression.empty()
                                     ? std::string(formatName(in.format))
                                     : in.compression + "-compressed " + std::string(formatName(in.format));
        b.step(StepKind::Convert, "", from, opts.format == OutputFormat::Safetensors ? "safetensors" : "torch zip",
               "the file is rewritten in the current container, which torch.load reads as it is");
    }
    return plan;
}

}  // namespace ckpt::transform
