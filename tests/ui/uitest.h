// Shared set-up for the widget tests: a headless platform when none is set, stable font metrics,
// settings kept out of the user's own configuration, and fixture paths.
#pragma once

#include <QCoreApplication>
#include <QStandardPaths>
#include <QString>
#include <QtGlobal>

namespace ckpt::uitest {

inline void initMain()
{
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
        qputenv("QT_QPA_PLATFORM", "offscreen");
    }
    QCoreApplication::setAttribute(Qt::AA_Use96Dpi);
    QStandardPaths::setTestModeEnabled(true);  // QSettings go to ~/.qttest, not the user's config
    QCoreApplication::setOrganizationName(QStringLiteral("ckptscope-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("ckptscope-tests"));
}

inline QString fixture(const char* name)
{
    return QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/") + QLatin1String(name);
}

}  // namespace ckpt::uitest
