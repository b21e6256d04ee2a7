// Rules about what a checkpoint's tensors stand for rather than how they are stored: names a model
// ties (util/tied_pairs.h), tensors without data (the meta device), block-quantized FP8 weights and
// their scales (checkpoint/block_quant.h).
#include "checkpoint/block_quant.h"
#include "diagnose/rules.h"
#include "util/shape_text.h"

#include <algorithm>

namespace ckpt::diagnose {

namespace {

std::string quotedList(const std::vector<TiedName>& names, bool withSource, std::size_t max = 6)
{
    std::string s;
    for (std::size_t i = 0; i < names.size() && i < max; ++i) {
        s += (i ? ", '" : "'") + names[i].name + "'";
        if (withSource) {
            s += " (tied to '" + names[i].source + "')";
        }
    }
    if (names.size() > max) {
        s += ", ... (" + std::to_string(names.size()) + " in all)";
    }
    return s;
}

std::string missingKeysText(const std::vector<TiedName>& names)
{
    std::string s;
    for (std::size_t i = 0; i < names.size() && i < 6; ++i) {
        s += (i ? ", \"" : "\"") + names[i].name + "\"";
    }
    return s + (names.size() > 6 ? ", ..." : "");
}

std::vector<std::string> pathsOf(const std::vector<TiedName>& names)
{
    std::vector<std::string> paths;
    paths.reserve(2 * names.size());  // every name, then each source not already among them
    for (const auto& n : names) {
        paths.push_back(n.name);
    }
    for (const auto& n : names) {
        if (std::find(paths.begin(), paths.end(), n.source) == paths.end()) {
            paths.push_back(n.source);
        }
    }
    return paths;
}

}  // namespace

std::vector<Finding> tieFindings(const TieReport& r, std::string_view what)
{
    std::vector<Finding> out;
    const std::string in = std::string(what);
    if (!r.restored.empty()) {
        const bool one = r.restored.size() == 1;
        Finding f;
        f.code = "tied-weight-missing";
        f.severity = Severity::Warning;
        f.title = one ? "A tied weight is not stored in " + in : "Tied weights are not stored in " + in;
        f.detail =
            (one ? quotedList(r.restored, false) + " is not stored: it is tied to '" + r.restored[0].source + "'"
                 : std::to_string(r.restored.size()) +
                       " names of the model's state_dict() are not stored: " + quotedList(r.restored, true)) +
            " (" + r.architecture + "'s _tied_weights_keys in transformers; " + r.decidedBy +
            "), so save_pretrained stored each tie once, as safetensors requires. from_pretrained re-ties "
            "them, but loading the files into the model any other way fails with Missing key(s) in state_dict: " +
            missingKeysText(r.restored) +
            ". Load with from_pretrained, or call model.tie_weights() after load_state_dict(strict=False); "
            "`ckptscope convert` restores the tie: its output holds each as a view of the tensor it is tied to, "
            "one storage, as model.state_dict() does.";
        f.paths = pathsOf(r.restored);
        out.push_back(std::move(f));
    }
    if (!r.untied.empty()) {
        const bool one = r.untied.size() == 1;
        Finding f;
        f.code = "tied-weight-missing";
        f.severity = Severity::Error;
        f.title = one ? "'" + r.untied[0].name + "' is missing and the model's config says it is not tied"
                      : "Weights are missing and the model's config says they are not tied";
        std::string listed;
        for (std::size_t i = 0; i < r.untied.size() && i < 6; ++i) {
            listed += (i ? ", '" : "'") + r.untied[i].name + "'";  // as Python prints the list
        }
        f.detail = quotedList(r.untied, false) + (one ? " is" : " are") + " not stored, and " + r.architecture +
                   " does not tie " + (one ? "it to '" + r.untied[0].source + "'" : std::string("them")) + " (" +
                   r.decidedBy + "): from_pretrained leaves " + (one ? "it" : "them") +
                   " randomly initialised (\"Some weights of ... were not initialized from the model checkpoint ... "
                   "and are newly initialized: [" +
                   listed +
                   "]\"). If the model was trained with tied embeddings, set tie_word_embeddings to true; otherwise "
                   "the weights were lost when saving: save them again.";
        f.paths = pathsOf(r.untied);
        out.push_back(std::move(f));
    }
    if (!r.unknown.empty()) {
        const bool one = r.unknown.size() == 1;
        Finding f;
        f.code = "tie-unknown";
        // With a config.json the files are a Hugging Face model whose loading depends on the answer;
        // a file alone may as well be a model without those weights.
        f.severity = r.haveConfig ? Severity::Warning : Severity::Info;
        f.title = one ? "Whether '" + r.unknown[0].name + "' is tied cannot be known from " + in
                      : "Whether " + std::to_string(r.unknown.size()) + " names are tied cannot be known from " + in;
        f.detail = quotedList(r.unknown, true) + (one ? " is" : " are") +
                   " not stored; transformers ties such names in some models, but " + r.unknownWhy +
                   ". If the model ties them, from_pretrained restores them and a strict load_state_dict fails with "
                   "Missing key(s) in state_dict: " +
                   missingKeysText(r.unknown) +
                   "; if it does not, they were lost when saving. `ckptscope convert` writes what is stored and "
                   "restores no tie it cannot know: put the model's config.json beside the weights to have it "
                   "decided.";
        f.paths = pathsOf(r.unknown);
        out.push_back(std::move(f));
    }
    return out;
}

namespace {

std::string tensorText(const TensorEntry& t)
{
    return "`" + std::string(t.path) + "` (" + std::string(dtypeName(t.dtype)) + " " +
           shapeText(std::vector<std::int64_t>(t.shape.begin(), t.shape.end())) + ")";
}

// Tensors saved from the meta device: torch.save writes their shape and dtype alone
// (`_rebuild_meta_tensor_no_storage`), the commonest "my checkpoint is empty".
void metaTensors(const Checkpoint& ckpt, Findings& out)
{
    std::vector<const TensorEntry*> meta;
    std::uint64_t wouldHold = 0;
    for (const auto& t : ckpt.tensors) {
        if (!t.hasData()) {
            meta.push_back(&t);
            wouldHold += t.nbytes;
        }
    }
    if (meta.empty()) {
        return;
    }
    Finding f;
    f.code = "meta-tensors";
    f.severity = Severity::Error;
    const bool all = meta.size() == ckpt.tensors.size();
    f.title = all ? "No tensor holds data: every one was saved from the meta device"
                  : plural(meta.size(), "tensor holds", "tensors hold") + " no data: saved from the meta device";
    std::string list;
    for (std::size_t i = 0; i < meta.size() && i < 5; ++i) {
        list += (i ? ", " : "") + tensorText(*meta[i]);
    }
    if (meta.size() > 5) {
        list += ", ... (" + std::to_string(meta.size()) + " in all)";
    }
    // load_state_dict's own words for the first one (torch/nn/modules/module.py, _load_from_state_dict
    // catching the copy's error), the model's shape being the one the file was saved from
    const std::string size =
        "torch.Size(" + shapeText(std::vector<std::int64_t>(meta[0]->shape.begin(), meta[0]->shape.end())) + ")";
    f.detail = list + (meta.size() == 1 ? " is a meta tensor" : " are meta tensors") +
               ": torch.save wrote their shape and dtype and nothing else (_rebuild_meta_tensor_no_storage), as it "
               "does for a model built under torch.device(\"meta\") or accelerate's init_empty_weights whose "
               "weights were never loaded. The file holds none of their " +
               bytesText(wouldHold) +
               ". torch.load gives meta tensors again, and load_state_dict into a real model fails with "
               "\"RuntimeError: Error(s) in loading state_dict for ...: While copying the parameter named \"" +
               std::string(meta[0]->path) + "\", whose dimensions in the model are " + size +
               " and whose dimensions in the checkpoint are " + size +
               ", an exception occurred : ('Cannot copy out of meta tensor; no data!',).\" (with assign=True it puts "
               "the model on the meta device). No conversion can give them values: save again after loading the "
               "real weights (from_pretrained, accelerate's load_checkpoint_and_dispatch, or "
               "model.to_empty(device=...) and load_state_dict).";
    for (const auto* t : meta) {
        f.paths.emplace_back(t->path);
    }
    out.push_back(std::move(f));
}

// Block-quantized FP8 weights (checkpoint/block_quant.h): what they need to load, whether each
// scale fits its weight, and the conversion that makes them plain weights.
void blockScales(const Checkpoint& ckpt, Findings& out)
{
    const BlockQuantization q = blockQuantization(ckpt);
    if (q.empty()) {
        return;
    }
    std::vector<const BlockScale*> bad;
    for (const auto& b : q.weights) {
        if (!b.ok()) {
            bad.push_back(&b);
        }
    }
    if (!bad.empty()) {
        Finding f;
        f.code = "fp8-scale-shape";
        f.severity = Severity::Error;
        f.title = plural(bad.size(), "FP8 weight's scale does", "FP8 weights' scales do") + " not fit the weight";
        std::string list;
        for (std::size_t i = 0; i < bad.size() && i < 4; ++i) {
            list += (i ? "; " : "") + tensorText(ckpt.tensors[bad[i]->weight]) + ": " + bad[i]->problem;
            f.paths.emplace_back(ckpt.tensors[bad[i]->weight].path);
            f.paths.emplace_back(ckpt.tensors[bad[i]->scale].path);
        }
        if (bad.size() > 4) {
            list += "; ... (" + std::to_string(bad.size()) + " in all)";
        }
        f.detail = list +
                   ". transformers' FP8Linear holds one scale per block, [ceil(out / block), ceil(in / block)], so "
                   "from_pretrained fails on a size mismatch for these scales, and a dequantization would multiply "
                   "values by another block's scale. The file was written by a broken exporter, or config.json's "
                   "weight_block_size is not the one it was quantized with.";
        out.push_back(std::move(f));
    }
    if (!q.unscaled.empty()) {
        Finding f;
        f.code = "fp8-scale-missing";
        f.severity = Severity::Error;
        f.title = plural(q.unscaled.size(), "FP8 weight has", "FP8 weights have") + " no scale beside it";
        std::string list;
        for (std::size_t i = 0; i < q.unscaled.size() && i < 5; ++i) {
            list += (i ? ", " : "") + tensorText(ckpt.tensors[q.unscaled[i]]);
            f.paths.emplace_back(ckpt.tensors[q.unscaled[i]].path);
        }
        f.detail = list + (q.unscaled.size() == 1 ? " is" : " are") +
                   " float8 with no `weight_scale_inv` beside, though config.json's quantization_config says the model "
                   "is FP8-quantized: from_pretrained leaves those scales newly initialised, not the "
                   "model's, and the float8 values alone mean nothing. Take the file from a complete download or "
                   "export.";
        out.push_back(std::move(f));
    }
    const auto good = static_cast<std::size_t>(
        std::count_if(q.weights.begin(), q.weights.end(), [](const BlockScale& b) { return b.ok(); }));
    if (good == 0) {
        return;
    }
    const BlockScale& first =
        *std::find_if(q.weights.begin(), q.weights.end(), [](const BlockScale& b) { return b.ok(); });
    Finding f;
    f.code = "fp8-block-quantized";
    f.severity = Severity::Info;
    f.title = plural(good, "weight is", "weights are") + " FP8 block-quantized (" +
              std::string(dtypeName(ckpt.tensors[first.weight].dtype)) + " with a " +
              std::string(dtypeName(ckpt.tensors[first.scale].dtype)) + " scale per block)";
    f.detail =
        "Each such weight's values are float32(weight) x its block's scale, e.g. " +
        tensorText(ckpt.tensors[first.weight]) + " with " + blockScaleText(ckpt, first) +
        (q.config ? ". config.json's quantization_config names quant_method " + q.config->method : std::string()) +
        ". transformers loads them through FineGrainedFP8Config: as FP8 on a GPU of compute capability 8.9 "
        "or more, dequantized to bf16 while loading elsewhere. torch.load and safetensors give the raw float8 "
        "values, which mean nothing without their scales. `ckptscope convert --dequantize bf16` (or float16, "
        "float32) writes each as a plain weight, streamed a piece at a time on the CPU, and leaves the scales "
        "out.";
    transform::Options fix;
    fix.dequantize = DType::BFloat16;
    f.fix = fix;
    for (const auto& b : q.weights) {
        if (b.ok() && f.paths.size() < 100) {
            f.paths.emplace_back(ckpt.tensors[b.weight].path);
        }
    }
    out.push_back(std::move(f));
}

}  // namespace

void tensorRules(const Checkpoint& ckpt, Findings& out)
{
    // A set's view carries the set's ties, whose findings are the set's own (sharded/hf_set.cpp).
    if (ckpt.setFiles.empty()) {
        for (auto& f : tieFindings(ckpt.ties, "the file")) {
            out.push_back(std::move(f));
        }
    }
    metaTensors(ckpt, out);
    blockScales(ckpt, out);
}

}  // namespace ckpt::diagnose
