// Giving a file mapping's pages back once they are read. Its own header, so the one function does
// not touch util/bytes.h, which every file includes.
#pragma once

#include "util/bytes.h"

namespace ckpt {

// Drops the whole pages of `range` (a part of file.bytes()) from the process's resident set once
// they are read: the mapping is read-only, so they stay in the page cache and fault back in if read
// again. A stream through a large file then holds a piece of it, not all it has read. Advisory: a
// range outside the mapping, or a failure, leaves the pages as they are.
void releaseMappedPages(const MappedFile& file, Bytes range);

}  // namespace ckpt
