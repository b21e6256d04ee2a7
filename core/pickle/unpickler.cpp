#include "pickle/unpickler.h"

#include "pickle/compat.h"
#include "pickle/opcodes.h"
#include "pickle/text.h"
#include "util/device_name.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <utility>

namespace ckpt::pickle {
namespace {

// Callables the unpickler turns into typed values instead of opaque Objects.
enum class Known : std::uint8_t {
    Other,
    OrderedDict,
    Size,
    Device,
    CodecsEncode,
    BytesType,
    ByteArray,
    SetType,
    FrozenSetType,
    RebuildTensor,
    RebuildTensorV2,
    RebuildTensorV3,
    RebuildParameter,
    RebuildParameterWithState,
    RebuildQTensor,
    RebuildSparse,
    RebuildSparseCsr,
    RebuildMeta,
    RebuildWrapperSubclass,
    RebuildFromCpu,
    RebuildFromNumpy,
    RebuildXla,
    RebuildNested,
    RebuildFromTypeV2,
    LegacyTensorClass,
};

Known classify(const GlobalRef& g)
{
    const std::string& m = g.module;
    const std::string& n = g.name;
    if (m == "torch._utils") {
        static constexpr std::pair<std::string_view, Known> kRebuilds[] = {
            {"_rebuild_tensor", Known::RebuildTensor},
            {"_rebuild_tensor_v2", Known::RebuildTensorV2},
            {"_rebuild_tensor_v3", Known::RebuildTensorV3},
            {"_rebuild_parameter", Known::RebuildParameter},
            {"_rebuild_parameter_with_state", Known::RebuildParameterWithState},
            {"_rebuild_qtensor", Known::RebuildQTensor},
            {"_rebuild_sparse_tensor", Known::RebuildSparse},
            {"_rebuild_sparse_csr_tensor", Known::RebuildSparseCsr},
            {"_rebuild_meta_tensor_no_storage", Known::RebuildMeta},
            {"_rebuild_wrapper_subclass", Known::RebuildWrapperSubclass},
            {"_rebuild_device_tensor_from_cpu_tensor", Known::RebuildFromCpu},
            {"_rebuild_device_tensor_from_numpy", Known::RebuildFromNumpy},
            {"_rebuild_xla_tensor", Known::RebuildXla},
            {"_rebuild_nested_tensor", Known::RebuildNested},
        };
        for (const auto& [name, k] : kRebuilds) {
            if (n == name) {
                return k;
            }
        }
        return Known::Other;
    }
    if (m == "torch") {
        if (n == "Size") {
            return Known::Size;
        }
        if (n == "device") {
            return Known::Device;
        }
        if (n.ends_with("Tensor")) {
            return Known::LegacyTensorClass;
        }
        return Known::Other;
    }
    if (m == "torch.cuda" && n.ends_with("Tensor")) {
        return Known::LegacyTensorClass;
    }
    if (m == "torch._tensor") {
        if (n == "_rebuild_from_type_v2") {
            return Known::RebuildFromTypeV2;
        }
        return n == "Tensor" ? Known::LegacyTensorClass : Known::Other;
    }
    if (m == "collections" && n == "OrderedDict") {
        return Known::OrderedDict;
    }
    if (m == "_codecs" && n == "encode") {
        return Known::CodecsEncode;
    }
    if (m == "builtins") {
        if (n == "bytes") {
            return Known::BytesType;
        }
        if (n == "bytearray") {
            return Known::ByteArray;
        }
        if (n == "set") {
            return Known::SetType;
        }
        if (n == "frozenset") {
            return Known::FrozenSetType;
        }
    }
    return Known::Other;
}

bool checkedMul(std::int64_t a, std::int64_t b, std::int64_t& out)
{
    return !__builtin_mul_overflow(a, b, &out);
}

bool checkedAdd(std::int64_t a, std::int64_t b, std::int64_t& out)
{
    return !__builtin_add_overflow(a, b, &out);
}

// The arguments of a recognised call, copied out of the arena (creating values may move it)
// without a heap allocation: no recognised callable takes more than eight.
struct Args {
    std::array<ValueId, 8> v{};
    std::size_t n = 0;
    bool fits = true;
    Args(const std::vector<ValueId>& items)  // NOLINT(google-explicit-constructor)
    {
        fits = items.size() <= v.size();
        n = fits ? items.size() : 0;
        std::copy_n(items.begin(), n, v.begin());
    }
    [[nodiscard]] std::size_t size() const { return n; }
    ValueId operator[](std::size_t i) const { return v[i]; }
};

std::string dimsText(const std::vector<std::int64_t>& dims)
{
    std::string s = "[";
    for (std::size_t n = 0; n < dims.size() && n < 16; ++n) {
        s += (n != 0 ? ", " : "") + std::to_string(dims[n]);
    }
    return s + (dims.size() > 16 ? ", ...]" : "]");
}

class Machine {
public:
    Machine(Bytes data, Arena& arena, const UnpickleOptions& opts)
        : data_(data), a_(arena), opts_(opts), budget_(opts.budget.value_or(MemoryBudget{data.size()})),
          knownBase_(arena.globals.size())
    {
        arena.tensors.reserve(arena.tensors.size() + data.size() / 256);  // a v2 call takes ~130 bytes
        stack_.reserve(64);
    }

    Expected<UnpickleResult> run();

private:
    struct Seen {
        std::uint32_t index;
        ValueId value;
    };

    // ---- errors -------------------------------------------------------------------------------
    bool fail(ErrorCode code, std::string message)
    {
        if (!error_) {
            error_ = makeError(code, std::move(message), opStart_);
        }
        return false;
    }
    [[nodiscard]] std::string opName() const
    {
        const auto n = op::name(op_);
        return n.empty() ? "opcode" : std::string(n);
    }
    void warn(std::string w)
    {
        if (result_.warnings.size() < 100) {
            result_.warnings.push_back(std::move(w));
        }
    }

    // ---- input --------------------------------------------------------------------------------
    [[nodiscard]] std::size_t remaining() const { return data_.size() - pos_; }
    bool need(std::uint64_t n)
    {
        if (n > remaining()) {
            return fail(ErrorCode::Truncated, opName() + " needs " + std::to_string(n) + " bytes but only " +
                                                  std::to_string(remaining()) + " remain (truncated)");
        }
        return true;
    }
    std::uint64_t readLE(std::size_t width)
    {
        const std::uint64_t v = loadLE(data_, pos_, width);
        pos_ += width;
        return v;
    }
    std::string_view take(std::size_t n)
    {
        std::string_view s(reinterpret_cast<const char*>(data_.data()) + pos_, n);  // NOLINT
        pos_ += n;
        return s;
    }
    bool readLine(std::string_view& line)
    {
        const std::string_view rest = asText(data_.subspan(pos_));
        const auto nl = rest.find('\n');
        if (nl == std::string_view::npos) {
            return fail(ErrorCode::Truncated, opName() + " argument has no end of line (truncated)");
        }
        line = rest.substr(0, nl);
        pos_ += nl + 1;
        return true;
    }
    // A length-prefixed argument: the declared size is checked before anything is allocated.
    bool readCounted(std::size_t width, std::string_view& out)
    {
        if (!need(width)) {
            return false;
        }
        std::uint64_t n = readLE(width);
        if (width == 4 && (op_ == op::BINSTRING || op_ == op::LONG4) && (n & 0x80000000ULL) != 0) {
            return fail(ErrorCode::Corrupt, opName() + " has a negative byte count");
        }
        if (n > remaining()) {
            return fail(ErrorCode::Truncated, opName() + " declares " + std::to_string(n) + " bytes but only " +
                                                  std::to_string(remaining()) + " remain (truncated)");
        }
        out = take(static_cast<std::size_t>(n));
        return true;
    }

    // ---- stack --------------------------------------------------------------------------------
    [[nodiscard]] std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
    bool pop(ValueId& out)
    {
        if (stack_.size() <= floor()) {
            return fail(ErrorCode::Corrupt, "stack underflow at " + opName());
        }
        out = stack_.back();
        stack_.pop_back();
        return true;
    }
    bool top(ValueId& out)
    {
        if (stack_.size() <= floor()) {
            return fail(ErrorCode::Corrupt, "stack underflow at " + opName());
        }
        out = stack_.back();
        return true;
    }
    // Items above the innermost MARK, which is removed.
    bool popMark(std::vector<ValueId>& out)
    {
        if (marks_.empty()) {
            return fail(ErrorCode::Corrupt, opName() + " without a MARK");
        }
        const std::size_t m = marks_.back();
        marks_.pop_back();
        out.assign(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
        stack_.resize(m);
        return true;
    }
    void push(ValueId v) { stack_.push_back(v); }

    // ---- memo ---------------------------------------------------------------------------------
    // Dense indices (what every pickler writes) live in a vector; an index far beyond the input
    // size can only come from a hand-made pickle and goes to a hash map, so LONG_BINPUT 0xFFFFFFF0
    // costs one entry, not four billion.
    bool memoPut(std::uint64_t key)
    {
        ValueId v;
        if (!top(v)) {
            return false;
        }
        if (key < data_.size() + 256) {
            if (key >= memo_.size()) {
                memo_.resize(static_cast<std::size_t>(key) + 1);
            }
            memoCount_ += memo_[key].valid() ? 0 : 1;
            memo_[key] = v;
        } else {
            memoCount_ += memoFar_.insert_or_assign(key, v).second ? 1 : 0;
        }
        return true;
    }
    bool memoGet(std::uint64_t key)
    {
        if (key < memo_.size() && memo_[key].valid()) {
            push(memo_[key]);
            return true;
        }
        if (auto it = memoFar_.find(key); it != memoFar_.end()) {
            push(it->second);
            return true;
        }
        return fail(ErrorCode::Corrupt, "memo key " + std::to_string(key) + " missing");
    }
    bool lineKey(std::uint64_t& key)
    {
        std::string_view line;
        if (!readLine(line)) {
            return false;
        }
        auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), key);
        if (ec != std::errc() || p != line.data() + line.size() || line.empty()) {
            return fail(ErrorCode::Corrupt, "invalid memo key in " + opName());
        }
        return true;
    }

    // ---- values -------------------------------------------------------------------------------
    const Value& val(ValueId id) const { return a_[id]; }
    Kind kindOf(ValueId id) const { return a_[id].kind; }
    ValueId pushNew(ValueId id)
    {
        push(id);
        return id;
    }
    ValueId makeInt(std::string_view le);
    bool parseDecimal(std::string_view text, ValueId& out);
    ValueId makeGlobal(std::string module, std::string name);
    Known knownOf(ValueId id);

    // ---- opcode groups ------------------------------------------------------------------------
    bool step();
    bool opTextInt(bool isLong);
    bool opFloatText();
    bool opString();
    bool opCall(ValueId callable, ValueId args, ObjectForm form, ValueId kwargs = {});
    bool opBuild();
    bool addItems(ValueId target, const std::vector<ValueId>& items, bool pairs);
    bool opAddSetItems();
    bool persistentLoad(ValueId pid);

    std::optional<ValueId> callKnown(Known k, ValueId callable, ValueId args, ObjectForm form);
    std::optional<ValueId> rebuildStrided(Known k, ValueId callable, ValueId args);
    std::optional<ValueId> rebuildOther(Known k, ValueId callable, ValueId args);
    std::optional<ValueId> rebuildParameter(Known k, ValueId args);
    std::optional<ValueId> rebuildFromType(ValueId args);
    bool validateGeometry(const std::string& fn, TensorInfo& t);
    bool legacyTensorBuild(ValueId target, ValueId state);

    // Argument helpers for rebuild calls: false when the argument is not of that type.
    bool intArg(ValueId id, std::int64_t& out) const
    {
        const Value& v = a_[id];
        if (v.kind == Kind::Int) {
            out = v.i;
            return true;
        }
        if (v.kind == Kind::Bool) {  // Python bools are ints
            out = v.flag ? 1 : 0;
            return true;
        }
        return false;
    }
    bool boolArg(ValueId id, bool& out) const
    {
        const Value& v = a_[id];
        if (v.kind == Kind::Bool || v.kind == Kind::Int) {
            out = v.kind == Kind::Bool ? v.flag : v.i != 0;
            return true;
        }
        return false;
    }
    bool dimsArg(ValueId id, std::vector<std::int64_t>& out) const
    {
        const Value& v = a_[id];
        if (v.kind != Kind::Tuple && v.kind != Kind::Size && v.kind != Kind::List) {
            return false;
        }
        out.clear();
        out.reserve(v.items.size());
        for (ValueId item : v.items) {
            std::int64_t d = 0;
            if (!intArg(item, d)) {
                return false;
            }
            out.push_back(d);
        }
        return true;
    }
    std::string textArg(ValueId id) const
    {
        const Value& v = a_[id];
        return v.kind == Kind::Str || v.kind == Kind::Bytes ? v.text : std::string();
    }

    Bytes data_;
    Arena& a_;
    const UnpickleOptions& opts_;
    MemoryBudget budget_;
    std::size_t knownBase_;
    std::vector<Known> knownCache_;
    std::size_t pos_ = 0;
    std::size_t opStart_ = 0;
    std::uint8_t op_ = 0;
    std::vector<ValueId> stack_;
    std::vector<std::size_t> marks_;
    std::vector<ValueId> memo_;
    std::unordered_map<std::uint64_t, ValueId> memoFar_;
    std::size_t memoCount_ = 0;
    std::unordered_map<std::string, Seen> storageByKey_;
    bool storageByKeyBuilt_ = false;
    std::vector<ValueId> scratch_;
    UnpickleResult result_;
    std::optional<Error> error_;
    bool stopped_ = false;
};

ValueId Machine::makeInt(std::string_view le)
{
    std::string norm = detail::normalizeLong(le);
    if (norm.size() <= 8) {
        std::uint64_t u = 0;
        for (std::size_t n = 0; n < norm.size(); ++n) {
            u |= static_cast<std::uint64_t>(static_cast<unsigned char>(norm[n])) << (8 * n);
        }
        if (!norm.empty() && norm.size() < 8 && (static_cast<unsigned char>(norm.back()) & 0x80U) != 0) {
            u |= ~0ULL << (8 * norm.size());  // sign-extend
        }
        return a_.integer(static_cast<std::int64_t>(u));
    }
    Value v;
    v.kind = Kind::BigInt;
    v.text = std::move(norm);
    return a_.add(std::move(v));
}

bool Machine::parseDecimal(std::string_view text, ValueId& out)
{
    while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) {
        text.remove_suffix(1);
    }
    while (!text.empty() && text.front() == ' ') {
        text.remove_prefix(1);
    }
    std::int64_t n = 0;
    const char* b = text.data();
    const char* e = b + text.size();
    if (b != e && *b == '+') {
        ++b;
    }
    auto [p, ec] = std::from_chars(b, e, n);
    if (ec == std::errc() && p == e) {
        out = a_.integer(n);
        return true;
    }
    std::string le;
    std::string why;
    if (!detail::decimalToLong(text, le, why)) {
        return fail(why.find("digits") != std::string::npos ? ErrorCode::Limit : ErrorCode::Corrupt,
                    opName() + ": " + why);
    }
    out = makeInt(le);
    return true;
}

ValueId Machine::makeGlobal(std::string module, std::string name)
{
    detail::mapToPython3(module, name, result_.protocol);
    if (module == "torch") {
        // Only the canonical spelling is a dtype: `torch.complex` and friends are functions.
        if (auto t = dtypeFromName(name); t && dtypeName(*t) == name) {
            return a_.dtype(*t);
        }
    }
    return a_.global(GlobalRef{std::move(module), std::move(name)});
}

Known Machine::knownOf(ValueId id)
{
    const Value& v = a_[id];
    if (v.kind != Kind::Global) {
        return Known::Other;
    }
    const auto gi = static_cast<std::size_t>(v.i);
    if (gi < knownBase_) {
        return classify(a_.globals[gi]);
    }
    const std::size_t slot = gi - knownBase_;
    while (knownCache_.size() <= slot) {
        knownCache_.push_back(classify(a_.globals[knownBase_ + knownCache_.size()]));
    }
    return knownCache_[slot];
}

Expected<UnpickleResult> Machine::run()
{
    while (!stopped_) {
        // The whole arena counts: a legacy file's pickles share one arena and one budget.
        if (a_.chargedBytes() > budget_.limit()) {
            if (!error_) {
                error_ = budget_.exceeded();
                error_->offset = opStart_;
            }
            break;
        }
        if (!step()) {
            break;
        }
    }
    if (error_) {
        return *error_;
    }
    return std::move(result_);
}

bool Machine::step()
{
    opStart_ = pos_;
    if (pos_ >= data_.size()) {
        op_ = op::STOP;
        return fail(ErrorCode::Truncated, "pickle ends before STOP (truncated)");
    }
    op_ = std::to_integer<std::uint8_t>(data_[pos_++]);
    result_.opcodesSeen.set(op_);
    std::string_view s;
    ValueId x;
    ValueId y;
    ValueId z;
    switch (op_) {
    case op::PROTO: {
        if (!need(1)) {
            return false;
        }
        const auto p = static_cast<int>(readLE(1));
        if (p > 5) {
            return fail(ErrorCode::Unsupported, "unsupported pickle protocol " + std::to_string(p));
        }
        result_.protocol = p;
        return true;
    }
    case op::FRAME: {
        if (!need(8)) {
            return false;
        }
        const std::uint64_t n = readLE(8);
        if (n > remaining()) {
            return fail(ErrorCode::Truncated, "FRAME declares " + std::to_string(n) + " bytes but only " +
                                                  std::to_string(remaining()) + " remain (truncated)");
        }
        return true;
    }
    case op::STOP:
        if (!pop(x)) {
            return false;
        }
        result_.root = x;
        result_.consumed = pos_;
        stopped_ = true;
        return true;
    case op::MARK:
        marks_.push_back(stack_.size());
        return true;
    case op::POP:
        if (stack_.size() > floor()) {
            stack_.pop_back();
            return true;
        }
        if (!marks_.empty()) {
            marks_.pop_back();
            return true;
        }
        return fail(ErrorCode::Corrupt, "stack underflow at POP");
    case op::POP_MARK:
        return popMark(scratch_);
    case op::DUP:
        if (!top(x)) {
            return false;
        }
        push(x);
        return true;

    // ---- scalars ----
    case op::NONE:
        push(a_.none());
        return true;
    case op::NEWTRUE:
        push(a_.boolean(true));
        return true;
    case op::NEWFALSE:
        push(a_.boolean(false));
        return true;
    case op::BININT:
        if (!need(4)) {
            return false;
        }
        push(a_.integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(readLE(4)))));
        return true;
    case op::BININT1:
        if (!need(1)) {
            return false;
        }
        push(a_.integer(static_cast<std::int64_t>(readLE(1))));
        return true;
    case op::BININT2:
        if (!need(2)) {
            return false;
        }
        push(a_.integer(static_cast<std::int64_t>(readLE(2))));
        return true;
    case op::LONG1:
        if (!readCounted(1, s)) {
            return false;
        }
        push(makeInt(s));
        return true;
    case op::LONG4:
        if (!readCounted(4, s)) {
            return false;
        }
        push(makeInt(s));
        return true;
    case op::INT:
        return opTextInt(false);
    case op::LONG:
        return opTextInt(true);
    case op::FLOAT:
        return opFloatText();
    case op::BINFLOAT:
        if (!need(8)) {
            return false;
        }
        {
            std::uint64_t bits = 0;
            for (int n = 0; n < 8; ++n) {
                bits = (bits << 8) | std::to_integer<std::uint8_t>(data_[pos_++]);
            }
            push(a_.real(std::bit_cast<double>(bits)));
        }
        return true;

    // ---- strings and bytes ----
    case op::STRING:
        return opString();
    case op::BINSTRING:
    case op::SHORT_BINSTRING:
        if (!readCounted(op_ == op::BINSTRING ? 4 : 1, s)) {
            return false;
        }
        push(a_.str(detail::decodeByteString(s)));
        return true;
    case op::UNICODE: {
        if (!readLine(s)) {
            return false;
        }
        std::string out;
        if (!detail::decodeRawUnicodeEscape(s, out)) {
            return fail(ErrorCode::Corrupt, "invalid raw-unicode-escape text in UNICODE");
        }
        push(a_.str(std::move(out)));
        return true;
    }
    case op::BINUNICODE:
    case op::SHORT_BINUNICODE:
    case op::BINUNICODE8:
        if (!readCounted(op_ == op::BINUNICODE ? 4 : op_ == op::SHORT_BINUNICODE ? 1 : 8, s)) {
            return false;
        }
        push(a_.str(std::string(s)));
        return true;
    case op::BINBYTES:
    case op::SHORT_BINBYTES:
    case op::BINBYTES8:
    case op::BYTEARRAY8:
        if (!readCounted(op_ == op::BINBYTES ? 4 : op_ == op::SHORT_BINBYTES ? 1 : 8, s)) {
            return false;
        }
        x = a_.bytes(std::string(s));
        a_[x].flag = op_ == op::BYTEARRAY8;
        push(x);
        return true;
    case op::NEXT_BUFFER:
    case op::READONLY_BUFFER:
        return fail(ErrorCode::Unsupported,
                    "out-of-band buffers (pickle protocol 5 " + opName() + ") are not supported");

    // ---- containers ----
    case op::EMPTY_TUPLE:
        push(a_.tuple({}));
        return true;
    case op::EMPTY_LIST:
        push(a_.list({}));
        return true;
    case op::EMPTY_DICT:
        push(a_.dict({}, false));
        return true;
    case op::EMPTY_SET: {
        Value v;
        v.kind = Kind::Set;
        push(a_.add(std::move(v)));
        return true;
    }
    case op::TUPLE:
    case op::LIST:
    case op::FROZENSET: {
        std::vector<ValueId> items;
        if (!popMark(items)) {
            return false;
        }
        if (op_ == op::TUPLE) {
            push(a_.tuple(std::move(items)));
        } else if (op_ == op::LIST) {
            push(a_.list(std::move(items)));
        } else {
            Value v;
            v.kind = Kind::Set;
            v.flag = true;
            v.items = std::move(items);
            push(a_.add(std::move(v)));
        }
        return true;
    }
    case op::DICT: {
        std::vector<ValueId> items;
        if (!popMark(items)) {
            return false;
        }
        if (items.size() % 2 != 0) {
            return fail(ErrorCode::Corrupt, "odd number of items for DICT");
        }
        push(a_.dict(std::move(items), false));
        return true;
    }
    case op::TUPLE1:
    case op::TUPLE2:
    case op::TUPLE3: {
        const std::size_t n = op_ - op::TUPLE1 + 1U;
        if (stack_.size() < floor() + n) {
            return fail(ErrorCode::Corrupt, "stack underflow at " + opName());
        }
        std::vector<ValueId> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
        stack_.resize(stack_.size() - n);
        push(a_.tuple(std::move(items)));
        return true;
    }
    case op::APPEND:
        if (!pop(x) || !top(y)) {
            return false;
        }
        scratch_.assign(1, x);
        return addItems(y, scratch_, false);
    case op::SETITEM:
        if (!pop(x) || !pop(y) || !top(z)) {
            return false;
        }
        scratch_.assign({y, x});
        return addItems(z, scratch_, true);
    case op::APPENDS:
    case op::SETITEMS:
    case op::ADDITEMS:
        return opAddSetItems();

    // ---- memo ----
    case op::BINPUT:
        if (!need(1)) {
            return false;
        }
        return memoPut(readLE(1));
    case op::LONG_BINPUT:
        if (!need(4)) {
            return false;
        }
        return memoPut(readLE(4));
    case op::PUT: {
        std::uint64_t key = 0;
        return lineKey(key) && memoPut(key);
    }
    case op::MEMOIZE:
        return memoPut(memoCount_);
    case op::BINGET:
        if (!need(1)) {
            return false;
        }
        return memoGet(readLE(1));
    case op::LONG_BINGET:
        if (!need(4)) {
            return false;
        }
        return memoGet(readLE(4));
    case op::GET: {
        std::uint64_t key = 0;
        return lineKey(key) && memoGet(key);
    }

    // ---- globals and calls ----
    case op::GLOBAL:
    case op::INST: {
        std::string_view module;
        std::string_view name;
        if (!readLine(module) || !readLine(name)) {
            return false;
        }
        ValueId g = makeGlobal(std::string(module), std::string(name));
        if (op_ == op::GLOBAL) {
            push(g);
            return true;
        }
        std::vector<ValueId> items;
        if (!popMark(items)) {
            return false;
        }
        return opCall(g, a_.tuple(std::move(items)), ObjectForm::Inst);
    }
    case op::STACK_GLOBAL:
        if (!pop(x) || !pop(y)) {
            return false;
        }
        if (kindOf(x) != Kind::Str || kindOf(y) != Kind::Str) {
            return fail(ErrorCode::Corrupt, "STACK_GLOBAL needs two strings, got " + std::string(kindName(kindOf(y))) +
                                                " and " + std::string(kindName(kindOf(x))));
        }
        push(makeGlobal(val(y).text, val(x).text));
        return true;
    case op::OBJ: {
        std::vector<ValueId> items;
        if (!popMark(items)) {
            return false;
        }
        if (items.empty()) {
            return fail(ErrorCode::Corrupt, "stack underflow at OBJ");
        }
        const ValueId cls = items.front();
        items.erase(items.begin());
        return opCall(cls, a_.tuple(std::move(items)), ObjectForm::Obj);
    }
    case op::REDUCE:
        if (!pop(x) || !pop(y)) {
            return false;
        }
        return opCall(y, x, ObjectForm::Reduce);
    case op::NEWOBJ:
        if (!pop(x) || !pop(y)) {
            return false;
        }
        return opCall(y, x, ObjectForm::NewObj);
    case op::NEWOBJ_EX:
        if (!pop(z) || !pop(x) || !pop(y)) {
            return false;
        }
        return opCall(y, x, ObjectForm::NewObjEx, z);
    case op::BUILD:
        return opBuild();
    case op::EXT1:
    case op::EXT2:
    case op::EXT4: {
        const std::size_t w = op_ == op::EXT1 ? 1 : op_ == op::EXT2 ? 2 : 4;
        if (!need(w)) {
            return false;
        }
        const auto code = static_cast<std::int64_t>(readLE(w));
        if (code <= 0 || (w == 4 && code > 0x7FFFFFFF)) {
            return fail(ErrorCode::Corrupt, opName() + " specifies code <= 0");
        }
        // The registry lives in the loading process: keep the code, resolve nothing.
        ObjectInfo o;
        o.callable = GlobalRef{"copyreg", "_extension_registry"};
        o.args = a_.tuple({a_.integer(code)});
        push(a_.object(std::move(o)));
        return true;
    }
    case op::PERSID: {
        if (!readLine(s)) {
            return false;
        }
        return persistentLoad(a_.str(detail::decodeByteString(s)));
    }
    case op::BINPERSID:
        if (!pop(x)) {
            return false;
        }
        return persistentLoad(x);
    default:
        break;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    std::string hex = "0x";
    hex.push_back(kHex[op_ >> 4U]);
    hex.push_back(kHex[op_ & 0xFU]);
    return fail(ErrorCode::Corrupt, "unknown opcode " + hex);
}

bool Machine::opTextInt(bool isLong)
{
    std::string_view line;
    if (!readLine(line)) {
        return false;
    }
    if (!isLong && (line == "01" || line == "00")) {
        push(a_.boolean(line == "01"));
        return true;
    }
    if (isLong && !line.empty() && line.back() == 'L') {
        line.remove_suffix(1);
    }
    ValueId v;
    if (!parseDecimal(line, v)) {
        return false;
    }
    push(v);
    return true;
}

bool Machine::opFloatText()
{
    std::string_view line;
    if (!readLine(line)) {
        return false;
    }
    double d = 0;
    if (!detail::parsePythonFloat(line, d)) {
        return fail(ErrorCode::Corrupt, "invalid FLOAT literal");
    }
    push(a_.real(d));
    return true;
}

bool Machine::opString()
{
    std::string_view line;
    if (!readLine(line)) {
        return false;
    }
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
        line.remove_suffix(1);
    }
    if (line.size() < 2 || (line.front() != '\'' && line.front() != '"') || line.back() != line.front()) {
        return fail(ErrorCode::Corrupt, "the STRING opcode argument must be quoted");
    }
    std::string raw;
    if (!detail::decodeEscapes(line.substr(1, line.size() - 2), raw)) {
        return fail(ErrorCode::Corrupt, "invalid escape in STRING");
    }
    push(a_.str(detail::decodeByteString(raw)));
    return true;
}

bool Machine::addItems(ValueId target, const std::vector<ValueId>& items, bool pairs)
{
    a_.charge(items.size() * sizeof(ValueId));  // lists and dicts that grow after creation
    Value& t = a_[target];
    if (pairs) {
        if (items.size() % 2 != 0) {
            return fail(ErrorCode::Corrupt, "odd number of items for " + opName());
        }
        if (t.kind == Kind::Dict) {
            t.items.insert(t.items.end(), items.begin(), items.end());
            return true;
        }
        if (t.kind == Kind::Object) {
            auto& d = a_.objects[static_cast<std::size_t>(t.i)].dictItems;
            d.insert(d.end(), items.begin(), items.end());
            return true;
        }
        return fail(ErrorCode::Corrupt,
                    opName() + " onto a " + std::string(kindName(t.kind)) + " (only dicts and objects take items)");
    }
    const bool setOp = op_ == op::ADDITEMS;
    if ((t.kind == Kind::List && !setOp) || (t.kind == Kind::Set && setOp && !t.flag)) {
        t.items.insert(t.items.end(), items.begin(), items.end());
        return true;
    }
    if (t.kind == Kind::Object) {
        auto& l = a_.objects[static_cast<std::size_t>(t.i)].listItems;
        l.insert(l.end(), items.begin(), items.end());
        return true;
    }
    return fail(ErrorCode::Corrupt, opName() + " onto a " + std::string(kindName(t.kind)) +
                                        (setOp ? " (only sets take items)" : " (only lists and objects take items)"));
}

bool Machine::opAddSetItems()
{
    if (!popMark(scratch_)) {
        return false;
    }
    ValueId target;
    if (!top(target)) {
        return false;
    }
    std::vector<ValueId> items;
    items.swap(scratch_);
    const bool ok = addItems(target, items, op_ == op::SETITEMS);
    items.swap(scratch_);
    return ok;
}

bool Machine::opCall(ValueId callable, ValueId args, ObjectForm form, ValueId kwargs)
{
    if (kindOf(callable) != Kind::Global) {
        return fail(ErrorCode::Unsupported, opName() + " of a " + std::string(kindName(kindOf(callable))) +
                                                " value (only globals can be called)");
    }
    if (form == ObjectForm::NewObj || form == ObjectForm::NewObjEx) {
        if (kindOf(args) != Kind::Tuple) {
            return fail(ErrorCode::Corrupt, opName() + " arguments must be a tuple");
        }
    }
    const Known k = knownOf(callable);
    if (k != Known::Other && kindOf(args) == Kind::Tuple &&
        (!kwargs.valid() || (kindOf(kwargs) == Kind::Dict && val(kwargs).items.empty()))) {
        if (auto made = callKnown(k, callable, args, form)) {
            push(*made);
            return true;
        }
        if (error_) {
            return false;
        }
    }
    ObjectInfo o;
    o.callable = globalOf(a_, callable);
    o.form = form;
    o.args = args;
    o.kwargs = kwargs;
    push(a_.object(std::move(o)));
    return true;
}

std::optional<ValueId> Machine::callKnown(Known k, ValueId callable, ValueId args, ObjectForm form)
{
    // Copy: creating values below may move the arena's storage.
    const Args av = val(args).items;
    if (!av.fits) {
        return std::nullopt;
    }
    const std::size_t n = av.size();
    const bool isNew = form == ObjectForm::NewObj || form == ObjectForm::NewObjEx;
    switch (k) {
    case Known::OrderedDict: {
        if (isNew || n == 0) {
            return a_.dict({}, true);
        }
        if (n != 1 || (kindOf(av[0]) != Kind::List && kindOf(av[0]) != Kind::Tuple)) {
            return std::nullopt;
        }
        std::vector<ValueId> kv;
        for (ValueId pair : val(av[0]).items) {
            const Value& p = val(pair);
            if ((p.kind != Kind::Tuple && p.kind != Kind::List) || p.items.size() != 2) {
                return std::nullopt;
            }
            kv.push_back(p.items[0]);
            kv.push_back(p.items[1]);
        }
        return a_.dict(std::move(kv), true);
    }
    case Known::Size: {
        std::vector<std::int64_t> dims;
        if (isNew || n > 1 || (n == 1 && !dimsArg(av[0], dims))) {
            return std::nullopt;
        }
        Value v;
        v.kind = Kind::Size;
        if (n == 1) {
            v.items = val(av[0]).items;
        }
        return a_.add(std::move(v));
    }
    case Known::Device: {
        if (isNew || n < 1 || n > 2 || kindOf(av[0]) != Kind::Str) {
            return std::nullopt;
        }
        std::string type = val(av[0]).text;
        std::int64_t index = -1;
        if (n == 2) {
            if (kindOf(av[1]) == Kind::None) {
                index = -1;
            } else if (kindOf(av[1]) != Kind::Int || val(av[1]).i < 0) {
                return std::nullopt;
            } else {
                index = val(av[1]).i;
            }
        } else {
            auto name = parseDeviceName(type);  // torch.device('cuda:1')
            if (!name) {
                return std::nullopt;
            }
            type = std::move(name->type);
            index = name->index.value_or(-1);
        }
        if (type.empty()) {
            return std::nullopt;
        }
        Value v;
        v.kind = Kind::Device;
        v.text = std::move(type);
        v.i = index;
        return a_.add(std::move(v));
    }
    case Known::CodecsEncode: {
        if (isNew || n != 2 || kindOf(av[0]) != Kind::Str || kindOf(av[1]) != Kind::Str) {
            return std::nullopt;
        }
        std::string raw;
        if (!detail::encodeText(val(av[0]).text, val(av[1]).text, raw)) {
            return std::nullopt;  // an encoding we do not model stays a call
        }
        return a_.bytes(std::move(raw));
    }
    case Known::BytesType:
        if (isNew || n != 0) {
            return std::nullopt;
        }
        return a_.bytes({});
    case Known::ByteArray: {
        if (isNew) {
            return std::nullopt;
        }
        std::string raw;
        if (n == 1 && kindOf(av[0]) == Kind::Bytes) {
            raw = val(av[0]).text;
        } else if (n == 2 && kindOf(av[0]) == Kind::Str && kindOf(av[1]) == Kind::Str) {
            if (!detail::encodeText(val(av[0]).text, val(av[1]).text, raw)) {
                return std::nullopt;
            }
        } else if (n != 0) {
            return std::nullopt;
        }
        ValueId b = a_.bytes(std::move(raw));
        a_[b].flag = true;
        return b;
    }
    case Known::SetType:
    case Known::FrozenSetType: {
        Value v;
        v.kind = Kind::Set;
        v.flag = k == Known::FrozenSetType;
        if (n == 1) {
            const Kind ik = kindOf(av[0]);
            if (ik != Kind::List && ik != Kind::Tuple && ik != Kind::Set) {
                return std::nullopt;
            }
            v.items = val(av[0]).items;
        } else if (n != 0) {
            return std::nullopt;
        }
        return a_.add(std::move(v));
    }
    case Known::RebuildTensor:
    case Known::RebuildTensorV2:
    case Known::RebuildTensorV3:
    case Known::RebuildQTensor:
        if (isNew) {
            return std::nullopt;
        }
        return rebuildStrided(k, callable, args);
    case Known::RebuildParameter:
    case Known::RebuildParameterWithState:
        if (isNew) {
            return std::nullopt;
        }
        return rebuildParameter(k, args);
    case Known::RebuildFromTypeV2:
        if (isNew) {
            return std::nullopt;
        }
        return rebuildFromType(args);
    case Known::RebuildSparse:
    case Known::RebuildSparseCsr:
    case Known::RebuildMeta:
    case Known::RebuildWrapperSubclass:
    case Known::RebuildFromCpu:
    case Known::RebuildFromNumpy:
    case Known::RebuildXla:
    case Known::RebuildNested:
        if (isNew) {
            return std::nullopt;
        }
        return rebuildOther(k, callable, args);
    case Known::LegacyTensorClass:
    case Known::Other:
        return std::nullopt;
    }
    return std::nullopt;
}

bool Machine::validateGeometry(const std::string& fn, TensorInfo& t)
{
    if (t.shape.size() != t.stride.size()) {
        return fail(ErrorCode::Corrupt, "malformed arguments to " + fn + ": size " + dimsText(t.shape) +
                                            " and stride " + dimsText(t.stride) + " differ in length");
    }
    if (t.storageOffset < 0) {
        return fail(ErrorCode::Corrupt,
                    "malformed arguments to " + fn + ": negative storage offset " + std::to_string(t.storageOffset));
    }
    std::int64_t numel = 1;
    std::int64_t extent = t.storageOffset;
    bool empty = false;
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
        if (t.shape[d] < 0) {
            return fail(ErrorCode::Corrupt,
                        "malformed arguments to " + fn + ": negative dimension in size " + dimsText(t.shape));
        }
        if (t.stride[d] < 0) {
            return fail(ErrorCode::Corrupt, "malformed arguments to " + fn + ": negative stride " + dimsText(t.stride));
        }
        empty = empty || t.shape[d] == 0;
        std::int64_t span = 0;
        if (!checkedMul(numel, t.shape[d], numel) ||
            (t.shape[d] > 0 && (!checkedMul(t.shape[d] - 1, t.stride[d], span) || !checkedAdd(extent, span, extent)))) {
            return fail(ErrorCode::Limit,
                        "shape " + dimsText(t.shape) + " with stride " + dimsText(t.stride) + " overflows in " + fn);
        }
    }
    std::int64_t bytes = 0;
    const auto elem = static_cast<std::int64_t>(std::max<std::uint32_t>(elementSize(t.dtype), 1));
    if (!empty &&
        (!checkedMul(numel, elem, bytes) || !checkedAdd(extent, 1, extent) || !checkedMul(extent, elem, bytes))) {
        return fail(ErrorCode::Limit, "shape " + dimsText(t.shape) + " overflows in " + fn);
    }
    return true;
}

std::optional<ValueId> Machine::rebuildStrided(Known k, ValueId callable, ValueId args)
{
    const Args av = val(args).items;
    const std::size_t n = av.size();
    const GlobalRef& fnRef = globalOf(a_, callable);
    const std::string fn = fnRef.qualified();
    const bool arityOk = (k == Known::RebuildTensor && n == 4) || (k == Known::RebuildTensorV2 && (n == 6 || n == 7)) ||
                         (k == Known::RebuildTensorV3 && (n == 7 || n == 8)) || (k == Known::RebuildQTensor && n == 7);
    if (!arityOk || kindOf(av[0]) != Kind::Storage) {
        warn(fn + " with unexpected arguments kept as an object");
        return std::nullopt;
    }
    TensorInfo t;
    t.form = k == Known::RebuildQTensor ? TensorForm::Quantized : TensorForm::Strided;
    t.rebuild = fnRef;
    t.rawArgs = args;
    t.storage = av[0];
    const StorageRef& st = a_.storages[static_cast<std::size_t>(val(av[0]).i)];
    t.dtype = st.dtype;
    if (!intArg(av[1], t.storageOffset)) {
        fail(ErrorCode::Corrupt,
             "malformed arguments to " + fn + ": storage offset is a " + std::string(kindName(kindOf(av[1]))));
        return std::nullopt;
    }
    if (!dimsArg(av[2], t.shape) || !dimsArg(av[3], t.stride)) {
        fail(ErrorCode::Corrupt, "malformed arguments to " + fn + ": size and stride must be tuples of ints");
        return std::nullopt;
    }
    if (k == Known::RebuildTensorV2 || k == Known::RebuildTensorV3) {
        if (!boolArg(av[4], t.requiresGrad)) {
            fail(ErrorCode::Corrupt,
                 "malformed arguments to " + fn + ": requires_grad is a " + std::string(kindName(kindOf(av[4]))));
            return std::nullopt;
        }
        t.backwardHooks = av[5];
    }
    if (k == Known::RebuildTensorV2 && n == 7) {
        t.metadata = av[6];
    }
    if (k == Known::RebuildTensorV3) {
        if (kindOf(av[6]) != Kind::DType) {
            fail(ErrorCode::Corrupt,
                 "malformed arguments to " + fn + ": the dtype argument is a " + std::string(kindName(kindOf(av[6]))));
            return std::nullopt;
        }
        t.dtype = static_cast<ckpt::DType>(val(av[6]).i);
        if (n == 8) {
            t.metadata = av[7];
        }
    }
    if (k == Known::RebuildQTensor) {
        if (!boolArg(av[5], t.requiresGrad)) {
            fail(ErrorCode::Corrupt,
                 "malformed arguments to " + fn + ": requires_grad is a " + std::string(kindName(kindOf(av[5]))));
            return std::nullopt;
        }
        t.backwardHooks = av[6];
    }
    if (!validateGeometry(fn, t)) {
        return std::nullopt;
    }
    return a_.tensor(std::move(t));
}

std::optional<ValueId> Machine::rebuildParameter(Known k, ValueId args)
{
    const Args av = val(args).items;
    const std::size_t want = k == Known::RebuildParameter ? 3 : 4;
    bool requiresGrad = true;
    if (av.size() != want || kindOf(av[0]) != Kind::Tensor || !boolArg(av[1], requiresGrad)) {
        warn("torch._utils._rebuild_parameter with unexpected arguments kept as an object");
        return std::nullopt;
    }
    TensorInfo t = tensorOf(a_, av[0]);
    t.isParameter = true;
    t.parameterRequiresGrad = requiresGrad;
    t.parameterHooks = av[2];
    if (want == 4) {
        t.parameterState = av[3];
    }
    return a_.tensor(std::move(t));
}

std::optional<ValueId> Machine::rebuildFromType(ValueId args)
{
    const Args av = val(args).items;
    if (av.size() != 4 || kindOf(av[0]) != Kind::Global || kindOf(av[2]) != Kind::Tuple) {
        return std::nullopt;
    }
    const Known inner = knownOf(av[0]);
    if (inner == Known::Other || inner == Known::RebuildFromTypeV2 || inner == Known::LegacyTensorClass) {
        return std::nullopt;
    }
    auto made = callKnown(inner, av[0], av[2], ObjectForm::Reduce);
    if (!made || kindOf(*made) != Kind::Tensor) {
        return std::nullopt;
    }
    TensorInfo& t = a_.tensors[static_cast<std::size_t>(val(*made).i)];
    t.subclassType = av[1];
    t.subclassState = av[3];
    return made;
}

std::optional<ValueId> Machine::rebuildOther(Known k, ValueId callable, ValueId args)
{
    const Args av = val(args).items;
    const std::size_t n = av.size();
    TensorInfo t;
    t.rebuild = globalOf(a_, callable);
    t.rawArgs = args;
    const std::string fn = t.rebuild.qualified();
    auto dtypeAt = [&](std::size_t i) {
        return kindOf(av[i]) == Kind::DType ? static_cast<ckpt::DType>(val(av[i]).i) : ckpt::DType::Unknown;
    };
    auto copyFrom = [&](ValueId inner) {
        if (kindOf(inner) != Kind::Tensor) {
            return false;
        }
        const TensorInfo& src = tensorOf(a_, inner);
        t.storage = src.storage;
        t.dtype = src.dtype;
        t.storageOffset = src.storageOffset;
        t.shape = src.shape;
        t.stride = src.stride;
        return true;
    };
    switch (k) {
    case Known::RebuildSparse:
    case Known::RebuildSparseCsr: {
        if (n != 2 || kindOf(av[1]) != Kind::Tuple) {
            return std::nullopt;
        }
        t.form = TensorForm::Sparse;
        const std::vector<ValueId> data = val(av[1]).items;
        std::string layout;
        if (kindOf(av[0]) == Kind::Object) {
            const ObjectInfo& lo = objectOf(a_, av[0]);
            if (lo.args.valid() && kindOf(lo.args) == Kind::Tuple && val(lo.args).items.size() == 1) {
                layout = textArg(val(lo.args).items[0]);
            }
        }
        const bool coo = k == Known::RebuildSparse && (layout.empty() || layout.find("coo") != std::string::npos);
        const std::size_t valuesAt = coo ? 1 : 2;
        const std::size_t sizeAt = coo ? 2 : 3;
        if (data.size() > sizeAt) {
            if (kindOf(data[valuesAt]) == Kind::Tensor) {
                t.dtype = tensorOf(a_, data[valuesAt]).dtype;
            }
            if (!dimsArg(data[sizeAt], t.shape)) {
                t.shape.clear();
            }
        }
        break;
    }
    case Known::RebuildMeta: {
        if (n != 4 || !dimsArg(av[1], t.shape) || !dimsArg(av[2], t.stride) || !boolArg(av[3], t.requiresGrad)) {
            return std::nullopt;
        }
        t.form = TensorForm::Meta;
        t.dtype = dtypeAt(0);
        t.device = "meta";
        if (!validateGeometry(fn, t)) {
            return std::nullopt;
        }
        break;
    }
    case Known::RebuildWrapperSubclass: {
        if (n != 8 || !dimsArg(av[2], t.shape) || !dimsArg(av[3], t.stride) || !intArg(av[4], t.storageOffset) ||
            !boolArg(av[7], t.requiresGrad)) {
            return std::nullopt;
        }
        t.form = TensorForm::Wrapper;
        t.dtype = dtypeAt(1);
        if (kindOf(av[6]) == Kind::Device) {
            const Value& d = val(av[6]);
            t.device = d.text + (d.i >= 0 ? ":" + std::to_string(d.i) : std::string());
        } else {
            t.device = textArg(av[6]);
        }
        if (!validateGeometry(fn, t)) {
            return std::nullopt;
        }
        break;
    }
    case Known::RebuildFromCpu:
    case Known::RebuildFromNumpy:
    case Known::RebuildXla: {
        if (n != 4) {
            return std::nullopt;
        }
        t.form = TensorForm::DeviceFromCpu;
        if (k == Known::RebuildFromCpu) {
            if (!copyFrom(av[0])) {
                return std::nullopt;
            }
        } else {
            NumpyInfo np;
            if (decodeNumpy(a_, av[0], np)) {
                t.shape = np.shape;
            }
        }
        if (dtypeAt(1) != ckpt::DType::Unknown) {
            t.dtype = dtypeAt(1);
        }
        if (kindOf(av[2]) == Kind::Device) {
            const Value& d = val(av[2]);
            t.device = d.text + (d.i >= 0 ? ":" + std::to_string(d.i) : std::string());
        } else {
            t.device = textArg(av[2]);
        }
        boolArg(av[3], t.requiresGrad);
        break;
    }
    case Known::RebuildNested: {
        if (n != 4 || !copyFrom(av[0])) {
            return std::nullopt;
        }
        t.form = TensorForm::Nested;
        t.shape.clear();
        t.stride.clear();
        t.storageOffset = 0;
        break;
    }
    default:
        return std::nullopt;
    }
    return a_.tensor(std::move(t));
}

// Pre-1.0 tensors: `torch.FloatTensor()` (or `torch.Tensor`) then BUILD with the `set_` arguments.
bool Machine::legacyTensorBuild(ValueId target, ValueId state)
{
    const ObjectInfo& o = objectOf(a_, target);
    if (o.state.valid() || kindOf(state) != Kind::Tuple) {
        return false;
    }
    const std::vector<ValueId> sv = val(state).items;
    if (sv.size() != 4 || kindOf(sv[0]) != Kind::Storage) {
        return false;
    }
    TensorInfo t;
    t.form = TensorForm::Strided;
    t.rebuild = o.callable;
    t.rawArgs = state;
    t.storage = sv[0];
    t.dtype = a_.storages[static_cast<std::size_t>(val(sv[0]).i)].dtype;
    const std::string fn = o.callable.qualified() + " state";
    if (!intArg(sv[1], t.storageOffset) || !dimsArg(sv[2], t.shape) || !dimsArg(sv[3], t.stride)) {
        return fail(ErrorCode::Corrupt, "malformed arguments to " + fn + ": expected (storage, offset, size, stride)");
    }
    if (!validateGeometry(fn, t)) {
        return false;
    }
    const auto index = static_cast<std::int64_t>(a_.tensors.size());
    a_.tensors.push_back(std::move(t));
    Value& v = a_[target];
    v.kind = Kind::Tensor;
    v.i = index;
    return true;
}

bool Machine::opBuild()
{
    ValueId state;
    ValueId target;
    if (!pop(state) || !top(target)) {
        return false;
    }
    switch (kindOf(target)) {
    case Kind::Object: {
        const GlobalRef& c = objectOf(a_, target).callable;
        if (classify(c) == Known::LegacyTensorClass) {
            if (legacyTensorBuild(target, state)) {
                return true;
            }
            if (error_) {
                return false;
            }
        }
        ObjectInfo& o = a_.objects[static_cast<std::size_t>(val(target).i)];
        if (o.state.valid()) {
            warn("second BUILD on " + o.callable.qualified() + " replaces its first state");
        }
        o.state = state;
        return true;
    }
    case Kind::Dict: {
        ValueId attrs = state;
        if (kindOf(state) == Kind::Tuple && val(state).items.size() == 2) {
            attrs = val(state).items[0];  // (dict, slots)
        }
        if (kindOf(attrs) == Kind::Dict) {
            a_[target].attrs = attrs;
        } else if (kindOf(attrs) != Kind::None) {
            warn("BUILD state of a " + std::string(kindName(kindOf(attrs))) + " on a dict ignored");
        }
        return true;
    }
    case Kind::Tensor: {
        TensorInfo& t = a_.tensors[static_cast<std::size_t>(val(target).i)];
        if (t.isParameter) {
            t.parameterState = state;
            return true;
        }
        // What torch >= 2.0 writes as _rebuild_from_type_v2(func, torch.Tensor, args, state).
        t.subclassState = state;
        if (!t.subclassType.valid()) {
            const ValueId g = a_.global(GlobalRef{"torch", "Tensor"});
            a_.tensors[static_cast<std::size_t>(val(target).i)].subclassType = g;
        }
        return true;
    }
    default:
        return fail(ErrorCode::Corrupt, "BUILD on a " + std::string(kindName(kindOf(target))) +
                                            " (only objects, tensors and dicts take a state)");
    }
}

bool Machine::persistentLoad(ValueId pid)
{
    const Value& p = val(pid);
    auto opaque = [&] {
        Value v;
        v.kind = Kind::PersistentId;
        v.items = {pid};
        push(a_.add(std::move(v)));
        return true;
    };
    if (p.kind != Kind::Tuple || p.items.empty()) {
        return opaque();
    }
    const std::vector<ValueId> items = p.items;
    const std::string tag = textArg(items[0]);
    if (tag == "module" && opts_.legacyPersistentIds && items.size() == 4 && kindOf(items[1]) == Kind::Global) {
        push(items[1]);
        return true;
    }
    const bool shapeOk = items.size() == 5 || (opts_.legacyPersistentIds && items.size() == 6);
    if (tag != "storage" || !shapeOk) {
        return opaque();
    }
    StorageRef ref;
    const Value& cls = val(items[1]);
    if (cls.kind == Kind::Global) {
        ref.className = globalOf(a_, items[1]).name;
        auto t = dtypeFromStorageClass(ref.className);
        if (!t) {
            warn("persistent id names an unknown storage class " + globalOf(a_, items[1]).qualified());
            return opaque();
        }
        ref.dtype = *t;
        ref.untyped = ref.className == "UntypedStorage" || ref.className == "TypedStorage";
    } else if (cls.kind == Kind::DType) {
        ref.dtype = static_cast<ckpt::DType>(cls.i);
        ref.className = std::string(storageClassName(ref.dtype));
    } else {
        return opaque();
    }
    const Value& key = val(items[2]);
    if (key.kind == Kind::Str || key.kind == Kind::Bytes) {
        ref.key = key.text;
    } else if (key.kind == Kind::Int) {
        ref.key = std::to_string(key.i);
    } else {
        return opaque();
    }
    const Value& loc = val(items[3]);
    std::int64_t numel = 0;
    if ((loc.kind != Kind::Str && loc.kind != Kind::Bytes) || !intArg(items[4], numel) || numel < 0) {
        return opaque();
    }
    ref.location = loc.text;
    ref.numel = static_cast<std::uint64_t>(numel);
    if (items.size() == 6 && kindOf(items[5]) == Kind::Tuple) {
        ref.legacyView = items[5];
    }
    if (!storageByKeyBuilt_) {
        // Built on the first persistent id rather than up front: a legacy file's later pickles
        // (its storage key list) have none, and copying 180k keys for them was a tenth of its read.
        storageByKeyBuilt_ = true;
        storageByKey_.reserve(a_.storages.size() + data_.size() / 256);
        for (std::size_t n = 0; n < a_.storages.size(); ++n) {
            storageByKey_.emplace(a_.storages[n].key, Seen{static_cast<std::uint32_t>(n), {}});
        }
    }
    auto it = storageByKey_.find(ref.key);
    if (it == storageByKey_.end()) {
        const auto index = static_cast<std::uint32_t>(a_.storages.size());
        a_.charge(sizeof(StorageRef) + 2 * (ref.key.size() + sizeof(Seen)) + ref.location.size());
        a_.storages.push_back(std::move(ref));
        const ValueId v = a_.storage(index);
        storageByKey_.emplace(a_.storages[index].key, Seen{index, v});
        push(v);
        return true;
    }
    StorageRef& known = a_.storages[it->second.index];
    if (known.dtype != ref.dtype || known.numel != ref.numel || known.untyped != ref.untyped) {
        if (!known.conflicting) {
            warn("storage '" + known.key + "' is declared again with another dtype or size");
        }
        known.conflicting = true;
    }
    if (!it->second.value.valid()) {
        it->second.value = a_.storage(it->second.index);
    }
    push(it->second.value);
    return true;
}

}  // namespace

Expected<UnpickleResult> unpickle(Bytes data, Arena& arena, const UnpickleOptions& opts)
{
    Machine m(data, arena, opts);
    return m.run();
}

}  // namespace ckpt::pickle
