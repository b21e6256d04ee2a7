// The diff's three renderings. Key text is the file's, so text goes through displayText (control
// characters escaped) and JSON through dumpJson (invalid UTF-8 as \xNN).
#include "diff/diff.h"
#include "util/json_text.h"
#include "util/printable.h"
#include "util/shape_text.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace ckpt::diff {
namespace {

std::string num(double v)
{
    std::array<char, 32> buf{};
    std::snprintf(buf.data(), buf.size(), "%.4g", v);
    return buf.data();
}

std::string bytesText(std::uint64_t n)
{
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    auto v = static_cast<double>(n);
    std::size_t u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    std::array<char, 32> buf{};
    std::snprintf(buf.data(), buf.size(), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
    return buf.data();
}

std::string sideName(const std::string& path, const std::string& select)
{
    return displayText(path) + (select.empty() ? "" : " [" + displayText(select) + "]");
}

std::string joined(const std::vector<std::string>& v)
{
    std::string s;
    for (const auto& p : v) {
        s += (s.empty() ? "`" : ", `") + p + "`";
    }
    return s.empty() ? "none" : s;
}

// "3 changed, 1 only in how they are stored; 0 renamed, ...".
std::string countsText(const Counts& c)
{
    std::string stored = ",";
    if (c.storedDifferently > 0) {
        stored = c.storedDifferently == c.changed
                     ? ", all only in how they are stored;"
                     : ", " + std::to_string(c.storedDifferently) + " only in how they are stored;";
    }
    return std::to_string(c.changed) + " changed" + stored + " " + std::to_string(c.renamed) + " renamed, " +
           std::to_string(c.onlyA) + " only in A, " + std::to_string(c.onlyB) + " only in B, " +
           std::to_string(c.equal) + " equal";
}

// What --rtol/--atol decided: "; values differ in 4 tensors, 3 of them within rtol 0.01, atol 0.001".
std::string toleranceText(const Result& r)
{
    const Counts& c = r.counts;
    if (c.valuesDiffer == 0) {
        return {};
    }
    return "; values differ in " + std::to_string(c.valuesDiffer) + (c.valuesDiffer == 1 ? " tensor, " : " tensors, ") +
           (c.valuesAllclose == c.valuesDiffer ? std::string(c.valuesDiffer == 1 ? "it" : "all")
                                               : std::to_string(c.valuesAllclose) + " of them") +
           " within rtol " + num(r.rtol) + ", atol " + num(r.atol);
}

// "16 saved on another device, 2 with other strides": what Entry::storedDifferently entries changed.
std::string storageText(const Result& r)
{
    std::uint64_t device = 0;
    std::uint64_t stride = 0;
    std::uint64_t type = 0;
    for (const auto& e : r.entries) {
        if (e.storedDifferently()) {
            device += (e.changes & kDevice) != 0 ? 1 : 0;
            stride += (e.changes & kStride) != 0 ? 1 : 0;
            type += (e.changes & kType) != 0 ? 1 : 0;
        }
    }
    std::vector<std::string> parts;
    if (device > 0) {
        parts.push_back(std::to_string(device) + " saved on another device");
    }
    if (stride > 0) {
        parts.push_back(std::to_string(stride) + " with other strides (a view, or a storage shared)");
    }
    if (type > 0) {
        parts.push_back(std::to_string(type) + " held in another class");
    }
    std::string s;
    for (const auto& p : parts) {
        s += (s.empty() ? "" : ", ") + p;
    }
    return s;
}

// "dtype float32 -> bfloat16; shape [4] -> [2, 2]; values allclose: 3 of 8 differ, max abs 1e-3, max rel 2e-3"
std::string tensorChanges(const Entry& e, const TensorEntry& ta, const TensorEntry& tb)
{
    std::vector<std::string> parts;
    if ((e.changes & kDType) != 0) {
        parts.push_back("dtype " + std::string(dtypeName(ta.dtype)) + " -> " + std::string(dtypeName(tb.dtype)));
    }
    if ((e.changes & kShape) != 0) {
        parts.push_back("shape " + shapeText(ta.shape) + " -> " + shapeText(tb.shape));
    }
    if ((e.changes & kStride) != 0) {
        parts.push_back("stride " + shapeText(ta.stride) + " -> " + shapeText(tb.stride));
    }
    if ((e.changes & kDevice) != 0) {
        parts.push_back("saved on " + displayText(ta.location) + " -> " + displayText(tb.location));
    }
    if ((e.changes & kQuantizer) != 0) {
        auto q = [](const std::string& s) { return s.empty() ? std::string("not quantized") : displayText(s); };
        parts.push_back("quantizer " + q(e.quantizerA) + " -> " + q(e.quantizerB));
    }
    const ValueDiff& v = e.values;
    if (!v.note.empty()) {
        parts.push_back(v.compared ? displayText(v.note) : "values not compared (" + displayText(v.note) + ")");
    } else if (v.identicalBytes) {
        parts.emplace_back("bytes identical");
    } else if (v.differing == 0) {
        parts.emplace_back("values equal");
    } else {
        parts.push_back(std::string(v.allclose ? "values allclose: " : "values differ: ") +
                        std::to_string(v.differing) + " of " + std::to_string(ta.numel) + " differ, max abs " +
                        num(v.maxAbs) + ", max rel " + num(v.maxRel));
    }
    std::string s;
    for (const auto& p : parts) {
        s += (s.empty() ? "" : "; ") + p;
    }
    return s;
}

const TensorEntry* tensorA(const Entry& e, const Side& a)
{
    return e.tensorA.valid() ? &a.part(e.partA).tensors[e.tensorA] : nullptr;
}
const TensorEntry* tensorB(const Entry& e, const Side& b)
{
    return e.tensorB.valid() ? &b.part(e.partB).tensors[e.tensorB] : nullptr;
}

nlohmann::ordered_json tensorJson(const TensorEntry& t)
{
    return {{"dtype", dtypeName(t.dtype)},
            {"shape", t.shape},
            {"stride", t.stride},
            {"device", t.location},
            {"nbytes", t.nbytes}};
}

nlohmann::ordered_json finite(double v)
{
    return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(v > 0 ? "inf" : "nan");
}

}  // namespace

std::string_view verdictText(Verdict v)
{
    switch (v) {
    case Verdict::Equal:
        return "equal";
    case Verdict::SameWeights:
        return "same weights";
    case Verdict::Differ:
        break;
    }
    return "differ";
}

std::string renderSummary(const Result& r)
{
    std::string s = displayText(r.pathA) + " vs " + displayText(r.pathB) + ": " +
                    std::string(verdictText(r.verdict())) + " (" + countsText(r.counts) + toleranceText(r) + ")";
    if (!r.prefixesA.empty() || !r.prefixesB.empty()) {
        s += ", wrapper prefixes aligned";
    }
    return s + "\n";
}

std::string renderText(const Result& r, const Checkpoint& a, const Checkpoint& b, const TextOptions& opts)
{
    return renderText(r, Side::of(a), Side::of(b), opts);
}

std::string renderJson(const Result& r, const Checkpoint& a, const Checkpoint& b)
{
    return renderJson(r, Side::of(a), Side::of(b));
}

std::string renderText(const Result& r, const Side& a, const Side& b, const TextOptions& opts)
{
    std::ostringstream o;
    o << "A: " << sideName(r.pathA, r.selectA) << " (" << a.format << ")\n"
      << "B: " << sideName(r.pathB, r.selectB) << " (" << b.format << ")\n";
    if (!r.prefixesA.empty() || !r.prefixesB.empty()) {
        o << "Wrapper prefixes aligned: A's keys carry " << joined(r.prefixesA) << ", B's carry " << joined(r.prefixesB)
          << "; keys are matched without them.\n";
    }
    const auto identical =
        std::count_if(r.entries.begin(), r.entries.end(), [](const Entry& e) { return e.values.identicalBytes; });
    std::string verdict(verdictText(r.verdict()));
    verdict[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(verdict[0])));
    o << verdict << ": " << countsText(r.counts) << "; " << identical << " tensors with identical bytes; "
      << bytesText(r.comparedBytes) << " of tensor data compared" << toleranceText(r) << "\n";
    if (r.counts.storedDifferently > 0) {
        o << "Stored differently, the same weights (`diff --strict` counts it as a difference): " << storageText(r)
          << "\n";
    }
    if (r.counts.unreadable > 0) {
        o << "Error: " << r.counts.unreadable
          << " tensor(s) could not be read (listed under Changed as \"values not compared\"): the file is "
             "damaged\n";
    }
    auto section = [&](auto&& in, const char* title, auto&& line) {
        std::ostringstream body;
        std::uint64_t n = 0;
        for (const auto& e : r.entries) {
            if (in(e)) {
                ++n;
                body << "  " << line(e) << '\n';
            }
        }
        if (n > 0) {
            o << '\n' << title << " (" << n << "):\n" << body.str();
        }
    };
    auto key = [](const std::string& k) { return k.empty() ? std::string("(the selected value)") : displayText(k); };
    auto status = [](Status s) { return [s](const Entry& e) { return e.status == s; }; };
    section(status(Status::OnlyA), "Only in A", [&](const Entry& e) {
        const auto* t = tensorA(e, a);
        return "- " + key(e.key) +
               (t != nullptr ? "  " + std::string(dtypeName(t->dtype)) + " " + shapeText(t->shape) : "");
    });
    section(status(Status::OnlyB), "Only in B", [&](const Entry& e) {
        const auto* t = tensorB(e, b);
        return "+ " + key(e.key) +
               (t != nullptr ? "  " + std::string(dtypeName(t->dtype)) + " " + shapeText(t->shape) : "");
    });
    section(status(Status::Renamed), "Renamed, same bytes under another key", [&](const Entry& e) {
        std::string s = key(e.key) + " -> " + key(e.keyB);
        const auto* ta = tensorA(e, a);
        const auto* tb = tensorB(e, b);
        if (ta != nullptr && tb != nullptr && (e.changes & ~kValues) != 0) {
            s += "  (" + tensorChanges(e, *ta, *tb) + ")";
        }
        return s;
    });
    auto changed = [&](const Entry& e) {
        const auto* ta = tensorA(e, a);
        const auto* tb = tensorB(e, b);
        std::string s = key(e.key) + (e.keyB != e.key ? " (B: " + key(e.keyB) + ")" : "") + ": ";
        if (ta != nullptr && tb != nullptr) {
            return s + tensorChanges(e, *ta, *tb);
        }
        return s + ((e.changes & kType) != 0 ? "type " : "") + displayText(e.valueA) + " -> " + displayText(e.valueB);
    };
    section([](const Entry& e) { return e.status == Status::Changed && !e.storedDifferently(); }, "Changed", changed);
    section([](const Entry& e) { return e.storedDifferently(); }, "Stored differently, the same weights", changed);
    if (opts.listEqual) {
        section(status(Status::Equal), "Equal",
                [&](const Entry& e) { return key(e.key) + (e.keyB != e.key ? " (B: " + key(e.keyB) + ")" : ""); });
    }
    return o.str();
}

std::string renderJson(const Result& r, const Side& a, const Side& b)
{
    using J = nlohmann::ordered_json;
    J entries = J::array();
    for (const auto& e : r.entries) {
        J j;
        j["status"] = statusName(e.status);
        j["key"] = e.key;
        if (e.status != Status::OnlyA && e.status != Status::OnlyB) {
            j["key_b"] = e.keyB;
        }
        const auto* ta = tensorA(e, a);
        const auto* tb = tensorB(e, b);
        j["kind"] = ta != nullptr || tb != nullptr ? "tensor" : "value";
        if (e.status != Status::OnlyB) {
            j["a"] = ta != nullptr ? tensorJson(*ta) : J(e.valueA);
        }
        if (e.status != Status::OnlyA) {
            j["b"] = tb != nullptr ? tensorJson(*tb) : J(e.valueB);
        }
        if (!e.quantizerA.empty() && j.contains("a")) {
            j["a"]["quantizer"] = e.quantizerA;
        }
        if (!e.quantizerB.empty() && j.contains("b")) {
            j["b"]["quantizer"] = e.quantizerB;
        }
        J changes = J::array();
        const std::pair<Change, const char*> names[] = {
            {kDType, "dtype"},   {kShape, "shape"}, {kStride, "stride"},       {kDevice, "device"},
            {kValues, "values"}, {kKind, "kind"},   {kQuantizer, "quantizer"}, {kType, "type"}};
        for (const auto& [flag, name] : names) {
            if ((e.changes & flag) != 0) {
                changes.push_back(name);
            }
        }
        j["changes"] = changes;
        if (ta != nullptr && tb != nullptr) {
            const ValueDiff& v = e.values;
            J vj{{"compared", v.compared}, {"identical_bytes", v.identicalBytes}};
            if (v.compared) {
                vj["differing"] = v.differing;
                vj["max_abs_diff"] = finite(v.maxAbs);
                vj["max_rel_diff"] = finite(v.maxRel);
                vj["allclose"] = v.allclose;
            }
            if (!v.note.empty()) {
                vj["note"] = v.note;
            }
            if (v.unreadable) {
                vj["unreadable"] = true;
            }
            j["values"] = vj;
        }
        entries.push_back(std::move(j));
    }
    J doc{{"schema", kJsonSchema},
          {"a", {{"path", r.pathA}, {"select", r.selectA}, {"format", a.format}, {"files", a.files()}}},
          {"b", {{"path", r.pathB}, {"select", r.selectB}, {"format", b.format}, {"files", b.files()}}},
          {"equal", r.equal()},
          {"same_weights", r.sameWeights()},
          {"prefixes_aligned", {{"a", r.prefixesA}, {"b", r.prefixesB}}},
          {"counts",
           {{"only_a", r.counts.onlyA},
            {"only_b", r.counts.onlyB},
            {"renamed", r.counts.renamed},
            {"changed", r.counts.changed},
            {"equal", r.counts.equal},
            {"unreadable", r.counts.unreadable},
            {"stored_differently", r.counts.storedDifferently},
            {"values_differ", r.counts.valuesDiffer},
            {"values_allclose", r.counts.valuesAllclose}}},
          {"rtol", r.rtol},
          {"atol", r.atol},
          {"compared_bytes", r.comparedBytes},
          {"entries", std::move(entries)}};
    return dumpJson(std::move(doc), 1) + "\n";
}

}  // namespace ckpt::diff
