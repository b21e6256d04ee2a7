// Runs the PyTorch oracle (CKPTSCOPE_PYTHON, torch 1.13) for the diagnose tests.
#pragma once

#include <QProcess>
#include <QString>
#include <QStringList>

#include <string>

namespace diagtest {

inline std::string fixture(const char* name)
{
    return std::string(CKPTSCOPE_FIXTURE_DIR) + "/" + name;
}

// Runs `python -c script args...` with tests/fixtures on the path; returns stdout (trimmed), or
// "PYTHON FAILED: <stderr>" so a broken oracle shows up in the comparison that uses it.
inline QString python(const QString& script, const QStringList& args = {})
{
    QProcess p;
    QStringList all{QStringLiteral("-c"), script};
    all += args;
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("PYTHONPATH"), QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/fixtures"));
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(CKPTSCOPE_PYTHON), all);
    if (!p.waitForFinished(300000)) {
        return QStringLiteral("PYTHON FAILED: timeout");
    }
    const auto out = QString::fromUtf8(p.readAllStandardOutput()).trimmed();
    if (p.exitCode() != 0) {
        return QStringLiteral("PYTHON FAILED: ") + QString::fromUtf8(p.readAllStandardError());
    }
    return out;
}

}  // namespace diagtest
