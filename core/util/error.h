// Errors are values: every core function returns Expected<T>, and the command line and the
// window show Error::message verbatim, so the message must name the file and the real cause.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ckpt {

enum class ErrorCode : std::uint8_t {
    Io,             // cannot open/read/stat
    NotCheckpoint,  // not a format we read (LFS pointer, HTML, TorchScript, random bytes)
    Truncated,      // the file ends before its structure does
    Corrupt,        // structure present but inconsistent
    Unsupported,    // well-formed but a feature we do not read
    Limit,          // a declared size or depth beyond what we accept
    Usage,          // bad arguments
    WriteFailed,    // output could not be written (disk full, permissions)
    Cancelled,
    DeviceUnavailable,
    OutOfMemory,
    LoadFailed,  // the operation ran and failed (exit 1)
    Internal,
};

struct Error {
    ErrorCode code = ErrorCode::Internal;
    std::string message;
    std::string path;                     // file concerned, if any
    std::optional<std::uint64_t> offset;  // byte offset of the problem, if known

    // One line for humans: "<path>: <message> (at byte N)", control characters and invalid UTF-8
    // escaped (printable.h).
    [[nodiscard]] std::string describe() const;
};

// Exit codes shared by every subcommand: 0 success, 1 ran and found problems / failed, 2 bad input.
[[nodiscard]] int exitCodeFor(ErrorCode code);

[[nodiscard]] Error makeError(ErrorCode code, std::string message, std::optional<std::uint64_t> offset = {});

// strerror's text for `err`, safe from the worker threads that read and write (strerror is not).
[[nodiscard]] std::string systemErrorText(int err);

// C++20 has no std::expected; this is the minimal subset the project uses.
template <class T> class [[nodiscard]] Expected {
public:
    Expected(T value) : v_(std::move(value)) {}
    Expected(Error error) : v_(std::move(error)) {}

    [[nodiscard]] bool ok() const { return v_.index() == 0; }
    explicit operator bool() const { return ok(); }
    T& value() & { return std::get<0>(v_); }
    [[nodiscard]] const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    [[nodiscard]] const Error& error() const { return std::get<1>(v_); }
    Error& error() { return std::get<1>(v_); }

private:
    std::variant<T, Error> v_;
};

template <> class [[nodiscard]] Expected<void> {
public:
    Expected() = default;
    Expected(Error error) : e_(std::move(error)) {}
    [[nodiscard]] bool ok() const { return !e_.has_value(); }
    explicit operator bool() const { return ok(); }
    [[nodiscard]] const Error& error() const { return *e_; }
    Error& error() { return *e_; }

private:
    std::optional<Error> e_;
};

}  // namespace ckpt
