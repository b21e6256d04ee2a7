#include "sharded/formats.h"

#include "sharded/dcp.h"
#include "sharded/fsdp.h"
#include "sharded/probes.h"
#include "sharded/set_view.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>

namespace ckpt::sharded {

namespace {

// `read(loc)` then `use(set)`, or the read's error.
template <class Read, class Use> auto then(const Read& read, const Use& use) -> decltype(use(*read()))
{
    auto set = read();
    if (!set) {
        return set.error();
    }
    return use(*set);
}

// The view of `s` once `whole` (its format's completeness check; nullptr where `view` makes its
// own) passes, else `whole`'s refusal.
template <class Set, class Whole, class View>
Expected<CheckpointPtr> checkedView(const Set& s, const Whole& whole, const View& view)
{
    if constexpr (!std::is_null_pointer_v<Whole>) {
        if (auto w = whole(s); !w) {
            return w.error();
        }
    }
    return view(s);
}

// The listing and the view of one opened set, as checkedView gives it: a refusal is kept beside
// the listing, and a set `whole` refuses keeps the view built without that check, where it builds,
// as its partial view.
template <class Set, class List, class Whole, class View>
Expected<ReadSet> both(const Expected<Set>& set, const List& list, const Whole& whole, const View& view)
{
    if (!set) {
        return set.error();
    }
    Expected<SetListing> listing = list(*set);
    if (!listing) {
        return listing.error();
    }
    ReadSet r;
    r.listing = std::move(*listing);
    if constexpr (!std::is_null_pointer_v<Whole>) {
        if (auto w = whole(*set); !w) {
            r.notWhole = w.error();
            if (auto p = view(*set)) {
                r.partial = std::move(*p);
            }
            return r;
        }
    }
    if (auto v = view(*set)) {
        r.view = std::move(*v);
    } else {
        r.notWhole = v.error();
    }
    return r;
}

// A set's listing (listing.h), as every entry's `list` and `read` give it.
template <class Set> Expected<SetListing> listed(const Set& s)
{
    return listingOf(s);
}

Expected<CheckpointPtr> hfViewOf(const ShardedSet& s)
{
    return viewOf(s);
}

Expected<CheckpointPtr> hfView(const ShardedSet& s)
{
    return checkedView(s, checkConsolidatable, hfViewOf);
}

// A Hugging Face set's shards, each a Checkpoint of its own (SetFormat::parts, set_view.h's partsOf).
Expected<std::vector<CheckpointPtr>> hfParts(const SetLocation& loc)
{
    return then([&] { return openSet(loc); }, partsOf);
}

// In probe order: a Hugging Face index or shard first, then ZeRO's `latest` and tag folders, DCP's
// .metadata, Megatron's iteration dirs (named only), FSDP rank files, and last an accelerate folder,
// whose DCP folders inside are only found by looking into it.
const std::array<SetFormat, 6> kFormats{{
    {.kind = SetKind::HuggingFace,
     .id = "huggingface",
     .name = "Hugging Face sharded checkpoint",
     .list = [](const SetLocation& loc) { return then([&] { return openSet(loc); }, listed<ShardedSet>); },
     .open = [](const SetLocation& loc, const zero::Options&) { return then([&] { return openSet(loc); }, hfView); },
     .consolidate =
         [](const SetLocation& loc, const std::string& out, const zero::Options&) {
             return then([&] { return openSet(loc); }, [&](const ShardedSet& s) { return consolidateTorch(s, out); });
         },
     .read = [](const SetLocation& loc,
                const zero::Options&) { return both(openSet(loc), listed<ShardedSet>, checkConsolidatable, hfViewOf); },
     .probe = detail::hfAt,
     .files = detail::hfFiles,
     .members = "shards",
     .parts = hfParts},
    {.kind = SetKind::DeepSpeedZero,
     .id = "deepspeed-zero",
     .name = "DeepSpeed ZeRO checkpoint",
     .list = [](const SetLocation& loc) { return then([&] { return zero::open(loc); }, listed<zero::Set>); },
     .open =
         [](const SetLocation& loc, const zero::Options& o) {
             return then([&] { return zero::open(loc, o.weights, o.keepOptimizer); },
                         [&](const zero::Set& s) {
                             return checkedView(s, zero::checkConsolidatable,
                                                [&](const zero::Set& z) { return viewOf(z, o.groupStorages); });
                         });
         },
     .consolidate =
         [](const SetLocation& loc, const std::string& out, const zero::Options& o) {
             return then([&] { return zero::open(loc, o.weights, o.keepOptimizer); },
                         [&](const zero::Set& s) { return zero::consolidate(s, out, o.groupStorages); });
         },
     .read =
         [](const SetLocation& loc, const zero::Options& o) {
             return both(zero::open(loc, o.weights, o.keepOptimizer), listed<zero::Set>, zero::checkConsolidatable,
                         [&](const zero::Set& s) { return viewOf(s, o.groupStorages); });
         },
     .probe = detail::deepspeedAt,
     .files = detail::deepspeedFiles,
     .members = "ZeRO rank files, as zero_to_fp32.py rebuilds the model",
     .takesZeroOptions = true,
     // A rank file is a torch.save file of its own where its folder is no set zero::open reads.
     .member = [](const SetLocation& loc) { return zero::opensAsSet(loc) ? MemberOpens::TheSet : MemberOpens::File; }},
    {.kind = SetKind::Dcp,
     .id = "dcp",
     .name = "torch.distributed.checkpoint (DCP) directory",
     .list = [](const SetLocation& loc) { return then([&] { return dcp::open(loc); }, listed<dcp::Set>); },
     .open = [](const SetLocation& loc,
                const zero::Options&) { return then([&] { return dcp::open(loc); }, dcp::view); },
     .consolidate =
         [](const SetLocation& loc, const std::string& out, const zero::Options&) {
             return then([&] { return dcp::open(loc); }, [&](const dcp::Set& s) { return dcp::consolidate(s, out); });
         },
     .read = [](const SetLocation& loc,
                const zero::Options&) { return both(dcp::open(loc), listed<dcp::Set>, nullptr, dcp::view); },
     .probe = detail::dcpAt,
     .files = detail::dcpFiles,
     .members = "DCP data files"},
    // Named, not read: notRead's refusal says why.
    {.kind = SetKind::Megatron,
     .id = "megatron",
     .name = "Megatron-LM checkpoint",
     .probe = detail::megatronAt,
     .notReadBecause = "ckptscope does not merge Megatron tensor-parallel ranks (the split dimension depends on the "
                       "layer type); merge them with Megatron's tools/checkpoint/convert.py, or inspect one "
                       "mp_rank_*/model_optim_rng.pt on its own"},
    {.kind = SetKind::FsdpRanks,
     .id = "fsdp-ranks",
     .name = "FSDP per-rank state dicts",
     .list = [](const SetLocation& loc) { return then([&] { return fsdp::open(loc, loc.alone); }, listed<fsdp::Set>); },
     .open = [](const SetLocation& loc,
                const zero::Options&) { return then([&] { return fsdp::open(loc, loc.alone); }, fsdp::view); },
     .consolidate =
         [](const SetLocation& loc, const std::string& out, const zero::Options&) {
             return then([&] { return fsdp::open(loc, loc.alone); },
                         [&](const fsdp::Set& s) { return fsdp::consolidate(s, out); });
         },
     .read =
         [](const SetLocation& loc, const zero::Options&) {
             return both(fsdp::open(loc, loc.alone), listed<fsdp::Set>, nullptr, fsdp::view);
         },
     .probe = detail::fsdpAt,
     .files = detail::fsdpFiles,
     .members = "FSDP rank files",
     // One rank file is listed as its rank's shards: no tensor of it is whole.
     .member = [](const SetLocation&) { return MemberOpens::Alone; }},
    // accelerate's save_state folder around DCP folders: another place DCP sets are found.
    {.kind = SetKind::Dcp,
     .id = "dcp",
     .name = "torch.distributed.checkpoint (DCP) directory",
     .probe = detail::accelerateAt,
     .files = detail::dcpFiles},
}};

// The first entry of `kind` (a probe-only one too): where its name is written.
const SetFormat* entryOf(SetKind kind)
{
    const auto* const it = std::ranges::find(kFormats, kind, &SetFormat::kind);
    return it == kFormats.end() ? nullptr : &*it;
}

}  // namespace

Error notRead(const SetLocation& loc)
{
    Error e = loc.kind == SetKind::None ? makeError(ErrorCode::NotCheckpoint, "not a multi-file checkpoint")
                                        : makeError(ErrorCode::Unsupported, loc.what);
    if (const auto* f = entryOf(loc.kind); f != nullptr && f->notReadBecause != nullptr) {
        e.message += std::string(": ") + f->notReadBecause;
    }
    e.path = loc.dir;
    return e;
}

namespace {

// `call(format)` for the format that reads `loc`, with `control` installed for this thread while
// it runs (each format opens its member files through openMember); Cancelled once a stop was
// asked, whatever the format made of the files it was refused (it takes a member that did not open
// for a finding). A kind with no entry is notRead.
template <class Call>
auto controlled(const SetLocation& loc, const OpenControl& control, const Call& call)
    -> decltype(call(std::declval<const SetFormat&>()))
{
    const auto* f = setFormat(loc.kind);
    if (f == nullptr) {
        return notRead(loc);
    }
    const ScopedOpenControl scope(control);
    auto done = call(*f);
    if (control.stop.stop_requested()) {
        return openCancelled(loc.dir);
    }
    return done;
}

}  // namespace

Expected<ReadSet> readSet(const SetLocation& loc, const zero::Options& options, const OpenControl& control)
{
    return controlled(loc, control, [&](const SetFormat& f) { return f.read(loc, options); });
}

Expected<SetListing> listSet(const SetLocation& loc, const OpenControl& control)
{
    return controlled(loc, control, [&](const SetFormat& f) { return f.list(loc); });
}

Expected<CheckpointPtr> openView(const SetLocation& loc, const zero::Options& zeroOptions, const OpenControl& control)
{
    return controlled(loc, control, [&](const SetFormat& f) { return f.open(loc, zeroOptions); });
}

Expected<ConsolidateResult> consolidateSet(const SetLocation& loc, const std::string& outPath,
                                           const zero::Options& zeroOptions, const OpenControl& control)
{
    if (auto outside = checkOutputOutsideSet(loc, outPath); !outside) {
        return outside.error();
    }
    return controlled(loc, control, [&](const SetFormat& f) { return f.consolidate(loc, outPath, zeroOptions); });
}

bool wouldCopyCode(const Error& e)
{
    return e.code == ErrorCode::Unsupported && e.message.find(detail::kCallsCode) != std::string::npos;
}

std::vector<std::string> memberFiles(const SetLocation& loc)
{
    const auto* f = entryOf(loc.kind);
    return f == nullptr ? std::vector<std::string>{} : f->files(loc);
}

std::string_view setKindName(SetKind k)
{
    const auto* f = entryOf(k);
    return f == nullptr ? SetFormat{}.name : f->name;
}

std::string_view setKindId(SetKind k)
{
    const auto* f = entryOf(k);
    return f == nullptr ? SetFormat{}.id : f->id;
}

std::span<const SetFormat> setFormats()
{
    return kFormats;
}

const SetFormat* setFormat(SetKind kind)
{
    for (const auto& f : kFormats) {
        if (f.kind == kind && f.read != nullptr) {
            return &f;
        }
    }
    return nullptr;
}

}  // namespace ckpt::sharded
