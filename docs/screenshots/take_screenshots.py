#!/usr/bin/env python3
"""Takes the README screenshots of the real window under Xvfb.

    docs/screenshots/take_screenshots.py BUILD_DIR CHECKPOINT [--helper PATH]
    docs/screenshots/take_screenshots.py BUILD_DIR CHECKPOINT --fake-gpus
    docs/screenshots/take_screenshots.py BUILD_DIR CHECKPOINT --size 1024x700 --suffix -small
    docs/screenshots/take_screenshots.py BUILD_DIR CHECKPOINT --only main,export --suffix -model

Starts Xvfb on :99, runs BUILD_DIR/app/ckptscope on CHECKPOINT with a throw-away configuration,
switches panels with the window's own shortcuts (sent through XTest, no xdotool needed) and saves
main.png (findings), testload.png (a CPU test-load and its memory chart) and export.png (the plan
preview) next to this script with ImageMagick's `import`. With --fake-gpus it runs on the tests'
fake two-GPU NVIDIA driver instead and saves ddp-replay.png: four DDP ranks loading CHECKPOINT
without map_location. --size sets the screen (and so the window; 1600x1000 by default) and
--suffix is added to each file name, so one run per screen size keeps both sets; --only takes
some of main, export and testload. scripts/screenshots.sh runs it for every README picture.
Xvfb gets the first free display from :99 on, so two runs side by side do not meet.
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_display():
    """The first X display from :99 on that no server holds (its socket and lock are absent)."""
    n = 99
    while os.path.exists(f"/tmp/.X11-unix/X{n}") or os.path.exists(f"/tmp/.X{n}-lock"):
        n += 1
    return f":{n}"


DISPLAY = free_display()


class XKeys:
    """Key presses through the XTest extension (libXtst), as a user would type them."""

    def __init__(self, display):
        self.x11 = ctypes.CDLL("libX11.so.6")
        self.xtst = ctypes.CDLL("libXtst.so.6")
        self.x11.XOpenDisplay.restype = ctypes.c_void_p
        self.x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
        self.x11.XStringToKeysym.restype = ctypes.c_ulong
        self.x11.XStringToKeysym.argtypes = [ctypes.c_char_p]
        self.x11.XKeysymToKeycode.restype = ctypes.c_ubyte
        self.x11.XKeysymToKeycode.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
        self.x11.XFlush.argtypes = [ctypes.c_void_p]
        self.xtst.XTestFakeKeyEvent.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_ulong]
        self.x11.XSetInputFocus.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_ulong]
        self.dpy = self.x11.XOpenDisplay(display.encode())
        if not self.dpy:
            raise SystemExit(f"cannot open display {display}")

    def focus(self, title_part):
        """Gives the keyboard focus to the top-level window whose title contains title_part
        (there is no window manager under Xvfb to do it)."""
        tree = subprocess.run(["xwininfo", "-display", DISPLAY, "-root", "-tree"], capture_output=True,
                              text=True).stdout
        for line in tree.splitlines():
            fields = line.split()
            if title_part in line and fields and fields[0].startswith("0x") and "+0+0" in line:
                self.x11.XSetInputFocus(self.dpy, int(fields[0], 16), 2, 0)  # RevertToParent, CurrentTime
                self.x11.XFlush(self.dpy)
                return
        raise SystemExit(f"no window titled *{title_part}*")

    def code(self, name):
        return self.x11.XKeysymToKeycode(self.dpy, self.x11.XStringToKeysym(name.encode()))

    def press(self, *names):
        codes = [self.code(n) for n in names]
        for c in codes:
            self.xtst.XTestFakeKeyEvent(self.dpy, c, 1, 0)
        for c in reversed(codes):
            self.xtst.XTestFakeKeyEvent(self.dpy, c, 0, 0)
        self.x11.XFlush(self.dpy)


def option(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


SUFFIX = option("--suffix", "")
ONLY = set(option("--only", "main,export,testload").split(","))


def shot(name):
    stem, ext = os.path.splitext(name)
    path = os.path.join(HERE, stem + SUFFIX + ext)
    subprocess.run(["import", "-display", DISPLAY, "-window", "root", path], check=True)
    print("wrote", path)


def main():
    build, checkpoint = sys.argv[1], os.path.abspath(sys.argv[2])
    env = dict(os.environ, DISPLAY=DISPLAY, XDG_CONFIG_HOME=tempfile.mkdtemp(), QT_QPA_PLATFORM="xcb")
    if "--helper" in sys.argv:
        env["CKPTSCOPE_TORCH_HELPER"] = os.path.abspath(sys.argv[sys.argv.index("--helper") + 1])
    fake = "--fake-gpus" in sys.argv
    if fake:
        devices = os.path.join(os.path.abspath(build), "tests", "device")
        env.update(CKPTSCOPE_CUDA_LIBRARY=os.path.join(devices, "libfake-cuda.so"),
                   CKPTSCOPE_NVML_LIBRARY=os.path.join(devices, "libfake-nvidia-ml.so"),
                   FAKE_GPU_STATE=os.path.join(tempfile.mkdtemp(), "gpu.state"), FAKE_CUDA_DEVICES="24576,24576",
                   FAKE_CUDA_CONTEXT_MIB="500", FAKE_CUDA_DELAY_US="3000")
    size = option("--size", "1600x1000")
    xvfb = subprocess.Popen(["Xvfb", DISPLAY, "-screen", "0", size + "x24", "-nolisten", "tcp"])
    time.sleep(1.5)
    app = None
    try:
        app = subprocess.Popen([os.path.join(build, "app", "ckptscope"), "-qwindowgeometry", size + "+0+0", checkpoint], env=env)
        time.sleep(4)
        keys = XKeys(DISPLAY)
        keys.focus("— ckptscope\"")
        time.sleep(0.5)
        if fake:
            keys.press("Control_L", "2")
            time.sleep(3)  # the inventory query
            keys.press("Control_L", "Shift_L", "l")
            time.sleep(10)  # four ranks load, hold and release
            shot("ddp-replay.png")
            return
        if "main" in ONLY:
            shot("main.png")
        if "export" in ONLY:
            keys.press("Control_L", "3")
            time.sleep(2)
            shot("export.png")
        if "testload" in ONLY:
            keys.press("Control_L", "2")
            time.sleep(3)  # the inventory query
            keys.press("Control_L", "l")
            time.sleep(12)  # helper start-up (LibTorch) and the load itself
            shot("testload.png")
    finally:
        if app:
            app.terminate()
            app.wait()
        xvfb.terminate()
        xvfb.wait()


if __name__ == "__main__":
    main()
