// Every single-file format ckptscope reads, one entry each, in the order a file is recognised: its
// id, its names, how its first bytes give it away, its reader for a mapped or in-memory file and,
// where it has one, for ranges of a source that is not (a file over HTTP), and the facts the front
// ends ask of a checkpoint instead of comparing format values. Adding a format is its reader in a
// file of its own (loaders.h), one entry in file_formats.cpp, its section in docs/format.md and a
// fixture generator; docs/design.md ("Adding a format") lists what else it may touch. Sets (several
// files) have their own registry, core/sharded/formats.h.
#pragma once

#include "checkpoint/checkpoint.h"

#include <memory>
#include <span>
#include <string_view>

namespace ckpt {

struct MemoryBudget;  // util/budget.h

namespace detail {
// What a ranged reader made of its source.
enum class RangedRead : std::uint8_t {
    Read,           // `c` holds the file's contents
    NotThisFormat,  // the file is no file of this format: the next one is tried
    ReadWhole,      // this format, but not readable from ranges (a truncated zip, an export archive)
};
// A ranged reader: `c` has its path, input and fileSize; a reader may replace it.
using RangedReader = Expected<RangedRead> (*)(std::shared_ptr<Checkpoint>& c, MemoryBudget& budget,
                                              std::uint64_t wholeLimit);
}  // namespace detail

struct FileFormat {
    Format id = Format::TorchZip;
    std::string_view key;   // formatName(): "torch-zip", in JSON and messages
    std::string_view what;  // for people: "a torch.save zip archive"
    // Whether a file whose first bytes are `head` (the whole file when it is smaller) and whose size
    // is `size` is of this format.
    bool (*sniff)(Bytes head, std::uint64_t size) = nullptr;
    // A sniff that text could pass (a legacy stream's first byte may be '(', 'L' or 'I'): tried only
    // after the sniffing of what is no checkpoint (text files, HTML pages, images), not before.
    bool weakSniff = false;
    // The reader of a mapped or in-memory file (`c.bytes`).
    Expected<void> (*load)(Checkpoint& c, MemoryBudget& budget) = nullptr;
    // The reader of ranges of a source that is not mapped; none: such a file is read whole.
    detail::RangedReader loadRanged = nullptr;
    // Where that reader looks first: formats whose first look a source already holds are tried
    // first (an HTTP source's first request reads the head of a .safetensors file, the tail of any
    // other), so telling formats apart costs no request where it can be helped.
    enum class Look : std::uint8_t { Head, Tail };
    Look firstLook = Look::Head;

    // What a checkpoint of this format has, for the front ends:
    bool pickled = true;      // values from pickles (a protocol, objects, globals); safetensors' from JSON
    bool zipArchive = false;  // named records with CRCs, an archive folder and a byteorder record
};

// In the order files are recognised.
[[nodiscard]] std::span<const FileFormat> fileFormats();
[[nodiscard]] const FileFormat& fileFormat(Format id);

}  // namespace ckpt
