#include "sharded/members.h"

#include "sharded/open_control.h"
#include "util/progress.h"

#include <cerrno>
#include <filesystem>
#include <sys/stat.h>

namespace ckpt::sharded {

Expected<void> checkSameFile(const std::string& path, const FileIdentity& first, const FileIdentity& now)
{
    if (now == first) {
        return {};
    }
    const bool replaced = now.dev != first.dev || now.ino != first.ino;
    std::string what = replaced                 ? "was replaced by another file"
                       : now.size != first.size ? "changed size (" + std::to_string(first.size) +
                                                      " bytes when first read, " + std::to_string(now.size) + " now)"
                                                : "was rewritten (its modification time changed)";
    Error e = makeError(ErrorCode::Io, what + " while the set was being read; nothing read from it can be trusted: "
                                              "read the set again once it is complete");
    e.path = path;
    return e;
}

Expected<void> checkStillSame(const std::string& path, const FileIdentity& first)
{
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        Error e = makeError(ErrorCode::Io, "disappeared while the set was being read (" + systemErrorText(errno) + ")");
        e.path = path;
        return e;
    }
    return checkSameFile(path, first, identityOf(st));
}

namespace {

// Every member open now has not faulted (a mapping's SIGBUS guard), and every member read is still
// the file it was: a member closed since it was read cannot say whether a read of it faulted, but
// a file that shrank (the only way a read faults) has another size now.
template <typename Open, typename Members>
Expected<void> checkMembersUnchanged(const std::vector<std::shared_ptr<const Open>>& open, const Members& members)
{
    for (const auto& o : open) {
        if (auto same = o->checkUnchanged(); !same) {
            return same;
        }
    }
    for (const auto& m : members) {
        if (m.kept) {
            if (auto same = m.kept->checkUnchanged(); !same) {
                return same;
            }
        } else if (m.present) {
            if (auto same = checkStillSame(m.path, m.identity); !same) {
                return same;
            }
        }
    }
    return {};
}

}  // namespace

Expected<void> MemberFiles::add(const std::string& name, const std::string& entry)
{
    Member m;
    m.name = name;
    m.path = state_->folder->pathOf(name);
    const std::size_t i = state_->members.size();
    auto opened = state_->folder->open(name, entry);
    if (!opened && opened.error().code == ErrorCode::Corrupt) {
        return opened.error();  // the member rule: nothing was read
    }
    if (opened) {
        m.size = (*opened)->size();
        m.identity = identityOfFd((*opened)->fd());
        m.present = !state_->folder->local() || m.identity.has_value();
        m.error = m.present ? std::string() : "cannot stat it";
        if (!state_->folder->local()) {
            m.kept = *opened;
        }
    } else {
        m.error = opened.error().message;
    }
    state_->members.push_back(std::move(m));
    if (state_->members.back().present && state_->folder->local()) {
        // Cached as the first one to use: the set's checks read the members in this order.
        (void)state_->open.get(i, [&]() -> Expected<source::SourcePtr> { return *opened; });
    }
    return {};
}

Expected<source::SourcePtr> MemberFiles::source(std::size_t i) const
{
    const Member& m = state_->members.at(i);
    if (!m.present) {
        Error e = makeError(ErrorCode::Io, m.error.empty() ? "cannot be read" : m.error);
        e.path = m.path;
        return e;
    }
    progress::noteReading(m.path);  // which member a progress line names
    if (m.kept) {
        return m.kept;
    }
    return state_->open.get(i, [&]() -> Expected<source::SourcePtr> {
        auto opened = state_->folder->open(m.name, "the set");
        if (!opened) {
            return opened.error();
        }
        const auto identity = identityOfFd((*opened)->fd());
        if (auto same = checkSameFile(m.path, *m.identity, identity.value_or(FileIdentity{})); !same) {
            return same.error();
        }
        return *opened;
    });
}

Expected<void> MemberFiles::checkUnchanged() const
{
    for (const auto& o : state_->open.cached()) {
        if (auto same = o->checkUnchanged(); !same) {
            return same;
        }
    }
    for (const auto& m : state_->members) {
        if (m.kept) {
            if (auto same = m.kept->checkUnchanged(); !same) {
                return same;
            }
        } else if (m.present && m.identity) {
            if (auto same = checkStillSame(m.path, *m.identity); !same) {
                return same;
            }
        }
    }
    return {};
}

Expected<FileIdentity> identityOfCheckpoint(const Checkpoint& c, const std::string& path)
{
    if (c.file) {
        if (auto id = identityOfFd(c.file->fd())) {
            return *id;
        }
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        Error e = makeError(ErrorCode::Io, "cannot stat: " + systemErrorText(errno));
        e.path = path;
        return e;
    }
    return identityOf(st);
}

FolderMemberRead readFolderMember(const source::Folder& folder, const std::string& name, const std::string& entry,
                                  std::size_t index, std::size_t total)
{
    FolderMemberRead out;
    if (const auto* local = dynamic_cast<const source::LocalFolder*>(&folder)) {
        auto member = local->memberPath(name, entry);
        if (!member) {
            out.checkpoint = member.error();
            out.stops = true;
            return out;
        }
        out.checkpoint = openMember(*member, index, total);
        std::error_code ec;
        out.missing = !out.checkpoint && !std::filesystem::is_regular_file(*member, ec);
        return out;
    }
    progress::noteReading(folder.pathOf(name));
    auto src = folder.open(name, entry);
    if (!src) {
        out.missing = folder.missing(src.error());
        out.stops = !out.missing;
        out.checkpoint = src.error();
        return out;
    }
    out.checkpoint = readSource(*src, folder.pathOf(name));
    return out;
}

void MemberCheckpoints::add(const std::string& path, const CheckpointPtr& first, bool remote)
{
    Member m;
    m.path = path;
    const std::size_t i = state_->members.size();
    if (first && remote) {
        m.present = true;
        m.kept = first;
    } else if (first) {
        if (auto identity = identityOfCheckpoint(*first, path)) {
            m.present = true;
            m.identity = *identity;
        }
    }
    state_->members.push_back(std::move(m));
    if (state_->members.back().present && !remote) {
        (void)state_->open.get(i, [&]() -> Expected<CheckpointPtr> { return first; });
    }
}

Expected<CheckpointPtr> MemberCheckpoints::get(std::size_t i) const
{
    const Member& m = state_->members.at(i);
    if (!m.present) {
        Error e = makeError(ErrorCode::Io, "cannot be read");
        e.path = m.path;
        return e;
    }
    progress::noteReading(m.path);  // which member a progress line names
    if (m.kept) {
        return m.kept;
    }
    return state_->open.get(i, [&]() -> Expected<CheckpointPtr> {
        auto ck = openMember(m.path, i, state_->members.size());
        auto identity = ck ? identityOfCheckpoint(**ck, m.path) : Expected<FileIdentity>(ck.error());
        if (!identity) {
            return identity.error();
        }
        if (auto same = checkSameFile(m.path, m.identity, *identity); !same) {
            return same.error();
        }
        return *ck;
    });
}

Expected<void> MemberCheckpoints::checkUnchanged() const
{
    return checkMembersUnchanged(state_->open.cached(), state_->members);
}

Expected<void> MemberCheckpoints::checkNotMember(const std::string& target) const
{
    struct stat st {};
    if (::stat(target.c_str(), &st) != 0) {
        return {};  // not there yet
    }
    const FileIdentity out = identityOf(st);
    for (const auto& m : state_->members) {
        if (m.present && !m.kept && m.identity.dev == out.dev && m.identity.ino == out.ino) {
            Error e = makeError(ErrorCode::Usage, "the output is " + m.path +
                                                      ", a file of the set being read; choose another output "
                                                      "(the input is never modified)");
            e.path = target;
            return e;
        }
    }
    return {};
}

}  // namespace ckpt::sharded
