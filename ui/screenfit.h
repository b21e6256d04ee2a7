// Top-level windows that stay on the screen they open on: a geometry saved on a larger screen, or a
// second window placed over the first, never leaves its frame, its buttons or its status bar below
// or beside the screen's edge.
#pragma once

#include <QRect>

class QWidget;

namespace ckpt::ui {

// `frame` (a window's outer rectangle) shrunk to fit `available` and moved inside it.
[[nodiscard]] QRect fittedInto(QRect frame, const QRect& available);

// The window manager's frame around `window` (title bar and borders), as the space it adds to each
// side; none before the window is shown.
[[nodiscard]] QMargins frameMargins(const QWidget* window);

// Moves and shrinks the shown top-level `window` so that its frame lies within its screen's
// available geometry (a geometry restored from another screen). Nothing when it already does.
void keepOnScreen(QWidget* window);

// Places the top-level `window`, sized, centred over `over`'s window and inside the available
// geometry of that window's screen, its frame (taken to be as large as `over`'s) included. For a
// second window the window manager would place anywhere (at y=335 with height 680 on a 1000-pixel
// screen).
void placeOver(QWidget* window, const QWidget* over);

}  // namespace ckpt::ui
