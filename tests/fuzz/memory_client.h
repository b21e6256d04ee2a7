// The fuzzers' HTTP client (fuzz_remote, fuzz_dcp_safetensors, fuzz_dcp_zstd): files served from
// memory by URL, every range request answered exactly as nginx answers it (a suffix, or a span cut
// at the end; 416 past it), in 16 KiB pieces, so the remote readers run without a network. A URL it
// does not serve is "HTTP 404", as UrlFolder::missing reads it.
#pragma once

#include "remote/http_client.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace ckpt::fuzz {

class MemoryClient final : public remote::HttpClient {
public:
    explicit MemoryClient(std::map<std::string, Bytes> files)
        : HttpClient({}, {}, std::make_shared<remote::TransferStats>()), files_(std::move(files))
    {
    }

    Expected<std::uint64_t> getRange(const std::string& url, const remote::ByteRange& range,
                                     std::optional<remote::FileIdentity>& identity,
                                     const std::function<bool(Bytes)>& sink) override
    {
        const auto it = files_.find(url);
        if (it == files_.end()) {
            return makeError(ErrorCode::Io, "HTTP 404");
        }
        const Bytes file = it->second;
        const std::uint64_t size = file.size();
        if (!identity) {
            identity = remote::FileIdentity{size, "\"fuzz\""};
        }
        std::uint64_t first = 0;
        std::uint64_t end = 0;
        if (range.kind == remote::ByteRange::Kind::Suffix) {
            first = size - std::min(size, range.length);
            end = size;
        } else {
            if (range.offset >= size || range.length == 0) {
                return makeError(ErrorCode::Io, "HTTP 416");
            }
            first = range.offset;
            end = first + std::min(range.length, size - first);
        }
        constexpr std::uint64_t kPiece = 16384;
        for (std::uint64_t at = first; at < end; at += kPiece) {
            const auto n = static_cast<std::size_t>(std::min(kPiece, end - at));
            if (!sink(file.subspan(static_cast<std::size_t>(at), n))) {
                return makeError(ErrorCode::Cancelled, "stopped");
            }
        }
        return first;
    }

private:
    std::map<std::string, Bytes> files_;
};

}  // namespace ckpt::fuzz
