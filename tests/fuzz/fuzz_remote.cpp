// libFuzzer over what core/remote makes of a server's bytes, without a network: the input is
// served by an in-memory client that answers range requests exactly (memory_client.h), so the whole
// remote open runs over it (the first suffix or head range, the zip's directory and the records
// fetched in merged ranges with torch-shaped local headers assumed, the safetensors header, a
// legacy stream's pickles with its record counts assumed), then every storage is read through the
// header checks. Where the input reads as a torch zip, safetensors or legacy file from memory too,
// every storage both read must give the same bytes (a legacy record whose count is forged further
// along moved what a remote read gave; issue 38). The same bytes, as text, go through the parsers of
// reply headers, the Hub API's reply and an index's shard names, and as a range reply's status,
// Content-Range and ETag through the checks every reply passes (checkRangeReply): what they accept
// must be the range asked for, of the size the first reply gave.
#include "checkpoint/checkpoint.h"
#include "memory_client.h"
#include "remote/open_remote.h"
#include "remote/reply_parse.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

std::vector<std::byte> readAll(const ckpt::Checkpoint& c, ckpt::StorageIndex s, bool& ok)
{
    std::vector<std::byte> out;
    auto r = c.streamStorage(s, 0, c.storages[s].nbytes, [&](ckpt::Bytes b) {
        out.insert(out.end(), b.begin(), b.end());
        return true;
    });
    ok = static_cast<bool>(r);
    return out;
}

void parseAsText(std::string_view text)
{
    (void)ckpt::remote::parseContentRange(text);
    (void)ckpt::remote::parseNumber(text);
    (void)ckpt::remote::retryAfterSeconds(std::string(text));
    // A name a listing gives is a path of the repository; an index's shard names are file names.
    if (const auto file = ckpt::remote::repositoryFileOf(text, "org/repo");
        file && !ckpt::remote::isRepositoryPath(*file)) {
        std::abort();
    }
    for (const auto& name : ckpt::remote::shardNamesOf(text)) {
        if (!ckpt::remote::isPlainFileName(name)) {
            std::abort();
        }
    }
}

// Two replies to two range requests, from the text's lines: the asked range (offset length, or
// "-length" for a suffix), the status, the Content-Range and the ETag of each. An accepted reply
// holds the bytes asked for, within the size the first reply gave, and a second reply accepted has
// that size and ETag.
void checkReplies(std::string_view text)
{
    std::vector<std::string> lines;
    for (std::size_t at = 0; at <= text.size() && lines.size() < 8;) {
        const std::size_t nl = std::min(text.find('\n', at), text.size());
        lines.emplace_back(text.substr(at, nl - at));
        at = nl + 1;
    }
    lines.resize(8);
    std::optional<ckpt::remote::FileIdentity> identity;
    for (std::size_t r = 0; r < 2; ++r) {
        const std::string& asked = lines[4 * r];
        ckpt::remote::ByteRange range;
        if (asked.starts_with('-')) {
            range = {ckpt::remote::ByteRange::Kind::Suffix, 0,
                     ckpt::remote::parseNumber(std::string_view(asked).substr(1)).value_or(1)};
        } else {
            const auto sp = asked.find(' ');
            range.offset = ckpt::remote::parseNumber(std::string_view(asked).substr(0, sp)).value_or(0);
            range.length = sp == std::string::npos
                               ? 1
                               : ckpt::remote::parseNumber(std::string_view(asked).substr(sp + 1)).value_or(1);
        }
        if (range.length == 0 || range.offset > UINT64_MAX - range.length) {
            continue;  // no request asks for nothing or past 2^64
        }
        const long status = static_cast<long>(ckpt::remote::parseNumber(lines[4 * r + 1]).value_or(206));
        const auto before = identity;
        const auto got = ckpt::remote::checkRangeReply(range, status, lines[4 * r + 2], lines[4 * r + 3], identity);
        if (!got) {
            continue;
        }
        const bool inside = identity && got->length <= range.length && got->first <= identity->size &&
                            got->length <= identity->size - got->first;
        const bool asAsked = range.kind == ckpt::remote::ByteRange::Kind::Suffix
                                 ? got->first + got->length == identity->size
                                 : got->first == range.offset;
        const bool same = !before || (before->size == identity->size && before->etag == identity->etag);
        if (!inside || !asAsked || !same) {
            std::abort();
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const ckpt::Bytes bytes(reinterpret_cast<const std::byte*>(data), size);    // NOLINT
    parseAsText(std::string_view(reinterpret_cast<const char*>(data), size));   // NOLINT
    checkReplies(std::string_view(reinterpret_cast<const char*>(data), size));  // NOLINT
    if (size == 0) {
        return 0;
    }
    ckpt::remote::RemoteOptions options;
    options.wholeFileLimit = std::uint64_t{8} << 20;
    // The name picks the first request: a head range for a .safetensors name, a suffix otherwise.
    const std::string url = (size % 2 == 0) ? "http://127.0.0.1/f.pt" : "http://127.0.0.1/f.safetensors";
    auto client = std::make_shared<ckpt::fuzz::MemoryClient>(std::map<std::string, ckpt::Bytes>{{url, bytes}});
    auto remote = ckpt::remote::openRemoteFile(client, url, "f", options);
    if (!remote) {
        return 0;
    }
    const auto local = ckpt::readCheckpoint(bytes, "f");
    const bool compare =
        local && (*local)->format == (*remote)->format && (*remote)->storages.size() == (*local)->storages.size() &&
        ((*remote)->format == ckpt::Format::TorchZip || (*remote)->format == ckpt::Format::Safetensors ||
         (*remote)->format == ckpt::Format::TorchLegacy);
    std::uint64_t budget = std::uint64_t{8} << 20;
    for (std::uint32_t i = 0; i < (*remote)->storages.size(); ++i) {
        const ckpt::StorageIndex s{i};
        if (!(*remote)->storages[s].present || (*remote)->storages[s].nbytes > budget) {
            continue;
        }
        budget -= (*remote)->storages[s].nbytes;
        bool remoteOk = false;
        const auto got = readAll(**remote, s, remoteOk);
        if (!compare || !remoteOk || !(*local)->storages[s].present) {
            continue;
        }
        bool localOk = false;
        const auto want = readAll(**local, s, localOk);
        if (localOk && got != want) {
            std::abort();  // the remote read gave other bytes than the file holds
        }
    }
    return 0;
}
