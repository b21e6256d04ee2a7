// The window's executable: started by `ckptscope` (main.cpp) when no subcommand is given.
#include "mainapp.h"

int main(int argc, char** argv)
{
    return ckpt::ui::runApplication(argc, argv);
}
