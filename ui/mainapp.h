// The window's entry point, called by app/main.cpp when argv[1] is not a subcommand.
#pragma once

namespace ckpt::ui {

// Creates the QApplication and the main window, opens the files named on the command line, and
// runs the event loop. Returns the application's exit code.
int runApplication(int argc, char** argv);

}  // namespace ckpt::ui
