// Shared set-up for the widget tests: a headless platform when none is set, stable font metrics,
// settings kept out of the user's own configuration, and fixture paths.
#pragma once

#include <QCoreApplication>
#include <QFileInfo>
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
    // One settings file per test program: ctest runs them in parallel, and two programs sharing
    // one file saw each other's recent files and column widths.
    QCoreApplication::setApplicationName(QStringLiteral("ckptscope-tests-") +
                                         QFileInfo(QStringLiteral("/proc/self/exe")).symLinkTarget().section(u'/', -1));
}

inline QString fixture(const char* name)
{
    return QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/") + QLatin1String(name);
}

}  // namespace ckpt::uitest
