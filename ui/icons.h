// The window's icons, loaded once from resources/ui.qrc at 16/32/64 px so they stay sharp on
// high-DPI screens (the SVG sources sit beside them for packaging).
#pragma once

#include <QIcon>

namespace ckpt::ui::icons {

const QIcon& app();
const QIcon& tensor();
const QIcon& dict();
const QIcon& stateDict();
const QIcon& list();
const QIcon& module();
const QIcon& object();
const QIcon& scalar();
const QIcon& severityInfo();
const QIcon& severityWarning();
const QIcon& severityError();

}  // namespace ckpt::ui::icons
