#include "cli/remote_cli.h"

#include "cli/common.h"
#include "remote/location.h"
#include "remote/open_remote.h"
#include "util/bytes.h"

#include <cstdlib>
#include <string_view>

namespace ckpt::cli {

// The progress line's state (remote::throttledProgress says when it is written).
struct RemoteSession::Progress {
    std::ostream* err = nullptr;
    bool shown = false;
};

void RemoteSession::showProgress(std::ostream& err)
{
    const char* force = std::getenv("CKPTSCOPE_PROGRESS");  // NOLINT(concurrency-mt-unsafe): before any thread
    if (!stderrIsTerminal() && !(force != nullptr && std::string_view(force) == "1")) {
        return;
    }
    progress_ = std::make_shared<Progress>();
    progress_->err = &err;
    stats_->progress = remote::throttledProgress([p = progress_, stats = stats_.get()](std::uint64_t received) {
        p->shown = true;
        // The cursor goes back to the line's start, so whatever is printed next (the summary, an
        // error) writes over the progress line.
        *p->err << "remote: " << humanBytes(received) << " read, " << stats->requests.load() << " requests"
                << "\x1b[K\r" << std::flush;
    });
}

void RemoteSession::addOptions(CLI::App& app)
{
    app.add_option("--header", headers_,
                   "an HTTP header for a URL input's own host, 'Name: value' (e.g. 'Authorization: Bearer TOKEN'); "
                   "repeatable. Hub inputs (hf://) use HF_TOKEN or the `huggingface-cli login` token")
        ->type_name("HEADER");
    app.add_flag("--download", download_,
                 "a URL whose server does not support range requests is downloaded whole into a temporary "
                 "file (unlinked: nothing is left behind) instead of refused");
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
    auto r = remote::openRemote(input, headers_, options);
    if (r) {
        remoteBytes_ += r->checkpoint ? (*r->checkpoint)->fileSize : 0;
        opened_ = true;
    }
    return r;
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
    if (progress_ && progress_->shown) {
        err << "\x1b[K";
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
