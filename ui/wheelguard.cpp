#include "wheelguard.h"

#include <QAbstractSpinBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QEvent>
#include <QPointer>
#include <QWidget>

namespace ckpt::ui {
namespace {

class WheelFilter : public QObject {
public:
    using QObject::QObject;

protected:
    bool eventFilter(QObject* watched, QEvent* event) override
    {
        if (event->type() == QEvent::Wheel) {
            const auto* control = qobject_cast<QWidget*>(watched);
            if (control != nullptr && !control->hasFocus()) {
                // Not delivered to the control; ignored, so Qt hands it to the parents (the panel's
                // scroll area).
                event->ignore();
                return true;
            }
        }
        return QObject::eventFilter(watched, event);
    }
};

// One filter for every guarded control, owned by the application.
QObject* wheelFilter()
{
    static QPointer<WheelFilter> filter;
    if (filter.isNull()) {
        filter = new WheelFilter(QCoreApplication::instance());
    }
    return filter;
}

void guard(QWidget* control)
{
    control->setFocusPolicy(Qt::StrongFocus);  // Qt::WheelFocus would let the wheel focus it first
    control->installEventFilter(wheelFilter());
}

}  // namespace

void guardWheel(QWidget* root)
{
    for (auto* box : root->findChildren<QComboBox*>()) {
        guard(box);
    }
    for (auto* spin : root->findChildren<QAbstractSpinBox*>()) {
        guard(spin);
    }
}

}  // namespace ckpt::ui
