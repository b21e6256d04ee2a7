// Plan -> safetensors (docs/format.md §10). Tensors only, C-contiguous, no sharing:
// - names: the key-path components joined by '.', so a state-dict root keeps its keys as they
//   are (`conv.weight`) and a nested one reads `model.conv.weight`;
// - tensors sharing a storage, as Hugging Face's save_model does: identical views (same storage,
//   offset, shape, stride, dtype; tied weights) are stored once, under the input embedding's
//   name for a known tied head (util/tied_pairs.h) and otherwise the first name in byte
//   order, and every other name is recorded in __metadata__ as `removed -> kept`; different views
//   of one storage are written as separate copies (the sharing is lost, and a note says so);
// - top-level ints, floats, strings and bools become __metadata__ strings, plus "format": "pt"
//   (transformers refuses files without it); anything else that is not a tensor is dropped and
//   counted in a note;
// - order: descending dtype alignment, then name (the reference writer's `prepare`);
// - contiguous tensors are copied straight from the input file; non-contiguous views are gathered
//   in 8 MiB chunks, so memory does not grow with the file.
#include "archive/safetensors.h"
#include "checkpoint/tensor_bytes.h"
#include "util/tied_pairs.h"
#include "write/output_file.h"
#include "write/writers.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

namespace ckpt::write::detail {

namespace {

using pickle::Kind;
using pickle::ValueId;

struct Named {
    std::string name;
    ValueId value;
};

// What the tree holds, flattened: tensors by name, top-level scalars as text, and what was dropped.
struct Flattened {
    std::vector<Named> tensors;
    std::vector<std::pair<std::string, std::string>> scalars;
    std::vector<std::string> dropped;
};

std::string pythonFloat(double d)
{
    if (d != d) {
        return "nan";
    }
    if (d == std::numeric_limits<double>::infinity() || d == -std::numeric_limits<double>::infinity()) {
        return d > 0 ? "inf" : "-inf";
    }
    std::array<char, 64> buf{};
    auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), d);
    std::string s(buf.data(), end);
    if (s.find_first_of(".e") == std::string::npos) {
        s += ".0";  // Python's repr: 1.0, not 1
    }
    return s;
}

std::optional<std::string> scalarText(const pickle::Value& v)
{
    switch (v.kind) {
    case Kind::Bool:
        return std::string(v.flag ? "True" : "False");
    case Kind::Int:
        return std::to_string(v.i);
    case Kind::Float:
        return pythonFloat(v.f);
    case Kind::Str:
        return v.text;
    default:
        return std::nullopt;
    }
}

std::string join(const std::string& prefix, const std::string& component)
{
    return prefix.empty() ? component : prefix + "." + component;
}

// Depth-first over dicts, lists, tuples and opaque objects' dict state, with an explicit stack (hostile
// trees can be very deep) and the current path marked so a cycle is not followed.
Flattened flatten(const pickle::Arena& arena, ValueId root)
{
    Flattened out;
    struct Frame {
        ValueId id;
        std::string name;
        int depth;
        bool leave;
    };
    std::vector<bool> onPath(arena.size(), false);
    std::vector<Frame> stack{{root, "", 0, false}};
    while (!stack.empty()) {
        Frame f = std::move(stack.back());
        stack.pop_back();
        if (f.leave) {
            onPath[f.id.v] = false;
            continue;
        }
        const pickle::Value& v = arena[f.id];
        if (v.kind == Kind::Tensor) {
            out.tensors.push_back({f.name.empty() ? std::string("tensor") : f.name, f.id});
            continue;
        }
        std::vector<std::pair<std::string, ValueId>> children;
        if (v.kind == Kind::Dict) {
            for (std::size_t k = 0; k + 1 < v.items.size(); k += 2) {
                children.emplace_back(pickle::keyText(arena, v.items[k]), v.items[k + 1]);
            }
        } else if (v.kind == Kind::List || v.kind == Kind::Tuple) {
            for (std::size_t k = 0; k < v.items.size(); ++k) {
                children.emplace_back(std::to_string(k), v.items[k]);
            }
        } else if (v.kind == Kind::Object && pickle::objectOf(arena, f.id).state.valid() &&
                   arena[pickle::objectOf(arena, f.id).state].kind == Kind::Dict) {
            const pickle::Value& state = arena[pickle::objectOf(arena, f.id).state];
            for (std::size_t k = 0; k + 1 < state.items.size(); k += 2) {
                children.emplace_back(pickle::keyText(arena, state.items[k]), state.items[k + 1]);
            }
        } else {
            if (f.depth == 1) {
                if (auto text = scalarText(v)) {
                    out.scalars.emplace_back(f.name, *text);
                    continue;
                }
            }
            if (v.kind != Kind::None || f.depth == 1) {
                out.dropped.push_back(f.name.empty() ? std::string("the root") : f.name);
            }
            continue;
        }
        if (onPath[f.id.v]) {
            out.dropped.push_back(f.name);
            continue;
        }
        onPath[f.id.v] = true;
        stack.push_back({f.id, "", 0, true});
        // reversed, so children come off the stack in their own order
        for (std::size_t k = children.size(); k-- > 0;) {
            stack.push_back({children[k].second, join(f.name, children[k].first), f.depth + 1, false});
        }
    }
    return out;
}

// One tensor as it will be written.
struct OutTensor {
    std::string name;
    DType dtype = DType::Unknown;
    std::uint32_t storage = 0;  // index into plan.storages
    std::int64_t offset = 0;    // elements into that storage
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> stride;
    std::uint64_t nbytes = 0;
    bool contiguous = true;

    // by value: the keys outlive reallocations of the vector that holds the tensors
    [[nodiscard]] auto viewKey() const { return std::make_tuple(storage, offset, shape, stride, dtype); }
};

const char* formName(pickle::TensorForm f)
{
    switch (f) {
    case pickle::TensorForm::Quantized:
        return "a quantized tensor";
    case pickle::TensorForm::Sparse:
        return "a sparse tensor";
    case pickle::TensorForm::Meta:
        return "a meta tensor: the file holds no data for it (saved from the meta device), and safetensors "
               "stores data";
    case pickle::TensorForm::Wrapper:
        return "a tensor subclass without storage";
    case pickle::TensorForm::DeviceFromCpu:
        return "a device tensor rebuilt from CPU data";
    case pickle::TensorForm::Nested:
        return "a nested tensor";
    default:
        return "a tensor";
    }
}

Error unsupported(const std::string& name, const std::string& why)
{
    return makeError(ErrorCode::Unsupported, "cannot write tensor '" + name + "' as safetensors: " + why);
}

Expected<OutTensor> describeTensor(const transform::Plan& plan, const Named& n)
{
    const pickle::TensorInfo& t = pickle::tensorOf(plan.arena, n.value);
    if (t.form != pickle::TensorForm::Strided || !t.storage.valid()) {
        return unsupported(n.name, std::string("it is ") + formName(t.form));
    }
    if (safetensorsName(t.dtype).empty()) {
        return unsupported(n.name, "safetensors has no " + std::string(dtypeName(t.dtype)) + " type");
    }
    const auto storage = static_cast<std::uint32_t>(plan.arena[t.storage].i);
    if (storage >= plan.storages.size()) {
        return makeError(ErrorCode::Internal, "tensor '" + n.name + "' names a storage the plan does not have");
    }
    if (t.shape.size() != t.stride.size()) {
        return makeError(ErrorCode::Corrupt, "tensor '" + n.name + "' has a shape and a stride of different ranks");
    }
    OutTensor o{n.name, t.dtype, storage, t.storageOffset, t.shape, t.stride, 0, true};
    const std::uint64_t esize = elementSize(t.dtype);
    std::uint64_t numel = 1;
    std::uint64_t lastElement = 0;  // the furthest element the view reaches, relative to its offset
    bool overflow = t.storageOffset < 0;
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
        if (t.shape[d] < 0 || t.stride[d] < 0) {
            overflow = true;
            break;
        }
        const auto size = static_cast<std::uint64_t>(t.shape[d]);
        overflow |= __builtin_mul_overflow(numel, size, &numel);
        if (size > 0) {
            std::uint64_t reach = 0;
            overflow |= __builtin_mul_overflow(size - 1, static_cast<std::uint64_t>(t.stride[d]), &reach);
            overflow |= __builtin_add_overflow(lastElement, reach, &lastElement);
        }
    }
    overflow |= __builtin_mul_overflow(numel, esize, &o.nbytes);
    if (overflow) {
        return makeError(ErrorCode::Corrupt, "tensor '" + n.name + "' has a negative or overflowing shape/stride");
    }
    const std::uint64_t storageElements = plan.storages[storage].nbytes / esize;
    if (numel > 0 && (static_cast<std::uint64_t>(t.storageOffset) >= storageElements ||
                      lastElement >= storageElements - static_cast<std::uint64_t>(t.storageOffset))) {
        return makeError(ErrorCode::Corrupt, "tensor '" + n.name + "' reaches past the end of its storage");
    }
    o.contiguous = isCContiguous(t.shape, t.stride);
    return o;
}

// The reference writer sorts by safetensors' alignment order, descending.
int alignmentRank(DType t)
{
    const auto rank = safetensorsAlignmentRank(t);
    return rank ? static_cast<int>(*rank) : static_cast<int>(elementSize(t)) * 4;
}

// Tied weights (identical views) stored once, under keptTiedName's choice; other names
// become `removed -> kept` metadata. Different views of one storage are each materialised, with a note.
std::vector<OutTensor> dedupe(std::vector<OutTensor> tensors, std::vector<std::pair<std::string, std::string>>& aliases,
                              std::vector<std::string>& notes)
{
    std::sort(tensors.begin(), tensors.end(), [](const OutTensor& a, const OutTensor& b) { return a.name < b.name; });
    using ViewKey = decltype(std::declval<const OutTensor&>().viewKey());
    std::map<ViewKey, std::vector<std::string>> namesByView;
    for (const auto& t : tensors) {
        if (t.nbytes > 0) {
            namesByView[t.viewKey()].push_back(t.name);
        }
    }
    std::map<ViewKey, std::string> keptByView;
    for (auto& [view, names] : namesByView) {
        if (names.size() > 1) {
            keptByView.emplace(view, keptTiedName(std::move(names)));
        }
    }
    std::vector<OutTensor> kept;
    std::map<std::uint32_t, std::vector<std::string>> viewsPerStorage;
    for (auto& t : tensors) {
        if (t.nbytes > 0) {
            if (auto it = keptByView.find(t.viewKey()); it != keptByView.end() && it->second != t.name) {
                const std::string& keep = it->second;
                aliases.emplace_back(t.name, keep);
                notes.push_back("'" + t.name + "' is the same tensor as '" + keep + "': stored once as '" + keep +
                                "', alias recorded in __metadata__");
                continue;
            }
            viewsPerStorage[t.storage].push_back(t.name);
        }
        kept.push_back(std::move(t));
    }
    for (const auto& [storage, names] : viewsPerStorage) {
        if (names.size() < 2) {
            continue;
        }
        std::string list;
        for (const auto& n : names) {
            list += (list.empty() ? "'" : ", '") + n + "'";
        }
        notes.push_back("tensors " + list +
                        " are different views of one storage: each is written as its own copy "
                        "(safetensors cannot share memory)");
    }
    return kept;
}

// Writes a contiguous tensor from memory in chunks, so cancellation is seen during big ones.
Expected<void> writeChunked(ByteSink& out, Bytes data, const std::string& target, ProgressMeter& meter,
                            const std::stop_token& stop)
{
    while (!data.empty()) {
        if (stop.stop_requested()) {
            return cancelled(target);
        }
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(data.size(), kChunk));
        if (auto ok = writeBytes(out, data.first(n), target); !ok) {
            return ok;
        }
        meter.advance(n);
        data = data.subspan(n);
    }
    return {};
}

// Strided gather of a non-contiguous view into C order, through one chunk-sized buffer.
Expected<void> gather(ByteSink& out, Bytes storage, const OutTensor& t, const std::string& target, ProgressMeter& meter,
                      const std::stop_token& stop)
{
    const std::uint64_t esize = elementSize(t.dtype);
    const CRuns runs = cOrderRuns(t.shape, t.stride, static_cast<std::size_t>(esize));
    // Runs longer than a chunk go straight from the mapping, so the buffer never exceeds a chunk.
    const bool direct = runs.runBytes > kChunk;
    std::vector<std::byte> buf(direct ? 0 : static_cast<std::size_t>(std::min(kChunk, t.nbytes)));
    std::size_t fill = 0;
    auto flush = [&]() -> Expected<void> {
        if (stop.stop_requested()) {
            return cancelled(target);
        }
        if (auto ok = writeBytes(out, Bytes(buf.data(), fill), target); !ok) {
            return ok;
        }
        meter.advance(fill);
        fill = 0;
        return {};
    };
    Expected<void> result;
    forEachCOrderRun(runs, static_cast<std::uint64_t>(t.offset) * esize, [&](std::uint64_t at, std::uint64_t n) {
        const Bytes run = storage.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(n));
        if (direct) {
            result = writeChunked(out, run, target, meter, stop);
            return result.ok();
        }
        if (fill + run.size() > buf.size()) {
            if (result = flush(); !result) {
                return false;
            }
        }
        std::memcpy(buf.data() + fill, run.data(), run.size());
        fill += run.size();
        return true;
    });
    if (!result) {
        return result;
    }
    return fill > 0 ? flush() : Expected<void>{};
}

Expected<void> writeTensorData(const Checkpoint& in, const transform::Plan& plan, const OutTensor& t, ByteSink& out,
                               const std::string& target, ProgressMeter& meter, const std::stop_token& stop,
                               std::vector<std::byte>& scratch)
{
    if (t.nbytes == 0) {
        return {};
    }
    const transform::OutStorage& s = plan.storages[t.storage];
    const std::uint64_t start = static_cast<std::uint64_t>(t.offset) * elementSize(t.dtype);
    if (s.computed && t.contiguous && start == 0 && s.byteOffset == 0 && t.nbytes == s.computed->size()) {
        Expected<void> written;
        auto made = s.computed->stream(in, [&](Bytes piece) {
            written = writeChunked(out, piece, target, meter, stop);
            return written.ok();
        });
        return written ? made : written;
    }
    if (t.contiguous && !s.madeByPlan()) {
        if (auto span = inputSpanOf(in, s)) {
            return copyFromInput(span->fd, span->offset + start, t.nbytes, out, target, meter, stop);
        }
        // A deflated member, inflated a chunk at a time (a strided view below needs it whole,
        // which storageData allows only within the memory budget).
        Expected<void> written;
        auto read = in.streamStorage(s.source, s.byteOffset + start, t.nbytes, [&](Bytes piece) {
            written = writeChunked(out, piece, target, meter, stop);
            return written.ok();
        });
        return written ? read : written;
    }
    auto bytes = sourceBytes(in, s, scratch);
    if (!bytes) {
        return bytes.error();
    }
    if (t.contiguous) {
        return writeChunked(out, bytes->subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(t.nbytes)),
                            target, meter, stop);
    }
    return gather(out, *bytes, t, target, meter, stop);
}

}  // namespace

Expected<std::uint64_t> writeSafetensors(const Checkpoint& in, const transform::Plan& plan, ByteSink& out,
                                         const std::string& target,
                                         const std::function<void(const WriteProgress&)>& progress,
                                         const std::stop_token& stop, std::vector<std::string>& notes, bool allowExpand)
{
    if (!in.byteorder.empty() && in.byteorder != "little") {
        return makeError(ErrorCode::Unsupported, "the input's tensors are " + in.byteorder +
                                                     "-endian; safetensors holds little-endian data only");
    }
    Flattened flat = flatten(plan.arena, plan.root);
    std::vector<OutTensor> tensors;
    std::set<std::string> names;
    for (const auto& n : flat.tensors) {
        if (!names.insert(n.name).second) {
            return makeError(ErrorCode::Unsupported, "two tensors would both be named '" + n.name +
                                                         "' in safetensors (key paths joined by '.')");
        }
        auto t = describeTensor(plan, n);
        if (!t) {
            return t.error();
        }
        if (auto ok = checkSourceRange(in, plan.storages[t->storage]); !ok) {
            return ok.error();
        }
        tensors.push_back(std::move(*t));
    }
    std::vector<std::pair<std::string, std::string>> metadata;
    tensors = dedupe(std::move(tensors), metadata, notes);
    std::set<std::string> metaKeys;
    for (const auto& [k, v] : metadata) {
        metaKeys.insert(k);
    }
    for (auto& [k, v] : flat.scalars) {
        if (metaKeys.insert(k).second) {
            metadata.emplace_back(k, v);
        }
    }
    if (metaKeys.insert("format").second) {
        metadata.emplace_back("format", "pt");
    }
    if (!flat.dropped.empty()) {
        std::string list;
        for (std::size_t i = 0; i < flat.dropped.size() && i < 5; ++i) {
            list += (i == 0 ? "'" : ", '") + flat.dropped[i] + "'";
        }
        if (flat.dropped.size() > 5) {
            list += ", ...";
        }
        notes.push_back(
            std::to_string(flat.dropped.size()) +
            " non-tensor value(s) not kept (safetensors holds tensors and top-level scalars only): " + list);
    }
    for (const auto& t : tensors) {
        if (!t.contiguous) {
            notes.push_back("'" + t.name + "' is a non-contiguous view: written as a contiguous copy");
        }
    }

    std::stable_sort(tensors.begin(), tensors.end(), [](const OutTensor& a, const OutTensor& b) {
        const int ra = alignmentRank(a.dtype);
        const int rb = alignmentRank(b.dtype);
        return ra != rb ? ra > rb : a.name < b.name;
    });
    std::vector<archive::SafetensorsOut> layout;
    layout.reserve(tensors.size());
    std::uint64_t total = 0;
    for (const auto& t : tensors) {
        layout.push_back({t.name, t.dtype, t.shape, t.nbytes});
        total += t.nbytes;
    }
    if (auto ok = checkExpansion(in, total, allowExpand); !ok) {
        return ok.error();
    }
    auto header = archive::safetensorsHeader(layout, metadata);
    if (!header) {
        return header.error();
    }
    total += header->size();
    ProgressMeter meter(progress, total);
    out.expectSize(total);
    if (auto ok = writeBytes(out, asBytes(*header), target); !ok) {
        return ok.error();
    }
    meter.advance(header->size());
    std::vector<std::byte> scratch;
    for (const auto& t : tensors) {
        if (stop.stop_requested()) {
            return cancelled(target);
        }
        if (auto ok = writeTensorData(in, plan, t, out, target, meter, stop, scratch); !ok) {
            return ok.error();
        }
    }
    meter.finish();
    return total;
}

}  // namespace ckpt::write::detail
