# Sourced by modern-torch.sh and torch2-python.sh: where the PyTorch 2.x root lives and how it is
# prepared for a run. Not a command of its own.
#   CKPTSCOPE_TORCH2_ROOT   the root (default /var/cache/ckptscope/torch2-root)
#   CKPTSCOPE_TORCH2_SUITE  the Debian suite it is made from (default forky, today's testing)
torch2_root=${CKPTSCOPE_TORCH2_ROOT:-/var/cache/ckptscope/torch2-root}
torch2_suite=${CKPTSCOPE_TORCH2_SUITE:-forky}
# The stamp is written last, after every package is installed; a root without it is not used.
torch2_stamp=$torch2_root/.ckptscope-torch2-ready
torch2_lock=$(dirname "$torch2_root")/.$(basename "$torch2_root").lock

# torch2_mounts ROOT DIR...: /proc, a private /dev/shm (mp.spawn's shared memory) and each host DIR
# bind-mounted at the same path inside ROOT, each only once (a path means the same inside and out).
# Called only inside a mount namespace of the caller's own (torch2_in_namespace): the mounts vanish
# with its last process, even one killed with -9, and are never seen from the host, where a later
# `rm -rf` of the root would descend into the binds and delete /tmp and the checkout.
torch2_mounts() {
    local root=$1 dir
    shift
    mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
    mkdir -p "$root/dev/shm"
    mountpoint -q "$root/dev/shm" || mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
    # The sanitizer runtimes of the host's compiler, for an instrumented ckptscope (the asan preset,
    # scripts/test-asan.sh) run inside the root: testing's own would be another GCC's, and minbase
    # has none. Copied only where the root lacks that soname, so no package of the root is shadowed.
    local lib
    for lib in /usr/lib/x86_64-linux-gnu/libasan.so.8* /usr/lib/x86_64-linux-gnu/libubsan.so.1*; do
        [[ -e $lib && ! -e $root$lib ]] && cp -a "$lib" "$root$lib"
    done
    for dir in "$@"; do
        [[ -d $dir ]] || continue
        dir=$(realpath "$dir")
        [[ $dir == / ]] && continue
        mkdir -p "$root$dir"
        mountpoint -q "$root$dir" || mount --bind "$dir" "$root$dir"
    done
}

# torch2_can_unshare: whether this host lets us make a private mount namespace (root, and no seccomp
# or user-namespace rule against unshare(CLONE_NEWNS)); the reason on stdout when not.
torch2_can_unshare() {
    local err
    if ! command -v unshare >/dev/null; then
        echo "no unshare command (util-linux)"
        return 1
    fi
    if ! err=$(unshare --mount --propagation private true 2>&1); then
        echo "unshare --mount failed: ${err:-no reason given}"
        return 1
    fi
}

# torch2_in_namespace ROOT DIR... -- COMMAND...: sets the array torch2_ns to the command line that runs
# COMMAND (a program) in a new mount namespace with private propagation, after torch2_mounts ROOT
# DIR...; the caller runs "${torch2_ns[@]}", or execs it. Nothing mounted there is visible outside,
# and all of it goes when the namespace's last process exits, however it exits (kill -9 included).
torch2_in_namespace() {
    local root=$1 dirs=()
    shift
    while [[ $# -gt 0 && $1 != -- ]]; do
        dirs+=("$1")
        shift
    done
    shift
    # shellcheck disable=SC2016 # expanded by the inner shell
    torch2_ns=(unshare --mount --propagation private -- bash -c '
        set -euo pipefail
        . "$1"
        root=$2
        n=$3
        shift 3
        torch2_mounts "$root" "${@:1:n}"
        shift "$n"
        exec "$@"' torch2-ns "${BASH_SOURCE[0]}" "$root" "${#dirs[@]}" "${dirs[@]}" "$@")
}

# torch2_mounted ROOT: every mount point at or under ROOT as the host sees them (none should be).
torch2_mounted() {
    local root
    root=$(realpath "$1")
    findmnt -rn -o TARGET | awk -v r="$root" '$0 == r || index($0, r "/") == 1'
}

# torch2_refuse_mounted ROOT: exit 1 with one line when anything is mounted under ROOT, so that no
# `rm -rf` here ever descends into a bind of /tmp or the checkout (left by an older version of these
# scripts, which mounted in the host's namespace, or by hand).
torch2_refuse_mounted() {
    local left
    left=$(torch2_mounted "$1")
    [[ -z $left ]] && return 0
    echo "modern-torch.sh: refusing to delete $1: $(wc -l <<<"$left") mount(s) under it (first: $(head -n1 <<<"$left")); unmount them (umount -R $1/...) and run again" >&2
    exit 1
}

# torch2_remove DIR: deletes DIR (a root, or a build of one), after torch2_refuse_mounted DIR. Every
# deletion of modern-torch.sh goes through it; --one-file-system alone would not stop at a bind of a
# folder on the same filesystem (/tmp, the checkout), which is the mount that matters.
torch2_remove() {
    torch2_refuse_mounted "$1"
    rm -rf --one-file-system "$1"
}
