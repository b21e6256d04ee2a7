// Opening a file in a MainWindow and waiting for its tab, for the widget tests that drive the
// whole window.
#pragma once

#include "documentview.h"
#include "mainwindow.h"

#include <QSignalSpy>
#include <QString>

namespace ckpt::uitest {

// The view of `path` once its read has finished, or null when it has not within 20 s.
inline ui::DocumentView* openOne(ui::MainWindow& w, const QString& path)
{
    QSignalSpy opened(&w, &ui::MainWindow::documentOpened);
    w.openFiles({path});
    if (!opened.wait(20000)) {
        return nullptr;
    }
    return w.currentView();
}

}  // namespace ckpt::uitest
