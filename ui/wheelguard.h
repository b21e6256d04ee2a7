// Scrolling a panel must not change its settings: a wheel turned over a combo box or spin box that
// the user has not clicked or tabbed into scrolls the panel, as it would over a label. One pass of
// the wheel over the Export panel once turned Format into safetensors and Preset into Custom.
#pragma once

class QWidget;

namespace ckpt::ui {

// Every combo box and spin box under `root` (now): it takes focus by click or Tab only, never by the
// wheel, and while it has no focus the wheel goes on to the scroll area around it.
void guardWheel(QWidget* root);

}  // namespace ckpt::ui
