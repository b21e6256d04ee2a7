// The Help menu's pages: the Guide (the README's tour, built into the program from README.md, so the
// two cannot say different things), the keyboard shortcuts (read from the menus themselves), and
// where the rest of the documentation is (each command's --help, the man page, the project page).
#pragma once

#include <QList>
#include <QPair>
#include <QString>

class QDialog;
class QMenuBar;
class QWidget;

namespace ckpt::ui::help {

// The tour of README.md as Markdown, without its pictures.
[[nodiscard]] QString guideMarkdown();
// Each shortcut of the menus under `menus` as (what it does, its keys), in menu order, then those of
// panels (Esc in the filter): the Keyboard Shortcuts page, and what a test holds the README's table to.
[[nodiscard]] QList<QPair<QString, QString>> shortcuts(const QMenuBar* menus);

// Each page as a window of its own over `parent` (shown, deleted when closed).
QDialog* showGuide(QWidget* parent);
QDialog* showShortcuts(QWidget* parent, const QMenuBar* menus);
QDialog* showDocumentation(QWidget* parent);
void showAbout(QWidget* parent);

}  // namespace ckpt::ui::help
