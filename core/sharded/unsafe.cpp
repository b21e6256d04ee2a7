// The safety scan of the pickles a set reads: one rule (diagnose's unsafe-callable), reported per
// member file, so a payload in a shard, a rank file or DCP's .metadata shows in `check` of the set
// and in the window as it would for the file alone.
#include "diagnose/diagnose.h"
#include "sharded/sharded.h"

namespace ckpt::sharded::detail {

void unsafeCodeFindings(const Checkpoint& ckpt, const std::string& file, std::vector<SetFinding>& out)
{
    for (auto& f : diagnose::unsafeCode(ckpt)) {
        SetFinding s;
        s.code = std::move(f.code);
        s.severity = f.severity;
        s.title = file + ": " + f.title;
        s.detail = "In " + file + ": " + f.detail;
        for (const auto& p : f.paths) {
            s.paths.push_back(file + ":" + p);
        }
        out.push_back(std::move(s));
    }
}

bool stopsTheRead(const SetFinding& f)
{
    return f.severity == diagnose::Severity::Error && f.code != "unsafe-callable";  // diagnose::unsafeCode's findings
}

std::string stoppingCodes(const std::vector<SetFinding>& findings)
{
    std::string codes;
    for (const auto& f : findings) {
        codes += stopsTheRead(f) ? (codes.empty() ? "" : ", ") + f.code : "";
    }
    return codes;
}

Error copiesCode(const std::string& what, const std::string& path)
{
    Error e = makeError(ErrorCode::Unsupported, what + std::string(kCallsCode) +
                                                    ": a consolidation copies values as they stand, never one "
                                                    "that runs code");
    e.path = path;
    return e;
}

}  // namespace ckpt::sharded::detail
