// libFuzzer entry for DCP's newer layouts, built twice (fuzz.cmake): fuzz_dcp_safetensors and
// fuzz_dcp_zstd. Each input is the one data file `__0_0.distcp` of a folder whose `.metadata` is that
// of a real PyTorch 2.x save in the layout (tests/fuzz/dcp_templates, CKPTSCOPE_FUZZ_TEMPLATE): the
// safetensors file that ends it (its header, DCP_SHARDING_INFO, the chunk bytes) or its zstd frames
// mutated. The set is opened, listed, and when whole every storage of its view is read: any bytes
// must give a set, a finding or an error, never a crash, hang or sanitizer report, and never more
// memory than an item's limit. The same folder is then read as a folder URL is (a UrlFolder over
// memory_client.h's server): nothing mapped, a zstd frame fetched before it is inflated, a
// safetensors header read from the file's end by range (issue 37 step 3a). Where both reads give a
// storage's bytes, they must be the same bytes.
#include "memory_client.h"
#include "remote/remote_folder.h"
#include "sharded/dcp.h"
#include "sharded/listing.h"
#include "sharded/sharded.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;

// A folder of this process's own holding the template's .metadata; the data file is each input.
// Removed when the fuzzer exits.
struct Folder {
    fs::path dir = fs::temp_directory_path() / ("ckptscope-fuzz-dcp-" + std::to_string(::getpid()));
    Folder()
    {
        fs::create_directories(dir);
        fs::copy_file(fs::path(CKPTSCOPE_FUZZ_TEMPLATE) / ".metadata", dir / ".metadata",
                      fs::copy_options::overwrite_existing);
    }
    Folder(const Folder&) = delete;
    Folder& operator=(const Folder&) = delete;
    ~Folder()
    {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

const fs::path& folder()
{
    static const Folder f;
    return f.dir;
}

// The template's .metadata, as the in-memory server gives it.
const std::vector<std::byte>& metadataBytes()
{
    static const std::vector<std::byte> bytes = [] {
        std::ifstream f(fs::path(CKPTSCOPE_FUZZ_TEMPLATE) / ".metadata", std::ios::binary);
        std::vector<char> chars((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        std::vector<std::byte> out(chars.size());
        std::transform(chars.begin(), chars.end(), out.begin(), [](char c) { return static_cast<std::byte>(c); });
        return out;
    }();
    return bytes;
}

// Every storage of `view`, whole, or nullopt where one could not be read.
std::vector<std::optional<std::vector<std::byte>>> storagesOf(const ckpt::Checkpoint& view)
{
    std::vector<std::optional<std::vector<std::byte>>> all;
    for (std::uint32_t i = 0; i < view.storages.size(); ++i) {
        const ckpt::StorageIndex s{i};
        std::vector<std::byte> got;
        auto r = view.streamStorage(s, 0, view.storages[s].nbytes, [&got](ckpt::Bytes b) {
            got.insert(got.end(), b.begin(), b.end());
            return true;
        });
        all.push_back(r ? std::optional(std::move(got)) : std::nullopt);
    }
    return all;
}

// The folder as a URL: .metadata and the input as __0_0.distcp, listed as an S3 prefix lists them.
ckpt::Expected<ckpt::CheckpointPtr> viewByUrl(ckpt::Bytes data)
{
    const std::string base = "http://127.0.0.1/dcp/";
    auto client = std::make_shared<ckpt::fuzz::MemoryClient>(std::map<std::string, ckpt::Bytes>{
        {base + ".metadata", ckpt::Bytes(metadataBytes())}, {base + "__0_0.distcp", data}});
    auto remote = std::make_shared<const ckpt::remote::UrlFolder>(
        client, base, base, std::vector<std::string>{".metadata", "__0_0.distcp"});
    const ckpt::sharded::SetLocation loc{ckpt::sharded::SetKind::Dcp, remote->shown(), remote->pathOf(".metadata"),
                                         "torch.distributed.checkpoint (DCP) directory"};
    auto set = ckpt::sharded::dcp::open(remote, loc);
    if (!set) {
        return set.error();
    }
    (void)ckpt::sharded::listingOf(*set);
    return ckpt::sharded::dcp::view(*set);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const fs::path& dir = folder();
    {
        std::ofstream f(dir / "__0_0.distcp", std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(data),  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
                static_cast<std::streamsize>(size));
    }
    // On disk: mapped, as a local folder is read.
    std::optional<std::vector<std::optional<std::vector<std::byte>>>> local;
    if (const auto loc = ckpt::sharded::detectSet(dir.string()); loc.kind == ckpt::sharded::SetKind::Dcp) {
        if (auto set = ckpt::sharded::dcp::open(loc)) {
            (void)ckpt::sharded::listingOf(*set);
            if (auto view = ckpt::sharded::dcp::view(*set)) {
                local = storagesOf(**view);
            }
        }
    }
    // By URL, whatever the local read made of it.
    auto remote = viewByUrl(ckpt::Bytes(reinterpret_cast<const std::byte*>(data),  // NOLINT
                                        size));
    if (!remote) {
        return 0;
    }
    const auto byUrl = storagesOf(**remote);
    if (!local) {
        return 0;
    }
    if (byUrl.size() != local->size()) {
        std::abort();  // the same folder gave another set by URL
    }
    for (std::size_t i = 0; i < byUrl.size(); ++i) {
        if ((*local)[i] && byUrl[i] && *(*local)[i] != *byUrl[i]) {
            std::abort();  // a storage read by range is not what the file holds
        }
    }
    return 0;
}
