#include "icons.h"

// Resources compiled into a static library are registered only when asked (the linker would
// otherwise drop them): Q_INIT_RESOURCE must be called outside any namespace.
static void initUiResources()
{
    Q_INIT_RESOURCE(ui);
}

namespace ckpt::ui::icons {
namespace {

QIcon load(const char* base)
{
    static const bool registered = (initUiResources(), true);
    (void)registered;
    QIcon icon;
    for (int size : {16, 32, 64}) {
        icon.addFile(QStringLiteral(":/icons/%1-%2.png").arg(QLatin1String(base)).arg(size), QSize(size, size));
    }
    return icon;
}

}  // namespace

#define CKPT_ICON(fn, file)                                                                                            \
    const QIcon& fn()                                                                                                  \
    {                                                                                                                  \
        static const QIcon icon = load(file);                                                                          \
        return icon;                                                                                                   \
    }

CKPT_ICON(app, "app")
CKPT_ICON(tensor, "tensor")
CKPT_ICON(dict, "dict")
CKPT_ICON(stateDict, "statedict")
CKPT_ICON(list, "list")
CKPT_ICON(module, "module")
CKPT_ICON(object, "object")
CKPT_ICON(scalar, "scalar")
CKPT_ICON(severityInfo, "severity-info")
CKPT_ICON(severityWarning, "severity-warning")
CKPT_ICON(severityError, "severity-error")

#undef CKPT_ICON

}  // namespace ckpt::ui::icons
