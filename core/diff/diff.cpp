// compare(): leaves matched by key, unmatched tensors matched by their bytes, then every matched
// tensor pair compared in blocks of at most kBlockBytes on a pool of threads. A block whose bytes
// are equal costs one memcmp over the two mappings; only blocks that differ, or pairs of different
// dtypes, are decoded to float64.
#include "diff/diff.h"

#include "checkpoint/layout.h"
#include "checkpoint/tensor_bytes.h"
#include "diff/elements.h"
#include "diff/keys.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

namespace ckpt::diff {
namespace {

using detail::TensorBytes;

constexpr std::uint64_t kBlockBytes = std::uint64_t{8} << 20U;
constexpr std::size_t kDecodeParts = 2048;  // doubles decoded at a time, on the stack
constexpr std::size_t kReprCompare = 4096;
constexpr std::size_t kReprShow = 120;
constexpr unsigned kMaxThreads = 256;

unsigned threadCount(const Options& o)
{
    if (o.threads != 0) {
        return std::min(o.threads, kMaxThreads);
    }
    return std::max(1U, std::thread::hardware_concurrency());
}

// Runs fn(i) for i in [0, n) on `threads` threads (the caller's among them), until `stop`.
template <class Fn> void parallelFor(std::size_t n, unsigned threads, std::stop_token stop, Fn&& fn)
{
    std::atomic<std::size_t> next{0};
    auto work = [&] {
        for (;;) {
            if (stop.stop_requested()) {
                return;
            }
            const std::size_t i = next.fetch_add(1);
            if (i >= n) {
                return;
            }
            fn(i);
        }
    };
    std::vector<std::jthread> pool;
    const auto extra = static_cast<std::size_t>(std::min<std::size_t>(threads, std::max<std::size_t>(n, 1)) - 1);
    pool.reserve(extra);
    for (std::size_t k = 0; k < extra; ++k) {
        pool.emplace_back(work);
    }
    work();
}

// One block's findings, merged into its pair's ValueDiff afterwards.
struct Partial {
    bool identical = true;
    std::uint64_t differing = 0;
    double maxAbs = 0;
    double maxRel = 0;
    bool close = true;
};

void merge(Partial& into, const Partial& p)
{
    into.identical = into.identical && p.identical;
    into.differing += p.differing;
    into.maxAbs = std::max(into.maxAbs, p.maxAbs);
    into.maxRel = std::max(into.maxRel, p.maxRel);
    into.close = into.close && p.close;
}

// The element loop: NaN matches NaN (a copy of a tensor holding NaN is the same tensor), and a
// difference that is itself NaN (Inf against -Inf, NaN against a number) is never close.
void compareDoubles(const double* x, const double* y, std::size_t n, double rtol, double atol, Partial& p)
{
    for (std::size_t i = 0; i < n; ++i) {
        const double a = x[i];
        const double b = y[i];
        if (a == b || (std::isnan(a) && std::isnan(b))) {
            continue;
        }
        ++p.differing;
        const double d = std::fabs(a - b);
        if (std::isnan(d)) {
            p.close = false;
            continue;
        }
        p.maxAbs = std::max(p.maxAbs, d);
        const double mag = std::fabs(b);
        if (mag != 0) {
            p.maxRel = std::max(p.maxRel, d / mag);
        }
        if (!(d <= atol + rtol * mag)) {
            p.close = false;
        }
    }
}

// A matched tensor pair being compared by value.
struct Job {
    Entry* entry = nullptr;
    const Checkpoint* ca = nullptr;
    const Checkpoint* cb = nullptr;
    const TensorEntry* ta = nullptr;
    const TensorEntry* tb = nullptr;
    TensorBytes a;
    TensorBytes b;
    DType partA = DType::Unknown;
    DType partB = DType::Unknown;
    std::uint64_t parts = 0;  // numbers to compare (elements, twice that for complex)
    bool sameDType = false;
    bool decodable = false;
    bool valueless = false;
    // Per-tensor affine quantized sides are compared as their values, (q - zero_point) * scale.
    std::optional<Quantizer> qa;
    std::optional<Quantizer> qb;
    Partial result;
};

void dequantize(const std::optional<Quantizer>& q, double* v, std::size_t n)
{
    if (!q || !q->perTensorAffine) {
        return;
    }
    const auto zp = static_cast<double>(q->zeroPoint);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = (v[i] - zp) * q->scale;
    }
}

struct Block {
    Job* job = nullptr;
    std::uint64_t first = 0;  // in parts
    std::uint64_t count = 0;
    Partial partial;
};

void compareBlock(Block& blk, const Options& o)
{
    Job& j = *blk.job;
    const std::size_t sa = elementSize(j.partA);
    const std::size_t sb = elementSize(j.partB);
    if (j.sameDType) {
        const std::byte* pa = j.a.bytes.data() + blk.first * sa;
        const std::byte* pb = j.b.bytes.data() + blk.first * sb;
        if (std::memcmp(pa, pb, static_cast<std::size_t>(blk.count * sa)) == 0) {
            return;
        }
    }
    blk.partial.identical = false;
    if (!j.decodable) {
        blk.partial.close = false;
        return;
    }
    std::array<double, kDecodeParts> x{};
    std::array<double, kDecodeParts> y{};
    for (std::uint64_t at = blk.first; at < blk.first + blk.count; at += kDecodeParts) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kDecodeParts, blk.first + blk.count - at));
        detail::decode(j.partA, j.a.bytes, static_cast<std::size_t>(at), n, x.data());
        detail::decode(j.partB, j.b.bytes, static_cast<std::size_t>(at), n, y.data());
        dequantize(j.qa, x.data(), n);
        dequantize(j.qb, y.data(), n);
        compareDoubles(x.data(), y.data(), n, o.rtol, o.atol, blk.partial);
    }
}

bool bigEndian(const Checkpoint& c)
{
    return c.byteorder == "big";
}

bool sameStrides(const TensorEntry& a, const TensorEntry& b)
{
    if (a.shape != b.shape || a.stride.size() != b.stride.size()) {
        return true;  // a shape change says it already
    }
    for (std::size_t d = 0; d < a.shape.size(); ++d) {
        if (a.shape[d] != 1 && a.stride[d] != b.stride[d]) {
            return false;
        }
    }
    return true;
}

std::uint8_t metadataChanges(const TensorEntry& a, const TensorEntry& b)
{
    std::uint8_t c = 0;
    if (a.dtype != b.dtype) {
        c |= kDType;
    }
    if (a.shape != b.shape) {
        c |= kShape;
    }
    if (!sameStrides(a, b)) {
        c |= kStride;
    }
    if (a.location != b.location) {
        c |= kDevice;
    }
    return c;
}

// Sets up a job's bytes and kind of comparison; false when the values cannot be compared (the
// entry's note says why).
bool prepare(Job& j)
{
    const Checkpoint& ca = *j.ca;
    const Checkpoint& cb = *j.cb;
    ValueDiff& v = j.entry->values;
    if (j.ta->form == pickle::TensorForm::Sparse && j.tb->form == pickle::TensorForm::Sparse) {
        // Equal when their stored parts (indices and values) are, byte for byte.
        const auto pa = sparseParts(ca, *j.ta);
        const auto pb = sparseParts(cb, *j.tb);
        bool same = !pa.empty() && pa.size() == pb.size();
        for (std::size_t i = 0; same && i < pa.size(); ++i) {
            TensorBytes x;
            TensorBytes y;
            same = pa[i].dtype == pb[i].dtype && pa[i].shape == pb[i].shape &&
                   detail::readTensorBytes(ca, entryOf(ca, pa[i].value, j.ta->path + " " + pa[i].name), x) &&
                   detail::readTensorBytes(cb, entryOf(cb, pb[i].value, j.tb->path + " " + pb[i].name), y) &&
                   x.bytes.size() == y.bytes.size() && std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()) == 0;
        }
        v.compared = true;
        v.identicalBytes = same;
        v.allclose = same;
        j.valueless = true;  // decided here, not by an element loop
        if (!same) {
            v.note = "sparse: the stored indices or values differ";
            j.entry->changes |= kValues;
        }
        return false;
    }
    if (!j.ta->storage.valid() && !j.tb->storage.valid()) {
        j.valueless = true;  // meta tensors and other storage-less forms: their metadata is all there is
        v.note = "no stored values on either side";
        return false;
    }
    if (j.ta->shape != j.tb->shape) {
        v.note = "shapes differ";
        return false;
    }
    // A form without plain stored values is not comparable; bytes that cannot be read are a bad input.
    if (auto r = detail::readTensorBytes(ca, *j.ta, j.a); !r) {
        v.note = "A: " + r.error().message;
        v.unreadable = r.error().code != ErrorCode::Unsupported;
        return false;
    }
    if (auto r = detail::readTensorBytes(cb, *j.tb, j.b); !r) {
        v.note = "B: " + r.error().message;
        v.unreadable = r.error().code != ErrorCode::Unsupported;
        return false;
    }
    // A quantized side has values only per-tensor affine; otherwise its integers are compared as
    // bytes and a differing quantizer is reported on its own (kQuantizer).
    auto valueType = [](const std::optional<Quantizer>& q, DType t) {
        if (q) {
            return q->perTensorAffine ? detail::quantizedIntType(t) : DType::Unknown;
        }
        return detail::partType(t);
    };
    j.partA = valueType(j.qa, j.ta->dtype);
    j.partB = valueType(j.qb, j.tb->dtype);
    const bool numeric = detail::hasNumericValue(j.partA) && detail::hasNumericValue(j.partB) &&
                         isComplex(j.ta->dtype) == isComplex(j.tb->dtype);
    j.sameDType = j.ta->dtype == j.tb->dtype && (j.entry->quantizerA == j.entry->quantizerB || !numeric);
    const bool swapped = (bigEndian(ca) && elementSize(j.partA) > 1) || (bigEndian(cb) && elementSize(j.partB) > 1);
    j.decodable = numeric && !swapped;
    if (!j.sameDType && !j.decodable) {
        v.note = swapped ? "big-endian file: values not decoded"
                         : "no common numeric type for " + std::string(dtypeName(j.ta->dtype)) + " and " +
                               std::string(dtypeName(j.tb->dtype));
        return false;
    }
    if (!j.decodable && !j.sameDType) {
        return false;
    }
    if (j.sameDType && !numeric) {
        j.partA = j.partB = j.ta->dtype;  // compared as bytes only
    }
    j.parts = j.ta->numel * (numeric ? detail::partsPerElement(j.ta->dtype) : 1);
    return true;
}

// Compares a batch of jobs: their blocks on every thread, then one ValueDiff each.
void runJobs(std::vector<Job*>& jobs, const Options& o, std::stop_token stop, std::atomic<std::uint64_t>& done,
             std::uint64_t total, const ProgressFn& progress)
{
    std::vector<Block> blocks;
    for (Job* j : jobs) {
        const std::uint64_t widest = std::max(elementSize(j->partA), elementSize(j->partB));
        const std::uint64_t per = std::max<std::uint64_t>(1, kBlockBytes / std::max<std::uint64_t>(widest, 1));
        for (std::uint64_t at = 0; at < j->parts; at += per) {
            blocks.push_back({j, at, std::min(per, j->parts - at), {}});
        }
    }
    parallelFor(blocks.size(), threadCount(o), stop, [&](std::size_t i) {
        Block& blk = blocks[i];
        compareBlock(blk, o);
        const std::uint64_t bytes = blk.count * elementSize(blk.job->partA);
        const std::uint64_t now = done.fetch_add(bytes) + bytes;
        if (progress) {
            progress(now, total);
        }
    });
    for (const Block& blk : blocks) {
        merge(blk.job->result, blk.partial);
    }
    for (Job* j : jobs) {
        ValueDiff& v = j->entry->values;
        v.compared = j->decodable || j->sameDType;
        v.identicalBytes = j->sameDType && j->result.identical;
        v.differing = j->result.identical ? 0 : j->result.differing;
        if (!j->decodable && !j->result.identical) {
            v.note = "no numeric value for " + std::string(dtypeName(j->ta->dtype)) + ": bytes differ";
            v.compared = false;
        }
        v.maxAbs = j->result.maxAbs;
        v.maxRel = j->result.maxRel;
        v.allclose = j->result.close;
        j->a = {};
        j->b = {};
    }
}

std::string tensorRepr(const TensorEntry& t)
{
    std::string s = "tensor " + std::string(dtypeName(t.dtype)) + " [";
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
        s += (d != 0 ? ", " : "") + std::to_string(t.shape[d]);
    }
    return s + "]";
}

std::string leafRepr(const Checkpoint& c, NodeIndex n, std::size_t maxLen)
{
    const Node& node = c.nodes[n];
    if (node.kind == NodeKind::Tensor && node.tensor.valid()) {
        return tensorRepr(c.tensors[node.tensor]);
    }
    if (node.kind == NodeKind::Recursive) {
        return "<recursive reference>";
    }
    return pickle::shortRepr(c.arena, node.value, maxLen);
}

// The Python type of a leaf that is no tensor: a value-like object's class (`numpy.float64`,
// `pathlib.PosixPath`), a scalar's kind (`float`). Reprs alone can agree across types: a numpy
// scalar shows as its number, as the float that replaced it does.
std::string leafClass(const Checkpoint& c, NodeIndex n)
{
    const Node& node = c.nodes[n];
    if (node.kind == NodeKind::Object && node.object.valid()) {
        return c.objects[node.object].type;
    }
    return std::string(pickle::kindName(c.arena[node.value].kind));
}

const TensorEntry* tensorOf(const Checkpoint& c, NodeIndex n)
{
    const Node& node = c.nodes[n];
    return node.kind == NodeKind::Tensor && node.tensor.valid() ? &c.tensors[node.tensor] : nullptr;
}

// Only-A and only-B tensors whose C-order bytes are equal become renames: hashes first (on every
// thread, only for sizes found on both sides), then a byte comparison of each candidate pair.
void findRenames(Result& r, const Side& a, const Side& b, const Options& o, std::stop_token stop)
{
    struct Cand {
        std::size_t entry;
        const TensorEntry* t;
        const Checkpoint* c;
        std::uint64_t hash = 0;
        bool ok = false;
    };
    std::vector<Cand> as;
    std::vector<Cand> bs;
    for (std::size_t i = 0; i < r.entries.size(); ++i) {
        const Entry& e = r.entries[i];
        if (e.status == Status::OnlyA && e.tensorA.valid()) {
            as.push_back({i, &a.part(e.partA).tensors[e.tensorA], &a.part(e.partA)});
        } else if (e.status == Status::OnlyB && e.tensorB.valid()) {
            bs.push_back({i, &b.part(e.partB).tensors[e.tensorB], &b.part(e.partB)});
        }
    }
    std::unordered_map<std::uint64_t, int> sizes;  // bit 1: seen in A, bit 2: in B
    for (const auto& c : as) {
        sizes[c.t->nbytes] |= 1;
    }
    for (const auto& c : bs) {
        sizes[c.t->nbytes] |= 2;
    }
    std::vector<Cand*> work;
    for (auto* list : {&as, &bs}) {
        for (auto& c : *list) {
            if (c.t->nbytes > 0 && sizes[c.t->nbytes] == 3) {
                work.push_back(&c);
            }
        }
    }
    parallelFor(work.size(), threadCount(o), stop, [&](std::size_t i) {
        TensorBytes tb;
        if (detail::readTensorBytes(*work[i]->c, *work[i]->t, tb)) {
            work[i]->hash = hashBytes(tb.bytes);
            work[i]->ok = true;
        }
    });
    std::multimap<std::pair<std::uint64_t, std::uint64_t>, Cand*> byHash;
    for (auto& c : bs) {
        if (c.ok) {
            byHash.emplace(std::make_pair(c.t->nbytes, c.hash), &c);
        }
    }
    std::vector<bool> takenB(r.entries.size(), false);
    for (auto& ca : as) {
        if (!ca.ok || stop.stop_requested()) {
            continue;
        }
        auto [lo, hi] = byHash.equal_range({ca.t->nbytes, ca.hash});
        for (auto it = lo; it != hi; ++it) {
            Cand& cb = *it->second;
            if (takenB[cb.entry]) {
                continue;
            }
            TensorBytes x;
            TensorBytes y;
            if (!detail::readTensorBytes(*ca.c, *ca.t, x) || !detail::readTensorBytes(*cb.c, *cb.t, y) ||
                std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()) != 0) {
                continue;
            }
            r.comparedBytes += ca.t->nbytes;
            takenB[cb.entry] = true;
            Entry& e = r.entries[ca.entry];
            const Entry& eb = r.entries[cb.entry];
            e.status = Status::Renamed;
            e.keyB = eb.key;
            e.partB = eb.partB;
            e.nodeB = eb.nodeB;
            e.tensorB = eb.tensorB;
            e.changes = metadataChanges(*ca.t, *cb.t);
            e.values.compared = true;
            e.values.identicalBytes = ca.t->dtype == cb.t->dtype;
            e.values.allclose = true;
            break;
        }
    }
    std::vector<Entry> kept;
    kept.reserve(r.entries.size());
    for (std::size_t i = 0; i < r.entries.size(); ++i) {
        if (!takenB[i]) {
            kept.push_back(std::move(r.entries[i]));
        }
    }
    r.entries = std::move(kept);
}

void classify(Entry& e)
{
    if (e.status == Status::OnlyA || e.status == Status::OnlyB || e.status == Status::Renamed) {
        return;
    }
    e.status = e.changes == 0 ? Status::Equal : Status::Changed;
}

}  // namespace

std::string_view statusName(Status s)
{
    switch (s) {
    case Status::OnlyA:
        return "only_a";
    case Status::OnlyB:
        return "only_b";
    case Status::Renamed:
        return "renamed";
    case Status::Changed:
        return "changed";
    case Status::Equal:
        return "equal";
    }
    return "equal";
}

Side Side::of(const Checkpoint& c)
{
    // Not owned: the caller keeps `c` alive for as long as the side is used.
    return of(CheckpointPtr(std::shared_ptr<const void>{}, &c));
}

Side Side::of(CheckpointPtr c)
{
    Side s;
    s.path = c->path;
    s.format = std::string(formatName(c->format));
    s.parts.push_back(std::move(c));
    return s;
}

Expected<Result> compare(const Checkpoint& a, const Checkpoint& b, const Options& opts, std::stop_token stop,
                         const ProgressFn& progress)
{
    return compare(Side::of(a), Side::of(b), opts, stop, progress);
}

namespace {

// The subtree `select` names in every file of a side; a usage error when no file has it.
Expected<std::vector<detail::Root>> selectedRoots(const Side& side, const std::string& select)
{
    std::vector<detail::Root> roots;
    bool found = false;
    for (const auto& part : side.parts) {
        const NodeIndex n = part->find(select);
        found = found || n.valid();
        roots.push_back({part.get(), n});
    }
    if (!found) {
        Error e = makeError(ErrorCode::Usage, "no key path '" + select + "' to select");
        e.path = side.path;
        return e;
    }
    return roots;
}

TensorIndex tensorAt(const Checkpoint& c, NodeIndex n)
{
    return c.nodes[n].kind == NodeKind::Tensor ? c.nodes[n].tensor : TensorIndex{};
}

}  // namespace

Expected<Result> compare(const Side& a, const Side& b, const Options& opts, std::stop_token stop,
                         const ProgressFn& progress)
{
    auto rootsA = selectedRoots(a, opts.selectA);
    if (!rootsA) {
        return rootsA.error();
    }
    auto rootsB = selectedRoots(b, opts.selectB);
    if (!rootsB) {
        return rootsB.error();
    }
    Result r;
    r.pathA = a.path;
    r.pathB = b.path;
    r.selectA = opts.selectA;
    r.selectB = opts.selectB;
    r.rtol = opts.rtol;
    r.atol = opts.atol;
    std::vector<detail::Leaf> containersA;
    std::vector<detail::Leaf> containersB;
    auto leavesA = detail::collectLeaves(*rootsA, opts.alignPrefixes, r.prefixesA, &containersA);
    auto leavesB = detail::collectLeaves(*rootsB, opts.alignPrefixes, r.prefixesB, &containersB);
    if (r.prefixesA == r.prefixesB) {
        r.prefixesA.clear();  // both sides carry the same wrappers: nothing was aligned
        r.prefixesB.clear();
    }

    std::unordered_map<std::string_view, std::size_t> indexB;
    for (std::size_t i = 0; i < leavesB.size(); ++i) {
        indexB.emplace(leavesB[i].matchKey, i);
    }
    std::vector<bool> pairedB(leavesB.size(), false);
    r.entries.reserve(leavesA.size() + leavesB.size());
    for (const auto& la : leavesA) {
        Entry e;
        e.key = la.key;
        e.partA = la.part;
        e.nodeA = la.node;
        e.tensorA = tensorAt(a.part(la.part), la.node);
        if (auto it = indexB.find(la.matchKey); it != indexB.end()) {
            const auto& lb = leavesB[it->second];
            pairedB[it->second] = true;
            e.keyB = lb.key;
            e.partB = lb.part;
            e.nodeB = lb.node;
            e.tensorB = tensorAt(b.part(lb.part), lb.node);
            e.status = Status::Equal;
        } else {
            e.status = Status::OnlyA;
        }
        r.entries.push_back(std::move(e));
    }
    for (std::size_t i = 0; i < leavesB.size(); ++i) {
        if (!pairedB[i]) {
            Entry e;
            e.key = leavesB[i].key;
            e.partB = leavesB[i].part;
            e.nodeB = leavesB[i].node;
            e.tensorB = tensorAt(b.part(leavesB[i].part), leavesB[i].node);
            e.status = Status::OnlyB;
            r.entries.push_back(std::move(e));
        }
    }
    findRenames(r, a, b, opts, stop);
    // A container or object on both sides whose class changed: its leaves may all match, but a
    // program reading `ckpt["args"].lr` breaks on the dict that replaced the Namespace.
    std::unordered_map<std::string_view, const detail::Leaf*> containerB;
    for (const auto& c : containersB) {
        containerB.emplace(c.matchKey, &c);
    }
    for (const auto& ca : containersA) {
        const auto it = containerB.find(ca.matchKey);
        if (it == containerB.end()) {
            continue;
        }
        const detail::Leaf& cb = *it->second;
        std::string classA = detail::containerClass(a.part(ca.part), ca.node);
        std::string classB = detail::containerClass(b.part(cb.part), cb.node);
        if (classA != classB) {
            Entry e;
            e.status = Status::Changed;
            e.key = ca.key;
            e.keyB = cb.key;
            e.partA = ca.part;
            e.partB = cb.part;
            e.nodeA = ca.node;
            e.nodeB = cb.node;
            e.changes = kType;
            e.valueA = std::move(classA);
            e.valueB = std::move(classB);
            r.entries.push_back(std::move(e));
        }
    }

    // Pairs: non-tensor values by their repr, tensors by metadata and then by value.
    std::vector<Job> jobs;
    jobs.reserve(r.entries.size());
    std::uint64_t total = 0;
    for (auto& e : r.entries) {
        if (e.status != Status::Equal || (e.changes & kType) != 0) {
            continue;
        }
        const Checkpoint& ca = a.part(e.partA);
        const Checkpoint& cb = b.part(e.partB);
        const TensorEntry* ta = tensorOf(ca, e.nodeA);
        const TensorEntry* tb = tensorOf(cb, e.nodeB);
        if (ta == nullptr || tb == nullptr) {
            const std::string ra = leafRepr(ca, e.nodeA, kReprCompare);
            const std::string rb = leafRepr(cb, e.nodeB, kReprCompare);
            if ((ta == nullptr) != (tb == nullptr)) {
                e.changes |= kKind;
            } else if (std::string classA = leafClass(ca, e.nodeA), classB = leafClass(cb, e.nodeB);
                       ra == rb && classA != classB) {
                e.changes |= kType;  // shown as the two types, as a container's class change is
                e.valueA = std::move(classA);
                e.valueB = std::move(classB);
            } else if (ra != rb) {
                e.changes |= kValues;
            }
            continue;
        }
        e.changes = metadataChanges(*ta, *tb);
        // Nested tensors: equal buffers are equal tensors only with the same components.
        if (ta->form == pickle::TensorForm::Nested || tb->form == pickle::TensorForm::Nested) {
            auto ka = nestedComponents(ca, *ta);
            auto kb = nestedComponents(cb, *tb);
            // The same components in the jagged and the strided layout are different tensors to torch.
            if (!ka || !kb || *ka != *kb || isJagged(ca, *ta) != isJagged(cb, *tb)) {
                e.changes |= kShape;
            }
        }
        Job j;
        j.qa = quantizerOf(ca, *ta);
        j.qb = quantizerOf(cb, *tb);
        e.quantizerA = j.qa ? j.qa->text : std::string();
        e.quantizerB = j.qb ? j.qb->text : std::string();
        if (e.quantizerA != e.quantizerB) {
            e.changes |= kQuantizer;
        }
        j.entry = &e;
        j.ca = &ca;
        j.cb = &cb;
        j.ta = ta;
        j.tb = tb;
        jobs.push_back(std::move(j));
    }
    // Tensors read straight from the mappings are compared in one batch; the rest are gathered
    // into memory one pair at a time, so at most one such pair is held at once.
    std::vector<Job*> direct;
    std::vector<Job*> gathered;
    for (auto& j : jobs) {
        const bool contiguous = isCContiguous(j.ta->shape, j.ta->stride) && isCContiguous(j.tb->shape, j.tb->stride);
        const bool stored = j.ta->storage.valid() && j.tb->storage.valid() &&
                            j.ca->storages[j.ta->storage].inMapping() && j.cb->storages[j.tb->storage].inMapping();
        (contiguous && stored ? direct : gathered).push_back(&j);
        total += j.ta->nbytes;
    }
    std::atomic<std::uint64_t> done{0};
    std::vector<Job*> ready;
    for (Job* j : direct) {
        if (prepare(*j)) {
            ready.push_back(j);
        }
    }
    runJobs(ready, opts, stop, done, total, progress);
    for (Job* j : gathered) {
        if (stop.stop_requested()) {
            break;
        }
        std::vector<Job*> one;
        if (prepare(*j)) {
            one.push_back(j);
        }
        runJobs(one, opts, stop, done, total, progress);
    }
    if (stop.stop_requested()) {
        return makeError(ErrorCode::Cancelled, "comparison cancelled");
    }
    for (const auto& j : jobs) {
        const ValueDiff& v = j.entry->values;
        if (v.compared || v.identicalBytes) {
            r.comparedBytes += j.ta->nbytes;
        }
        if (!j.valueless && !v.identicalBytes && (v.differing > 0 || !v.compared)) {
            j.entry->changes |= kValues;
        }
        if (v.unreadable) {
            ++r.counts.unreadable;
        }
        if (v.compared && v.differing > 0) {
            ++r.counts.valuesDiffer;
            r.counts.valuesAllclose += v.allclose ? 1 : 0;
        }
    }
    for (auto& e : r.entries) {
        const bool typeChange = (e.changes & kType) != 0;  // valueA/B already name the classes
        if (!typeChange && e.nodeA.valid() && !e.tensorA.valid()) {
            e.valueA = leafRepr(a.part(e.partA), e.nodeA, kReprShow);
        }
        if (!typeChange && e.nodeB.valid() && !e.tensorB.valid()) {
            e.valueB = leafRepr(b.part(e.partB), e.nodeB, kReprShow);
        }
        classify(e);
        switch (e.status) {
        case Status::OnlyA:
            ++r.counts.onlyA;
            break;
        case Status::OnlyB:
            ++r.counts.onlyB;
            break;
        case Status::Renamed:
            ++r.counts.renamed;
            break;
        case Status::Changed:
            ++r.counts.changed;
            r.counts.storedDifferently += e.storedDifferently() ? 1 : 0;
            break;
        case Status::Equal:
            ++r.counts.equal;
            break;
        }
    }
    for (const Side* side : {&a, &b}) {
        for (const auto& part : side->parts) {
            if (auto ok = part->checkUnchanged(); !ok) {
                return part->withPath(ok.error());
            }
        }
    }
    return r;
}

Expected<DiffHistogram> differenceHistogram(const Checkpoint& a, TensorIndex ta, const Checkpoint& b, TensorIndex tb,
                                            std::size_t bins, std::stop_token stop)
{
    const TensorEntry& x = a.tensors.at(ta);
    const TensorEntry& y = b.tensors.at(tb);
    if (x.shape != y.shape || !detail::hasNumericValue(x.dtype) || !detail::hasNumericValue(y.dtype) ||
        isComplex(x.dtype) || isComplex(y.dtype)) {
        return makeError(ErrorCode::Unsupported, "no difference histogram for these two tensors");
    }
    TensorBytes bx;
    TensorBytes by;
    if (auto r = detail::readTensorBytes(a, x, bx); !r) {
        return a.withPath(r.error());
    }
    if (auto r = detail::readTensorBytes(b, y, by); !r) {
        return b.withPath(r.error());
    }
    DiffHistogram h;
    h.counts.assign(std::max<std::size_t>(bins, 1), 0);
    std::array<double, kDecodeParts> u{};
    std::array<double, kDecodeParts> v{};
    // Two passes: the widest finite difference, then the counts over [-widest, widest].
    double widest = 0;
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) {
            h.low = widest > 0 ? -widest : -1;
            h.high = widest > 0 ? widest : 1;
        }
        const double scale = static_cast<double>(h.counts.size()) / (h.high - h.low);
        for (std::uint64_t at = 0; at < x.numel; at += kDecodeParts) {
            if (stop.stop_requested()) {
                return makeError(ErrorCode::Cancelled, "histogram cancelled");
            }
            const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kDecodeParts, x.numel - at));
            detail::decode(x.dtype, bx.bytes, static_cast<std::size_t>(at), n, u.data());
            detail::decode(y.dtype, by.bytes, static_cast<std::size_t>(at), n, v.data());
            for (std::size_t i = 0; i < n; ++i) {
                const double d = u[i] - v[i];
                if (!std::isfinite(d)) {
                    continue;
                }
                if (pass == 0) {
                    widest = std::max(widest, std::fabs(d));
                } else {
                    const auto bin = static_cast<std::size_t>(
                        std::clamp((d - h.low) * scale, 0.0, static_cast<double>(h.counts.size() - 1)));
                    ++h.counts[bin];
                }
            }
        }
    }
    return h;
}

}  // namespace ckpt::diff
