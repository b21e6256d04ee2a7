#!/usr/bin/env bash
# Proves a built ckptscope .deb is complete on its own: installs it with apt into a clean Debian 12
# (bookworm, minbase) root so every dependency comes from the archive exactly as a user gets it,
# then runs the headless commands on the bundled sample inside that root.
#
#   scripts/test-deb.sh build-package/ckptscope_0.1.0_amd64.deb
#   scripts/test-deb.sh --extract DEB   # no mirror: dpkg-deb -x into a temp root, ldd + run there
#
# Needs root, debootstrap and the mirror configured in /etc/apt/sources.list(.d) (override with
# CKPTSCOPE_DEBIAN_MIRROR / CKPTSCOPE_DEBIAN_SECURITY). The downloaded base system is cached as a
# debootstrap --make-tarball in build-package/ and the .debs apt fetched in build-package/apt-archives/,
# so a rerun skips the downloads (first run about 6 minutes here, a rerun about 2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${CKPTSCOPE_PACKAGE_DIR:-$root/build-package}
mode=chroot
if [ "${1:-}" = "--extract" ]; then
    mode=extract
    shift
fi
if [ $# -ne 1 ] || [ ! -f "$1" ]; then
    echo "usage: $0 [--extract] PATH/TO/ckptscope_VERSION_ARCH.deb" >&2
    exit 2
fi
deb=$(realpath "$1")
sample=/usr/share/ckptscope/ddp_checkpoint.pt
mkdir -p "$cache"

t0=$(date +%s)
step() { printf '\n== [%4ss] %s\n' "$(($(date +%s) - t0))" "$*" >&2; }
fail() {
    echo "test-deb: FAIL: $*" >&2
    exit 1
}

# The first URI serving Suite $1 in the host's apt sources (deb822 .sources or one-line .list).
host_uri_for_suite() {
    local suite=$1 f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v want="$suite" '
            function flush() { if (isdeb && hit && uri != "") { print uri; found = 1; exit } isdeb = hit = 0; uri = "" }
            /^[[:space:]]*$/ { flush(); next }
            /^Types:/ { for (i = 2; i <= NF; i++) if ($i == "deb") isdeb = 1 }
            /^URIs:/ { uri = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == want) hit = 1 }
            END { if (!found) flush() }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk -v want="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                                            if ($(i + 1) == want) { print $i; exit } }' "$f"
    done
}

# Runs a command inside the root with a clean environment: nothing from this machine's shell
# (LD_LIBRARY_PATH, QT_*, PATH entries into the build tree) reaches the installed binary.
in_root() { chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

# Exit 0 or 1 ("ran and found problems") is a working check; 2 and up (unreadable, crash) is not.
run_check() {
    local rc=0
    in_root ckptscope check "$@" || rc=$?
    [ "$rc" -le 1 ] || fail "ckptscope check $* exited $rc"
}

run_commands() {
    step "ckptscope --version"
    in_root ckptscope --version || fail "--version"
    step "ckptscope inspect $sample"
    in_root ckptscope inspect "$sample" || fail "inspect of the bundled sample"
    step "ckptscope check $sample"
    run_check "$sample"
    step "ckptscope convert $sample -o /tmp/out.pt --single-card"
    in_root ckptscope convert "$sample" -o /tmp/out.pt --single-card || fail "convert --single-card"
    step "ckptscope inspect /tmp/out.pt"
    in_root ckptscope inspect /tmp/out.pt || fail "inspect of the converted file"
    step "ckptscope check --json /tmp/out.pt"
    run_check --json /tmp/out.pt
    # The LibTorch helper is a separate executable: this proves it and Debian's libtorch load.
    step "ckptscope testload $sample --device cpu"
    in_root ckptscope testload "$sample" --device cpu || fail "testload on the CPU (torch helper)"
    if in_root test -e /usr/lib/x86_64-linux-gnu/qt6/plugins/platforms/libqoffscreen.so; then
        # The window needs no display with Qt's offscreen platform: still running after a few
        # seconds (timeout's 124) means it found its plugins, opened the sample and sat in its loop.
        step "window: QT_QPA_PLATFORM=offscreen ckptscope $sample (5 s)"
        local rc=0
        in_root env QT_QPA_PLATFORM=offscreen timeout 5 ckptscope "$sample" || rc=$?
        [ "$rc" -eq 124 ] || fail "the window exited with $rc before the timeout"
        echo "the window was still running after 5 s"
    fi
    step "ldd: every library of the installed executables resolves inside the root"
    local exe
    for exe in /usr/bin/ckptscope /usr/libexec/ckptscope/ckptscope-gui /usr/libexec/ckptscope/ckptscope-torch-helper; do
        in_root test -x "$exe" || continue
        if in_root ldd "$exe" | grep -q 'not found'; then
            in_root ldd "$exe" | grep 'not found' >&2
            fail "$exe has unresolved libraries"
        fi
        echo "$exe: $(in_root ldd "$exe" | wc -l) libraries, all found"
    done
}

# --- fallback without a mirror ---------------------------------------------------------------
# The files come from the .deb only, the libraries from this machine's /usr/lib: ldd must name no
# path inside the build tree and none may be missing.
if [ "$mode" = extract ]; then
    rootfs=$(mktemp -d)
    trap 'rm -rf "$rootfs"' EXIT
    step "dpkg-deb -x $deb $rootfs"
    dpkg-deb -x "$deb" "$rootfs"
    for exe in "$rootfs/usr/bin/ckptscope" "$rootfs/usr/libexec/ckptscope/ckptscope-gui" "$rootfs/usr/libexec/ckptscope/ckptscope-torch-helper"; do
        [ -x "$exe" ] || continue
        env -u LD_LIBRARY_PATH ldd "$exe" | tee /dev/stderr | grep -E "not found|$root" && fail "$exe resolves outside the system"
    done
    run=(env -i PATH=/usr/bin:/bin LANG=C.UTF-8 CKPTSCOPE_TORCH_HELPER="$rootfs/usr/libexec/ckptscope/ckptscope-torch-helper")
    "${run[@]}" "$rootfs/usr/bin/ckptscope" --version
    "${run[@]}" "$rootfs/usr/bin/ckptscope" inspect "$rootfs$sample" >/dev/null
    "${run[@]}" "$rootfs/usr/bin/ckptscope" convert "$rootfs$sample" -o "$rootfs/out.pt" --single-card
    "${run[@]}" "$rootfs/usr/bin/ckptscope" inspect "$rootfs/out.pt" >/dev/null
    step "PASS (extract mode: the system's libraries, not a clean root)"
    exit 0
fi

# --- the clean root ------------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null || fail "debootstrap is missing: apt-get install debootstrap"
mirror=${CKPTSCOPE_DEBIAN_MIRROR:-$(host_uri_for_suite bookworm | head -n1)}
security=${CKPTSCOPE_DEBIAN_SECURITY:-$(host_uri_for_suite bookworm-security | head -n1)}
mirror=${mirror:-http://deb.debian.org/debian}
tarball=$cache/debootstrap-bookworm-minbase.tgz
rootfs=$(mktemp -d "$cache/root.XXXXXX")
chmod 755 "$rootfs"  # it becomes /: mktemp's 0700 would lock out every user but root (apt's _apt too)

cleanup() {
    local rc=$?
    if mountpoint -q "$rootfs/proc"; then umount "$rootfs/proc" || umount -l "$rootfs/proc"; fi
    # Never delete a root that still has something mounted in it.
    if ! grep -q " $rootfs/" /proc/self/mounts; then rm -rf "$rootfs"; fi
    [ "$rc" -eq 0 ] || echo "test-deb: failed after $(($(date +%s) - t0)) s" >&2
    exit "$rc"
}
trap cleanup EXIT

if [ ! -s "$tarball" ]; then
    step "debootstrap --make-tarball (one time: downloads the minbase packages from $mirror)"
    scratch=$(mktemp -d "$cache/tarball.XXXXXX")
    debootstrap --variant=minbase --make-tarball="$tarball.part" bookworm "$scratch" "$mirror" >&2 ||
        {
            rm -rf "$scratch"
            fail "debootstrap could not fetch bookworm from $mirror (no mirror? try --extract)"
        }
    rm -rf "$scratch"
    mv "$tarball.part" "$tarball"
fi

step "debootstrap --unpack-tarball: a fresh minbase root in $rootfs"
debootstrap --variant=minbase --unpack-tarball="$tarball" bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    {
        tail -n 20 "$cache/debootstrap.log" >&2
        fail "debootstrap --unpack-tarball (log: $cache/debootstrap.log)"
    }

# The suites a Debian 12 user has: the release, its updates, and security.
{
    echo "deb $mirror bookworm main"
    echo "deb $mirror bookworm-updates main"
    [ -z "$security" ] || echo "deb $security bookworm-security main"
} >"$rootfs/etc/apt/sources.list"
cp "$deb" "$rootfs/tmp/ckptscope.deb"
# Cached archive .debs only save downloads: apt still checks each against the signed indexes.
if [ -d "$cache/apt-archives" ]; then
    cp "$cache/apt-archives/"*.deb "$rootfs/var/cache/apt/archives/" 2>/dev/null || true
fi

step "apt-get update"
in_root apt-get update -q >&2 || fail "apt-get update in the root"
step "apt-get install --no-install-recommends /tmp/ckptscope.deb (Depends alone must be enough)"
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /tmp/ckptscope.deb >&2 ||
    fail "apt-get install of the package"
mkdir -p "$cache/apt-archives"
cp -u "$rootfs/var/cache/apt/archives/"*.deb "$cache/apt-archives/" 2>/dev/null || true

step "installed package"
in_root dpkg-query -W -f='${Package} ${Version} ${Status}\n' ckptscope
in_root dpkg -L ckptscope | grep -c . | sed 's/^/files installed: /'

# The client finds its LibTorch helper through /proc/self/exe, so /proc is mounted for the run.
mount -t proc proc "$rootfs/proc"
run_commands
step "PASS: the package installs into a clean Debian 12 root and works there"
