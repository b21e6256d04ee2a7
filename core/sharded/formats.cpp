#include "sharded/formats.h"

#include "sharded/dcp.h"
#include "sharded/fsdp.h"
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

const std::array<SetFormat, 4> kFormats{{
    {SetKind::HuggingFace,
     [](const SetLocation& loc) {
         return then([&] { return openSet(loc); },
                     [](const ShardedSet& s) { return Expected<SetListing>(listingOf(s)); });
     },
     [](const SetLocation& loc, const zero::Options&) {
         return then([&] { return openSet(loc); },
                     [](const ShardedSet& s) -> Expected<CheckpointPtr> {
                         if (auto whole = checkConsolidatable(s); !whole) {
                             return whole.error();
                         }
                         return viewOf(s);
                     });
     },
     [](const SetLocation& loc, const std::string& out, const zero::Options&) {
         return then([&] { return openSet(loc); }, [&](const ShardedSet& s) { return consolidateTorch(s, out); });
     }},
    {SetKind::DeepSpeedZero,
     [](const SetLocation& loc) {
         return then([&] { return zero::open(loc); }, [](const zero::Set& s) { return listingOf(s); });
     },
     [](const SetLocation& loc, const zero::Options& o) {
         return then([&] { return zero::open(loc, o.weights, o.keepOptimizer); },
                     [&](const zero::Set& s) -> Expected<CheckpointPtr> {
                         if (auto whole = zero::checkConsolidatable(s); !whole) {
                             return whole.error();
                         }
                         return viewOf(s, o.groupStorages);
                     });
     },
     [](const SetLocation& loc, const std::string& out, const zero::Options& o) {
         return then([&] { return zero::open(loc, o.weights, o.keepOptimizer); },
                     [&](const zero::Set& s) { return zero::consolidate(s, out, o.groupStorages); });
     }},
    {SetKind::Dcp,
     [](const SetLocation& loc) {
         return then([&] { return dcp::open(loc); },
                     [](const dcp::Set& s) { return Expected<SetListing>(listingOf(s)); });
     },
     [](const SetLocation& loc, const zero::Options&) {
         return then([&] { return dcp::open(loc); }, [](const dcp::Set& s) { return dcp::view(s); });
     },
     [](const SetLocation& loc, const std::string& out, const zero::Options&) {
         return then([&] { return dcp::open(loc); }, [&](const dcp::Set& s) { return dcp::consolidate(s, out); });
     }},
    {SetKind::FsdpRanks,
     [](const SetLocation& loc) {
         return then([&] { return fsdp::open(loc, false); },
                     [](const fsdp::Set& s) { return Expected<SetListing>(listingOf(s)); });
     },
     [](const SetLocation& loc, const zero::Options&) {
         return then([&] { return fsdp::open(loc, false); }, [](const fsdp::Set& s) { return fsdp::view(s); });
     },
     [](const SetLocation& loc, const std::string& out, const zero::Options&) {
         return then([&] { return fsdp::open(loc, false); },
                     [&](const fsdp::Set& s) { return fsdp::consolidate(s, out); });
     }},
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

const SetFormat* setFormat(SetKind kind)
{
    for (const auto& f : kFormats) {
        if (f.kind == kind) {
            return &f;
        }
    }
    return nullptr;
}

}  // namespace ckpt::sharded
