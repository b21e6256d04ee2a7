#include "cli/dcp_cli.h"

#include "cli/cli.h"
#include "cli/common.h"
#include "cli/set_text.h"
#include "cli/sharded_cli.h"
#include "sharded/dcp.h"
#include "sharded/fsdp.h"
#include "util/bytes.h"
#include "util/printable.h"

#include <filesystem>
#include <ostream>

namespace ckpt::cli {

namespace {

std::optional<Expected<sharded::dcp::Set>> openIfDcp(const std::string& input)
{
    const auto loc = sharded::detectSet(input);
    if (loc.kind != sharded::SetKind::Dcp) {
        return std::nullopt;
    }
    return sharded::dcp::open(loc);
}

std::optional<Expected<sharded::fsdp::Set>> openIfFsdp(const std::string& input)
{
    const auto loc = sharded::detectSet(input);
    if (loc.kind != sharded::SetKind::FsdpRanks) {
        return std::nullopt;
    }
    std::error_code ec;
    return sharded::fsdp::open(loc, std::filesystem::is_regular_file(input, ec));
}

// What convert says of a set it consolidated as it stands, or why it could not.
int printWritten(const Expected<sharded::ConsolidateResult>& done, const char* files, const std::string& input,
                 std::ostream& out, std::ostream& err)
{
    if (!done) {
        printError(err, done.error(), input);
        return exitCodeFor(done.error().code);
    }
    out << "wrote " << displayText(done->path) << " (" << humanBytes(done->bytes) << ", " << done->tensors
        << " tensors assembled from " << done->files << " " << files << ")\n";
    return kExitOk;
}

}  // namespace

std::optional<int> inspectDcp(const std::string& input, bool json, std::ostream& out, std::ostream& err)
{
    if (auto rc = withSet(openIfFsdp(input), input, err, [&](const sharded::fsdp::Set& set) {
            return printSet(sharded::listingOf(set), set.oneFile ? set.files.front().path : set.loc.dir, json, out);
        })) {
        return rc;
    }
    return withSet(openIfDcp(input), input, err, [&](const sharded::dcp::Set& set) {
        return printSet(sharded::listingOf(set), set.loc.dir, json, out);
    });
}

std::optional<int> checkDcp(const std::string& input, bool json, const diagnose::CheckOptions& opts, std::ostream& out,
                            std::ostream& err)
{
    if (auto rc = withSet(openIfFsdp(input), input, err, [&](const sharded::fsdp::Set& ranks) {
            if (ranks.oneFile) {
                return printSetFindings(ranks.findings, ranks.files.front().path, json, out);
            }
            return checkSetView(input, ranks.findings, sharded::fsdp::view(ranks), opts, ranks.loc.dir, json, out, err);
        })) {
        return rc;
    }
    return withSet(openIfDcp(input), input, err, [&](const sharded::dcp::Set& set) {
        return checkSetView(input, set.findings, sharded::dcp::view(set), opts, set.loc.dir, json, out, err);
    });
}

std::optional<int> convertDcp(const std::string& input, const std::string& output, std::ostream& out, std::ostream& err)
{
    if (auto rc = withSet(openIfFsdp(input), input, err, [&](const sharded::fsdp::Set& ranks) {
            return printWritten(sharded::fsdp::consolidate(ranks, output), "rank files", input, out, err);
        })) {
        return rc;
    }
    return withSet(openIfDcp(input), input, err, [&](const sharded::dcp::Set& set) {
        return printWritten(sharded::dcp::consolidate(set, output), "DCP data files", input, out, err);
    });
}

}  // namespace ckpt::cli
