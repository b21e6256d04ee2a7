#include "diagnose/diagnose.h"

#include "diagnose/against.h"
#include "diagnose/rules.h"
#include "util/json_text.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace ckpt::diagnose {

std::string_view severityName(Severity s)
{
    switch (s) {
    case Severity::Info:
        return "info";
    case Severity::Warning:
        return "warning";
    case Severity::Error:
        return "error";
    }
    return "info";
}

Expected<std::vector<Finding>> check(const Checkpoint& ckpt, const CheckOptions& opts, std::stop_token stop)
{
    Findings out;
    prefixRules(ckpt, out);
    deviceRules(ckpt, out);
    pickleRules(ckpt, out);
    storageRules(ckpt, out);
    tensorRules(ckpt, out);
    zeroRules(ckpt, out);
    if (stop.stop_requested()) {
        return makeError(ErrorCode::Cancelled, "check cancelled");
    }
    if (opts.values) {
        auto v = valueRules(ckpt, out, stop, opts.valueProgress);
        if (auto same = ckpt.checkUnchanged(); !same) {
            return same.error();
        }
        if (!v) {
            return v.error();
        }
    }
    if (opts.againstPath) {
        auto ref = opts.againstCheckpoint ? referenceOf(*opts.againstCheckpoint, *opts.againstPath)
                                          : loadReference(*opts.againstPath);
        if (!ref) {
            return ref.error();
        }
        auto a = compareAgainst(ckpt, *ref, opts.againstSelect, out);
        if (!a) {
            return a.error();
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
        if (a.severity != b.severity) {
            return a.severity > b.severity;
        }
        return a.code < b.code;
    });
    return out;
}

std::string findingToJson(const Finding& f)
{
    nlohmann::ordered_json j;
    j["code"] = f.code;
    j["severity"] = std::string(severityName(f.severity));
    j["title"] = f.title;
    j["detail"] = f.detail;
    j["paths"] = f.paths;
    if (f.fix) {
        j["fix"] = nlohmann::ordered_json::parse(f.fix->toJson());
    } else {
        j["fix"] = nullptr;
    }
    return dumpJson(j);
}

std::string quotedPath(const std::string& path)
{
    return path.empty() ? std::string("the root") : "`" + path + "`";
}

std::string joinPath(const std::string& dict, const std::string& key)
{
    return dict.empty() ? key : dict + "/" + key;
}

std::string plural(std::uint64_t n, std::string_view one, std::string_view many)
{
    return withCommas(n) + " " + std::string(n == 1 ? one : many);
}

std::string withCommas(std::uint64_t n)
{
    std::string digits = std::to_string(n);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) {
            out += ',';
        }
        out += digits[i];
    }
    return out;
}

// "65.0 KiB (66,568 bytes)": it carries its own parentheses, so callers never put it inside theirs.
std::string bytesText(std::uint64_t n)
{
    if (n < 1024) {
        return plural(n, "byte", "bytes");
    }
    return humanBytes(n) + " (" + withCommas(n) + " bytes)";
}

}  // namespace ckpt::diagnose
