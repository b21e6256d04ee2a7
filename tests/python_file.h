// Writes a test's input with the tests' Python (CKPTSCOPE_PYTHON, PyTorch 1.13 here): `script` runs
// with the file's path as sys.argv[1], so a fixture comes from the real writer, never by hand.
#pragma once

#include <QProcess>
#include <QString>
#include <QStringList>

namespace ckpt::test {

// What Python printed when it failed (or could not run); empty when it wrote the file.
inline QString writeWithPython(const QString& script, const QString& file)
{
    QProcess py;
    py.setProcessChannelMode(QProcess::MergedChannels);
    py.start(QStringLiteral(CKPTSCOPE_PYTHON), {QStringLiteral("-c"), script, file});
    if (!py.waitForFinished(120000)) {
        return QStringLiteral("python did not finish: ") + py.errorString();
    }
    if (py.exitStatus() != QProcess::NormalExit || py.exitCode() != 0) {
        const QString said = QString::fromUtf8(py.readAll());
        return said.isEmpty() ? QStringLiteral("python failed") : said;
    }
    return {};
}

}  // namespace ckpt::test
