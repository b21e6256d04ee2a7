#include "pickle/unpickler.h"

#include "pickle/compat.h"
#include "pickle/opcodes.h"
#include "pickle/text.h"
#include "pickle/torch_globals.h"

#include <bit>
#include <charconv>
#include <unordered_map>
#include <utility>

namespace ckpt::pickle {
namespace {

class Machine {
public:
    Machine(Bytes data, Arena& arena, const UnpickleOptions& opts)
        : data_(data), a_(arena), budget_(opts.budget.value_or(MemoryBudget{data.size()})),
          torch_(arena, problems_, opts.legacyPersistentIds, data.size()), resolve_(opts.resolvePersistentId)
    {
        stack_.reserve(64);
    }

    Expected<UnpickleResult> run();

private:
    ValueId persistentLoad(ValueId pid)
    {
        if (resolve_) {
            if (const auto known = resolve_(pid)) {
                return *known;
            }
        }
        return torch_.persistentLoad(pid);
    }

    // ---- errors -------------------------------------------------------------------------------
    bool fail(ErrorCode code, std::string message) { return problems_.fail(code, std::move(message)); }
    [[nodiscard]] std::string opName() const
    {
        const auto n = op::name(op_);
        return n.empty() ? "opcode" : std::string(n);
    }
    void warn(std::string w) { problems_.warn(std::move(w)); }

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
    ValueId py2Str(std::string_view raw);
    bool noteUndecodable(std::string_view text);

    // ---- opcode groups ------------------------------------------------------------------------
    bool step();
    bool opTextInt(bool isLong);
    bool opFloatText();
    bool opString();
    bool opCall(ValueId callable, ValueId args, ObjectForm form, ValueId kwargs = {});
    bool opBuild();
    bool addItems(ValueId target, std::span<const ValueId> items, bool pairs);
    bool opAddSetItems();

    Bytes data_;
    Arena& a_;
    MemoryBudget budget_;
    detail::Problems problems_;
    detail::TorchGlobals torch_;
    std::function<std::optional<ValueId>(ValueId)> resolve_;  // UnpickleOptions::resolvePersistentId
    std::size_t pos_ = 0;
    std::uint8_t op_ = 0;
    std::vector<ValueId> stack_;
    std::vector<std::size_t> marks_;
    std::vector<ValueId> memo_;
    std::unordered_map<std::uint64_t, ValueId> memoFar_;
    std::size_t memoCount_ = 0;
    std::vector<ValueId> scratch_;
    UnpickleResult result_;
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
    v.text = norm;
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
    return torch_.global(GlobalRef{std::move(module), std::move(name)});
}

Expected<UnpickleResult> Machine::run()
{
    while (!stopped_) {
        // The whole arena counts: a legacy file's pickles share one arena and one budget.
        if (a_.chargedBytes() > budget_.limit()) {
            if (!problems_.error) {
                problems_.error = budget_.exceeded();
                problems_.error->offset = problems_.opStart;
            }
            break;
        }
        if (!step()) {
            break;
        }
    }
    if (problems_.error) {
        return *problems_.error;
    }
    result_.warnings = std::move(problems_.warnings);
    return std::move(result_);
}

bool Machine::step()
{
    problems_.opStart = pos_;
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
        push(py2Str(s));
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
        noteUndecodable(s);
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
            v.items = items;
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
        push(persistentLoad(a_.str(detail::decodeByteString(s))));
        return true;
    }
    case op::BINPERSID:
        if (!pop(x)) {
            return false;
        }
        push(persistentLoad(x));
        return true;
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
    push(py2Str(raw));
    return true;
}

// A Python 2 str keeps its bytes (value.h): torch.load decodes it as UTF-8, numpy arrays carry
// their raw data in one.
ValueId Machine::py2Str(std::string_view raw)
{
    result_.undecodablePython2 += noteUndecodable(raw) ? 1 : 0;
    ValueId v = a_.str(std::string(raw));
    a_[v].flag = true;
    return v;
}

bool Machine::noteUndecodable(std::string_view text)
{
    if (detail::isValidUtf8(text)) {
        return false;
    }
    if (result_.undecodableStrings++ == 0) {
        result_.firstUndecodable = problems_.opStart;
    }
    return true;
}

bool Machine::addItems(ValueId target, std::span<const ValueId> items, bool pairs)
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
    // Protocol 2 names a nested class (ShardedTensor.ProcessGroupState in FSDP rank files) as
    // getattr(Outer, 'Inner'): calling that calls the class `Outer.Inner`.
    if (kindOf(callable) == Kind::Object) {
        const ObjectInfo& o = objectOf(a_, callable);
        if (o.callable.module == "builtins" && o.callable.name == "getattr" && o.args.valid() &&
            kindOf(o.args) == Kind::Tuple && val(o.args).items.size() == 2 &&
            kindOf(val(o.args).items[0]) == Kind::Global && kindOf(val(o.args).items[1]) == Kind::Str) {
            GlobalRef g = globalOf(a_, val(o.args).items[0]);
            g.name += "." + val(val(o.args).items[1]).text;
            callable = a_.global(std::move(g));
        }
    }
    if (kindOf(callable) != Kind::Global) {
        return fail(ErrorCode::Unsupported, opName() + " of a " + std::string(kindName(kindOf(callable))) +
                                                " value (only globals can be called)");
    }
    if (form == ObjectForm::NewObj || form == ObjectForm::NewObjEx) {
        if (kindOf(args) != Kind::Tuple) {
            return fail(ErrorCode::Corrupt, opName() + " arguments must be a tuple");
        }
    }
    if (auto made = torch_.call(callable, args, kwargs, form)) {
        push(*made);
        return true;
    }
    if (problems_.error) {
        return false;
    }
    ObjectInfo o;
    o.callable = globalOf(a_, callable);
    o.form = form;
    o.args = args;
    o.kwargs = kwargs;
    push(a_.object(std::move(o)));
    return true;
}

bool Machine::opBuild()
{
    ValueId state;
    ValueId target;
    if (!pop(state) || !top(target)) {
        return false;
    }
    if (torch_.build(target, state)) {
        return true;
    }
    if (problems_.error) {
        return false;
    }
    switch (kindOf(target)) {
    case Kind::Object: {
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
    default:
        return fail(ErrorCode::Corrupt, "BUILD on a " + std::string(kindName(kindOf(target))) +
                                            " (only objects, tensors and dicts take a state)");
    }
}

}  // namespace

Expected<UnpickleResult> unpickle(Bytes data, Arena& arena, const UnpickleOptions& opts)
{
    Machine m(data, arena, opts);
    return m.run();
}

}  // namespace ckpt::pickle
