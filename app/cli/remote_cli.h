// What every subcommand does with remote inputs (http(s) URLs, hf:// Hub locations, s3:// objects): one session
// per run that opens them through core/remote's one path (openRemoteInput), takes --header, and
// says what the run fetched: one line on stderr, or a "remote" member in --json output.
#pragma once

#include "checkpoint/checkpoint.h"
#include "remote/http_client.h"
#include "remote/open_remote.h"
#include "util/error.h"

#include <CLI/CLI.hpp>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace ckpt::cli {

class ProgressLine;

class RemoteSession {
public:
    // Adds the repeatable --header option, --download (unless `withDownload` is false: a command
    // that downloads every remote input) and --no-sign-request to a command.
    void addOptions(CLI::App& app, bool withDownload = true);
    // A progress line on `err` (cli/progress.h: rewritten in place once transfers pass a second, on a
    // terminal, never with --json or --quiet) while no other work shows its own. report() erases it.
    void showProgress(std::ostream& err, bool json);
    [[nodiscard]] static bool isRemote(const std::string& input);
    // Opens a remote input (isRemote): a file, or a sharded set with its view as one checkpoint.
    Expected<remote::RemoteInput> openInput(const std::string& input);
    // What the remote `input` names (a file, or a set's members) downloaded whole into the new
    // folder `dir` (remote::downloadRemote).
    Expected<remote::Downloaded> download(const std::string& input, const std::string& dir, bool fileOnly);
    // openInput()'s checkpoint (a set's view).
    Expected<CheckpointPtr> open(const std::string& input);
    // What an s3:// output is written with: --no-sign-request, and the run's counters.
    [[nodiscard]] bool noSignRequest() const { return noSignRequest_; }
    [[nodiscard]] const std::shared_ptr<remote::TransferStats>& stats() const { return stats_; }
    [[nodiscard]] bool used() const { return used_; }
    [[nodiscard]] std::uint64_t bytesRead() const { return stats_->bytesRead.load(); }
    [[nodiscard]] std::uint64_t requests() const { return stats_->requests.load(); }
    // "remote: 3 requests, 81.2 KiB read of 1.0 GiB" on `err`, once a remote input was opened.
    void report(std::ostream& err) const;
    // One JSON object's text with a "remote" member ({"bytes_read", "requests"}) added as its last,
    // when a remote input was opened; unchanged otherwise.
    [[nodiscard]] std::string withJson(std::string json) const;

private:
    std::vector<std::string> headers_;
    bool download_ = false;
    bool noSignRequest_ = false;
    std::shared_ptr<remote::TransferStats> stats_ = std::make_shared<remote::TransferStats>();
    std::uint64_t remoteBytes_ = 0;  // the opened files' sizes
    bool used_ = false;
    bool opened_ = false;
    std::shared_ptr<ProgressLine> progress_;
};

}  // namespace ckpt::cli
