#!/usr/bin/env python3
"""Takes the README screenshots of the real window under Xvfb.

    docs/screenshots/take_screenshots.py BUILD_DIR CHECKPOINT [--helper PATH] [--maximize]
    docs/screenshots/take_screenshots.py BUILD_DIR CHECKPOINT --fake-gpus
    docs/screenshots/take_screenshots.py BUILD_DIR CHECKPOINT --size 1024x700 --suffix -small
    docs/screenshots/take_screenshots.py BUILD_DIR CHECKPOINT --only main,export --suffix -model

Starts Xvfb on :99 with the openbox window manager (frames, placement and focus as a desktop gives
them), runs BUILD_DIR/app/ckptscope on CHECKPOINT with a throw-away configuration, so the window
opens at the size a new user gets on that screen, switches panels with the window's own shortcuts
(sent through XTest, no xdotool needed) and saves the window with its frame as main.png
(findings), testload.png (a CPU test-load and its memory chart) and export.png (the plan preview)
next to this script with ImageMagick's `import`. With --fake-gpus it runs on the tests' fake
two-GPU NVIDIA driver instead and saves ddp-replay.png: four DDP ranks loading CHECKPOINT without
map_location. --size sets the screen (1600x1000 by default) and --suffix is added to each file name,
so one run per screen size keeps both sets; --only takes some of main, export and testload;
--maximize maximizes the window first, as a user of a large screen does.
scripts/screenshots.sh runs it for every README picture. Xvfb gets the first free display from :99
on, so two runs side by side do not meet.
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
        """The top-level window whose title contains title_part, given the keyboard focus (openbox
        gives it to a new window; a run that raced it is sure of it). Returns its id."""
        for _ in range(20):
            tree = subprocess.run(["xwininfo", "-display", DISPLAY, "-root", "-tree"], capture_output=True,
                                  text=True).stdout
            for line in tree.splitlines():
                fields = line.split()
                if title_part in line and fields and fields[0].startswith("0x"):
                    window = int(fields[0], 16)
                    self.x11.XSetInputFocus(self.dpy, window, 2, 0)  # RevertToParent, CurrentTime
                    self.x11.XFlush(self.dpy)
                    return window
            time.sleep(0.5)
        raise SystemExit(f"no window titled *{title_part}*")

    def maximize(self, window):
        """Asks the window manager to maximize `window` (an EWMH _NET_WM_STATE client message, as a
        title bar's button sends it)."""
        class ClientMessage(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int), ("serial", ctypes.c_ulong), ("send_event", ctypes.c_int),
                        ("display", ctypes.c_void_p), ("window", ctypes.c_ulong), ("message_type", ctypes.c_ulong),
                        ("format", ctypes.c_int), ("data", ctypes.c_long * 5), ("pad", ctypes.c_long * 12)]
        self.x11.XInternAtom.restype = ctypes.c_ulong
        self.x11.XInternAtom.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        self.x11.XDefaultRootWindow.restype = ctypes.c_ulong
        self.x11.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
        self.x11.XSendEvent.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_long,
                                        ctypes.POINTER(ClientMessage)]
        atom = lambda name: self.x11.XInternAtom(self.dpy, name, 0)  # noqa: E731
        event = ClientMessage(type=33, send_event=1, window=window, message_type=atom(b"_NET_WM_STATE"), format=32)
        event.data[:3] = [1, atom(b"_NET_WM_STATE_MAXIMIZED_VERT"), atom(b"_NET_WM_STATE_MAXIMIZED_HORZ")]
        substructure = (1 << 19) | (1 << 20)  # SubstructureNotifyMask | SubstructureRedirectMask
        self.x11.XSendEvent(self.dpy, self.x11.XDefaultRootWindow(self.dpy), 0, substructure, ctypes.byref(event))
        self.x11.XFlush(self.dpy)

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


WINDOW = None  # the window's id, once it is shown


def shot(name):
    """The window with its frame (title bar and borders), as a desktop shows it."""
    stem, ext = os.path.splitext(name)
    path = os.path.join(HERE, stem + SUFFIX + ext)
    subprocess.run(["import", "-display", DISPLAY, "-frame", "-window", hex(WINDOW), path], check=True)
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
    global WINDOW
    size = option("--size", "1600x1000")
    xvfb = subprocess.Popen(["Xvfb", DISPLAY, "-screen", "0", size + "x24", "-nolisten", "tcp"])
    time.sleep(1.5)
    wm = subprocess.Popen(["openbox"], env=dict(os.environ, DISPLAY=DISPLAY), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    time.sleep(1)
    app = None
    try:
        app = subprocess.Popen([os.path.join(build, "app", "ckptscope"), checkpoint], env=env)
        time.sleep(4)
        keys = XKeys(DISPLAY)
        WINDOW = keys.focus("— ckptscope\"")
        if "--maximize" in sys.argv:
            keys.maximize(WINDOW)
            time.sleep(1)
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
        wm.terminate()
        wm.wait()
        xvfb.terminate()
        xvfb.wait()


if __name__ == "__main__":
    main()
