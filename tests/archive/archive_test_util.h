// Helpers shared by the archive tests: files as byte vectors, and the Python oracle.
#pragma once

#include "util/bytes.h"

#include <QByteArray>
#include <QFile>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QTest>

#include <vector>

namespace archive_test {

inline ckpt::Bytes bytesOf(const QByteArray& a)
{
    return {reinterpret_cast<const std::byte*>(a.constData()), static_cast<std::size_t>(a.size())};
}

inline QByteArray readAll(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    return f.readAll();
}

inline bool writeAll(const QString& path, const QByteArray& data)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(data) == data.size();
}

struct PyResult {
    int exitCode = -1;
    QByteArray out;
    QByteArray err;
};

// Runs `script` with the torch-enabled Python; the script text is passed with -c.
inline PyResult runPython(const QString& script, const QStringList& args = {}, int timeoutMs = 300000)
{
    QProcess p;
    p.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), script} + args);
    PyResult r;
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        r.err = "python timed out";
        return r;
    }
    r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

}  // namespace archive_test
