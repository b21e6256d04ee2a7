#include "checkpoint/file_formats.h"

#include "checkpoint/loaders.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace ckpt {
namespace {

bool startsWith(Bytes b, std::string_view prefix)
{
    return b.size() >= prefix.size() && std::memcmp(b.data(), prefix.data(), prefix.size()) == 0;
}

bool startsLikeZip(Bytes head, std::uint64_t /*size*/)
{
    return startsWith(head, "PK\x03\x04") || startsWith(head, "PK\x05\x06");
}

bool startsLikeTar(Bytes head, std::uint64_t /*size*/)
{
    return detail::startsLikeTorchTar(head);
}

bool startsLikeLegacy(Bytes head, std::uint64_t /*size*/)
{
    return !head.empty() && detail::startsLikeLegacyStream(head);
}

// Structure first: a safetensors header length of 0x3C20 starts with the bytes `20 3c`, which the
// text sniffing would take for an HTML page. torch.load tries a tar before a legacy stream
// (PyTorch < 0.1.10 wrote checkpoints as tar archives).
const std::array<FileFormat, 4> kFileFormats{{
    {.id = Format::TorchZip,
     .key = "torch-zip",
     .what = "a torch.save zip archive",
     .sniff = startsLikeZip,
     .load = detail::loadZip,
     .loadRanged = detail::loadZipRanged,
     .firstLook = FileFormat::Look::Tail,
     .zipArchive = true},
    {.id = Format::Safetensors,
     .key = "safetensors",
     .what = "a safetensors file",
     .sniff = detail::startsLikeSafetensors,
     .load = detail::loadSafetensors,
     .loadRanged = detail::loadSafetensorsRanged,
     .pickled = false},
    {.id = Format::TorchTar,
     .key = "torch-tar",
     .what = "a PyTorch 0.1 tar archive",
     .sniff = startsLikeTar,
     .load = detail::loadTorchTar},
    {.id = Format::TorchLegacy,
     .key = "torch-legacy",
     .what = "a legacy torch.save stream",
     .sniff = startsLikeLegacy,
     .weakSniff = true,
     .load = detail::loadLegacy,
     .loadRanged = detail::loadLegacyRanged},
}};

}  // namespace

std::span<const FileFormat> fileFormats()
{
    return kFileFormats;
}

const FileFormat& fileFormat(Format id)
{
    return *std::ranges::find(kFileFormats, id, &FileFormat::id);  // every Format has its entry
}

std::string_view formatName(Format f)
{
    return fileFormat(f).key;
}

}  // namespace ckpt
