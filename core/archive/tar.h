// The members of an uncompressed tar archive, as PyTorch < 0.1.10 wrote checkpoints
// (docs/format.md §3.3) and Python's tarfile reads them back.
//
// Layout (POSIX.1-1988 ustar, with the GNU and pax extensions tarfile writes):
//   512-byte header: name[100] mode[8] uid[8] gid[8] size[12] mtime[12] chksum[8] typeflag[1]
//                    linkname[100] magic[6] ("ustar\0" or GNU "ustar  ") version[2] uname[32]
//                    gname[32] devmajor[8] devminor[8] prefix[155] (ustar: the path's directory)
//   then the member's data, padded to a multiple of 512; two zero blocks end the archive.
// Numbers are octal text, or base-256 with the high bit of the first byte set (GNU, large sizes).
// The checksum is the sum of the header's bytes with the checksum field read as spaces.
// Typeflag 'x' is a pax header for the next member ("LEN path=...\n", "LEN size=...\n"), 'g' a
// global one (ignored), 'L' a GNU long name for the next member.
#pragma once

#include "util/bytes.h"
#include "util/error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ckpt::archive {

struct TarMember {
    std::string name;
    std::uint64_t offset = 0;  // of the data in the archive
    std::uint64_t size = 0;
    char type = '0';  // '0' or '\0' a regular file
};

// Every member of the archive, in order. A header whose checksum does not match, a size that runs
// past the end, or malformed pax records are Corrupt/Truncated errors with the header's offset.
Expected<std::vector<TarMember>> parseTar(Bytes file);

// The member named `name` that Python's tarfile (and so torch.load) reads: getmember() takes the
// last one so named. nullptr when there is none, or when that last one is no regular file (torch
// fails on it too). A harmless first `pickle` cannot hide a second one torch would load.
[[nodiscard]] const TarMember* findMember(const std::vector<TarMember>& members, std::string_view name);

// The names more than one member carries, sorted: a crafted file shows one reader one member and
// another reader the other (reported as `duplicate-member`).
[[nodiscard]] std::vector<std::string> duplicatedNames(const std::vector<TarMember>& members);

}  // namespace ckpt::archive
