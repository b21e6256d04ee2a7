#include "util/error.h"

#include "util/printable.h"

#include <system_error>

namespace ckpt {

std::string Error::describe() const
{
    // Paths and messages quote names from files: one line, whatever bytes those names hold.
    std::string out;
    if (!path.empty()) {
        out += displayText(path);
        out += ": ";
    }
    out += displayText(message);
    if (offset) {
        out += " (at byte " + std::to_string(*offset) + ")";
    }
    return out;
}

int exitCodeFor(ErrorCode code)
{
    switch (code) {
    case ErrorCode::Io:
    case ErrorCode::NotCheckpoint:
    case ErrorCode::Truncated:
    case ErrorCode::Corrupt:
    case ErrorCode::Unsupported:
    case ErrorCode::Limit:
    case ErrorCode::Usage:
        return 2;
    default:
        return 1;
    }
}

Error makeError(ErrorCode code, std::string message, std::optional<std::uint64_t> offset)
{
    return Error{code, std::move(message), {}, offset};
}

std::string systemErrorText(int err)
{
    return std::generic_category().message(err);
}

}  // namespace ckpt
