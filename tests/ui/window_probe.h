// What the window tests of a remote input ask of a window and its document (tst_openurl over HTTP,
// tst_openurl_s3 over S3): one copy of each question.
#pragma once

#include "checkpoint/checkpoint.h"
#include "documentview.h"
#include "mainwindow.h"
#include "uitest.h"

#include <QAction>
#include <QSignalSpy>
#include <QStringList>

namespace ckpt::uitest {

inline QAction* action(const ui::MainWindow& w, const char* name)
{
    return w.findChild<QAction*>(QLatin1String(name));
}

// The tensors of fixture `name` read from disk, to compare a remote document with.
inline std::size_t tensorsOnDisk(const char* name)
{
    auto c = openCheckpoint(fixture(name).toStdString());
    return c ? (*c)->tensors.size() : 0;
}

// The codes of the view's findings, once its check has run (waited for up to 20 s; none if it has
// not run by then).
inline QStringList findingCodes(ui::DocumentView& v)
{
    if (!v.diagnosis()) {
        QSignalSpy ready(&v, &ui::DocumentView::findingsReady);
        if (!ready.wait(20000)) {
            return {};
        }
    }
    QStringList codes;
    for (const auto& f : v.diagnosis()->list) {
        codes << QString::fromStdString(f.code);
    }
    return codes;
}

}  // namespace ckpt::uitest
