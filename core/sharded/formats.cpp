#include "sharded/formats.h"

#include "sharded/dcp.h"
#include "sharded/fsdp.h"
#include "sharded/probes.h"
#include "sharded/set_view.h"

#include <array>

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

// The listing and the view of one opened set: the view's refusal is kept beside the listing.
template <class Set, class List, class View>
Expected<ReadSet> both(const Expected<Set>& set, const List& list, const View& view)
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

Expected<CheckpointPtr> hfView(const ShardedSet& s)
{
    if (auto whole = checkConsolidatable(s); !whole) {
        return whole.error();
    }
    return viewOf(s);
}

Expected<CheckpointPtr> zeroView(const zero::Set& s, bool groupStorages)
{
    if (auto whole = zero::checkConsolidatable(s); !whole) {
        return whole.error();
    }
    return viewOf(s, groupStorages);
}

// In probe order: a Hugging Face index or shard first, then ZeRO's `latest` and tag folders, DCP's
// .metadata, Megatron's iteration dirs (named only), FSDP rank files, and last an accelerate folder,
// whose DCP folders inside are only found by looking into it.
const std::array<SetFormat, 6> kFormats{{
    {SetKind::HuggingFace,
     [](const SetLocation& loc) { return then([&] { return openSet(loc); }, listed<ShardedSet>); },
     [](const SetLocation& loc, const zero::Options&) { return then([&] { return openSet(loc); }, hfView); },
     [](const SetLocation& loc, const std::string& out, const zero::Options&) {
         return then([&] { return openSet(loc); }, [&](const ShardedSet& s) { return consolidateTorch(s, out); });
     },
     [](const SetLocation& loc, const zero::Options&) { return both(openSet(loc), listed<ShardedSet>, hfView); },
     detail::hfAt},
    {SetKind::DeepSpeedZero,
     [](const SetLocation& loc) { return then([&] { return zero::open(loc); }, listed<zero::Set>); },
     [](const SetLocation& loc, const zero::Options& o) {
         return then([&] { return zero::open(loc, o.weights, o.keepOptimizer); },
                     [&](const zero::Set& s) { return zeroView(s, o.groupStorages); });
     },
     [](const SetLocation& loc, const std::string& out, const zero::Options& o) {
         return then([&] { return zero::open(loc, o.weights, o.keepOptimizer); },
                     [&](const zero::Set& s) { return zero::consolidate(s, out, o.groupStorages); });
     },
     [](const SetLocation& loc, const zero::Options& o) {
         return both(zero::open(loc, o.weights, o.keepOptimizer), listed<zero::Set>,
                     [&](const zero::Set& s) { return zeroView(s, o.groupStorages); });
     },
     detail::deepspeedAt},
    {SetKind::Dcp, [](const SetLocation& loc) { return then([&] { return dcp::open(loc); }, listed<dcp::Set>); },
     [](const SetLocation& loc, const zero::Options&) { return then([&] { return dcp::open(loc); }, dcp::view); },
     [](const SetLocation& loc, const std::string& out, const zero::Options&) {
         return then([&] { return dcp::open(loc); }, [&](const dcp::Set& s) { return dcp::consolidate(s, out); });
     },
     [](const SetLocation& loc, const zero::Options&) { return both(dcp::open(loc), listed<dcp::Set>, dcp::view); },
     detail::dcpAt},
    {SetKind::Megatron, nullptr, nullptr, nullptr, nullptr, detail::megatronAt},
    {SetKind::FsdpRanks,
     [](const SetLocation& loc) { return then([&] { return fsdp::open(loc, false); }, listed<fsdp::Set>); },
     [](const SetLocation& loc, const zero::Options&) {
         return then([&] { return fsdp::open(loc, false); }, fsdp::view);
     },
     [](const SetLocation& loc, const std::string& out, const zero::Options&) {
         return then([&] { return fsdp::open(loc, false); },
                     [&](const fsdp::Set& s) { return fsdp::consolidate(s, out); });
     },
     [](const SetLocation& loc, const zero::Options&) {
         return both(fsdp::open(loc, false), listed<fsdp::Set>, fsdp::view);
     },
     detail::fsdpAt},
    {SetKind::Dcp, nullptr, nullptr, nullptr, nullptr, detail::accelerateAt},
}};

}  // namespace

Error notRead(const SetLocation& loc)
{
    auto set = openSet(loc);
    if (set) {
        Error e = makeError(ErrorCode::Internal, std::string(setKindName(loc.kind)) + " has no reader entry");
        e.path = loc.dir;
        return e;
    }
    return set.error();
}

Expected<ReadSet> readSet(const SetLocation& loc, const zero::Options& options, const OpenControl& control)
{
    const auto* f = setFormat(loc.kind);
    if (f == nullptr) {
        return notRead(loc);
    }
    const ScopedOpenControl scope(control);
    auto read = f->read(loc, options);
    // A format takes a member that did not open for a finding (an unreadable shard): the stop is
    // said here, whatever the format made of it.
    if (control.stop.stop_requested()) {
        return openCancelled(loc.dir);
    }
    return read;
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
