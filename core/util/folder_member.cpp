#include "util/folder_member.h"

#include <filesystem>

namespace ckpt {

namespace fs = std::filesystem;

namespace {

std::string fileKind(const fs::file_status& st)
{
    switch (st.type()) {
    case fs::file_type::directory:
        return "a directory";
    case fs::file_type::fifo:
        return "a named pipe (FIFO)";
    case fs::file_type::socket:
        return "a socket";
    case fs::file_type::block:
    case fs::file_type::character:
        return "a device";
    default:
        return "not a regular file";
    }
}

// huggingface_hub's cache: snapshots/REV/NAME is a symlink to ../../blobs/HASH.
bool isHubBlob(const fs::path& home, const fs::path& real)
{
    return home.parent_path().filename() == "snapshots" &&
           real.parent_path() == home.parent_path().parent_path() / "blobs";
}

}  // namespace

Expected<std::string> memberOfFolder(const std::string& folder, const std::string& name, const std::string& entry)
{
    const fs::path dir = folder.empty() ? fs::path(".") : fs::path(folder);
    auto refuse = [&](const std::string& why) {
        Error e = makeError(ErrorCode::Corrupt,
                            entry + " names '" + name + "', " + why +
                                ": a set (or a model's folder) reads only regular files inside its own folder, so "
                                "nothing was read from it");
        e.path = folder;
        return e;
    };
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos) {
        return refuse("which is not a file name in " + dir.string());
    }
    const fs::path p = dir / name;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(p, ec))) {
        return p.string();
    }
    const fs::path real = fs::canonical(p, ec);
    if (ec) {
        return p.string();  // a dangling link reads as a missing file
    }
    const fs::path home = fs::canonical(dir, ec);
    if (!ec && real.parent_path() != home && !isHubBlob(home, real)) {
        return refuse("which resolves to " + real.string() + ", outside " + home.string());
    }
    const auto st = fs::status(real, ec);
    if (!ec && !fs::is_regular_file(st)) {
        return refuse("which is " + fileKind(st) + ", not a regular file");
    }
    return p.string();
}

}  // namespace ckpt
