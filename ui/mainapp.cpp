#include "mainapp.h"

#include "icons.h"
#include "mainwindow.h"

#include <QApplication>
#include <QStringList>

namespace ckpt::ui {

int runApplication(int argc, char** argv)
{
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("ckptscope"));
    QApplication::setOrganizationName(QStringLiteral("ckptscope"));
    QApplication::setApplicationVersion(QStringLiteral(CKPTSCOPE_VERSION));
    QApplication::setWindowIcon(icons::app());
    QApplication::setDesktopFileName(QStringLiteral("io.github.ckptscope.ckptscope"));

    MainWindow window;
    window.show();
    QStringList files = QApplication::arguments();
    files.removeFirst();
    window.openFiles(files);
    return QApplication::exec();
}

}  // namespace ckpt::ui
