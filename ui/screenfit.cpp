#include "screenfit.h"

#include <QGuiApplication>
#include <QMargins>
#include <QScreen>
#include <QWidget>

#include <algorithm>

namespace ckpt::ui {
namespace {

const QScreen* screenOf(const QWidget* window)
{
    const QScreen* screen = window != nullptr ? window->screen() : nullptr;
    return screen != nullptr ? screen : QGuiApplication::primaryScreen();
}

}  // namespace

QRect fittedInto(QRect frame, const QRect& available)
{
    frame.setSize(frame.size().boundedTo(available.size()));
    frame.moveLeft(std::clamp(frame.left(), available.left(), available.right() - frame.width() + 1));
    frame.moveTop(std::clamp(frame.top(), available.top(), available.bottom() - frame.height() + 1));
    return frame;
}

QMargins frameMargins(const QWidget* window)
{
    const QRect outer = window->frameGeometry();
    const QRect inner = window->geometry();
    return {inner.left() - outer.left(), inner.top() - outer.top(), outer.right() - inner.right(),
            outer.bottom() - inner.bottom()};
}

void keepOnScreen(QWidget* window)
{
    const QScreen* screen = screenOf(window);
    if (screen == nullptr || window->isMaximized() || window->isFullScreen()) {
        return;
    }
    const QRect available = screen->availableGeometry();
    const QRect frame = window->frameGeometry();
    const QRect fitted = fittedInto(frame, available);
    if (fitted == frame) {
        return;
    }
    const QMargins margins = frameMargins(window);
    window->resize(fitted.size().shrunkBy(margins));
    window->move(fitted.topLeft());  // a top-level window's pos() is its frame's
}

void placeOver(QWidget* window, const QWidget* over)
{
    const QWidget* anchor = over != nullptr ? over->window() : nullptr;
    const QScreen* screen = screenOf(anchor != nullptr ? anchor : window);
    if (screen == nullptr) {
        return;
    }
    const QMargins margins = anchor != nullptr ? frameMargins(anchor) : QMargins();
    const QRect available = screen->availableGeometry();
    QRect frame(QPoint(), window->size().grownBy(margins));
    frame.moveCenter(anchor != nullptr ? anchor->frameGeometry().center() : available.center());
    const QRect fitted = fittedInto(frame, available);
    window->resize(fitted.size().shrunkBy(margins));
    window->move(fitted.topLeft());
}

}  // namespace ckpt::ui
