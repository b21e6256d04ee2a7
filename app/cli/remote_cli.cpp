#include "cli/remote_cli.h"

#include "cli/common.h"
#include "cli/progress.h"
#include "remote/location.h"
#include "remote/open_remote.h"
#include "util/bytes.h"

namespace ckpt::cli {

void RemoteSession::showProgress(std::ostream& err, bool json)
{
    progress_ = std::make_shared<ProgressLine>(err, json, "remote", true);
    if (!progress_->active()) {
        return;
    }
    // Weak: the counters can outlive the session (an opened file holds them), its line cannot.
    stats_->progress = [weak = std::weak_ptr<ProgressLine>(progress_), stats = stats_.get()](std::uint64_t received) {
        if (const auto line = weak.lock()) {
            const auto n = stats->requests.load();
            line->update(received, 0, std::to_string(n) + (n == 1 ? " request" : " requests"));
        }
    };
}

void RemoteSession::addOptions(CLI::App& app, bool withDownload)
{
    app.add_option("--header", headers_,
                   "an HTTP header for a URL input's own host, 'Name: value' (e.g. 'Authorization: Bearer TOKEN'); "
                   "repeatable. Hub inputs (hf://) use HF_TOKEN or the `huggingface-cli login` token")
        ->type_name("HEADER");
    if (withDownload) {
        app.add_flag("--download", download_,
                     "a URL whose server does not support range requests is downloaded whole into a temporary "
                     "file (unlinked: nothing is left behind) instead of refused");
    }
    app.add_flag("--no-sign-request", noSignRequest_,
                 "s3:// requests are sent unsigned, for a public bucket (as the AWS CLI's option); otherwise they "
                 "are signed with the credentials the AWS CLI would use (AWS_ACCESS_KEY_ID, AWS_PROFILE, "
                 "~/.aws/credentials)");
}

bool RemoteSession::isRemote(const std::string& input)
{
    return remote::isRemote(input);
}

Expected<remote::RemoteInput> RemoteSession::openInput(const std::string& input)
{
    used_ = true;
    remote::RemoteOptions options;
    options.stats = stats_;
    options.download = download_;
    options.noSignRequest = noSignRequest_;
    auto r = remote::openRemote(input, headers_, options);
    if (progress_) {
        progress_->clear();  // what the command prints next (a plan, a report, an error) starts the line
    }
    if (r) {
        remoteBytes_ += r->checkpoint ? (*r->checkpoint)->fileSize : 0;
        opened_ = true;
    }
    return r;
}

Expected<remote::Downloaded> RemoteSession::download(const std::string& input, const std::string& dir, bool fileOnly)
{
    used_ = true;
    remote::RemoteOptions options;
    options.stats = stats_;
    options.noSignRequest = noSignRequest_;
    auto got = remote::downloadRemote(input, headers_, options, dir, fileOnly);
    if (progress_) {
        progress_->clear();
    }
    if (got) {
        remoteBytes_ += got->bytes;
        opened_ = true;
    }
    return got;
}

Expected<CheckpointPtr> RemoteSession::open(const std::string& input)
{
    auto r = openInput(input);
    if (!r) {
        return r.error();
    }
    return r->checkpoint;
}

void RemoteSession::report(std::ostream& err) const
{
    if (progress_) {
        progress_->finish();
    }
    if (!opened_) {  // a failure is its one error line alone
        return;
    }
    const auto n = requests();
    err << "remote: " << n << (n == 1 ? " request, " : " requests, ") << humanBytes(bytesRead()) << " read";
    if (remoteBytes_ > 0) {
        err << " of " << humanBytes(remoteBytes_);
    }
    err << '\n';
}

std::string RemoteSession::withJson(std::string json) const
{
    if (!used_) {
        return json;
    }
    const auto close = json.rfind('}');
    if (close == std::string::npos) {
        return json;
    }
    std::size_t last = close;  // the object's last character before its closing brace
    while (last > 0 && (json[last - 1] == '\n' || json[last - 1] == ' ')) {
        --last;
    }
    const std::string member = ",\n \"remote\": {\"bytes_read\": " + std::to_string(bytesRead()) +
                               ", \"requests\": " + std::to_string(requests()) + "}\n";
    json.replace(last, close - last, member);
    return json;
}

}  // namespace ckpt::cli
