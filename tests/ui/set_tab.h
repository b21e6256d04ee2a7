// A set's tab in the window is a DocumentView whose document has a SetPart (ui/document.h).
#pragma once

#include "documentview.h"
#include "mainwindow.h"

namespace ckpt::uitest {

// The tab at `i` when it holds a multi-file checkpoint; null for a file's tab or no tab.
inline ckpt::ui::DocumentView* setTab(const ckpt::ui::MainWindow& w, int i)
{
    auto* v = w.documentView(i);
    return v != nullptr && v->document()->set ? v : nullptr;
}

}  // namespace ckpt::uitest
